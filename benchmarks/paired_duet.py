"""Rounds taking turns against the duet design, on the user-style suite of ``paired_pipelines.py``.

Run:   .venv/bin/python benchmarks/paired_duet.py --sessions 6 --planted 3
Writes benchmarks/results/paired_duet.json and .md.

The duet design (Bulej et al., ICPE 2020) runs both versions at once, each on
a core of its own, so that the machine's state is shared in time as well as
round by round, and a paired run takes about the time of one side. Here it
is ``TFPERF_DUET=1``: this session pinned to core 0 (``taskset -c 0``), the
baseline's partner to core 1, every round started on both sides together;
today's design (``--tfperf-against``'s default) takes turns on both cores,
the untimed side stopped. Sessions alternate between the two designs, so
that both meet the same spells of the machine; each design runs A/A sessions
(both trees identical) and planted ones (``change/`` declares 10% fewer items
for the same work, as in ``paired_pipelines.py``). Judged by the same rule,
the figures that tell the designs apart are the stated limit (the slowdown a
verdict says it catches; it grows with the per-round ratios' spread), the
share of "noisy" verdicts, the planted 10% caught, and the wall time.
Note what the duet changes besides the noise: each version has one core, so
a tf.data pipeline runs with a quarter of the parallelism a user's 2-core
runner gives it (autotune sizes its threads to the cores it sees).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from paired_pipelines import make_trees, summarise, verdicts  # noqa: E402


def run_session(root: Path, design: str, label: str, i: int) -> dict[str, Any]:
    out = root / f"{design}-{label}-{i}.json"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--tfperf",
               "--tfperf-against=../base", f"--tfperf-json={out}"]
    if design == "duet":
        env["TFPERF_DUET"] = "1"
        command = ["taskset", "-c", "0", *command]
    start = time.monotonic()
    proc = subprocess.run(command, cwd=root / "change", env=env, capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - start
    rows = verdicts(out) if out.exists() else []
    return {"design": design, "label": label, "i": i, "wall_s": wall, "exit": proc.returncode, "rows": rows,
            "load": os.getloadavg()[0], "tail": proc.stdout[-3000:] if proc.returncode not in (0, 1) else ""}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=6, help="A/A sessions of each design")
    parser.add_argument("--planted", type=int, default=3, help="planted sessions of each design")
    parser.add_argument("--out", default=str(HERE / "results" / "paired_duet"))
    args = parser.parse_args()
    if shutil.which("taskset") is None or (os.cpu_count() or 1) < 2:
        print("needs taskset and at least 2 cores", file=sys.stderr)
        return 2
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    sessions: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tfperf-duet-") as tmp:
        for label, count, plant in (("aa", args.sessions, 0.0), ("planted", args.planted, 0.1)):
            root = Path(tmp) / label
            make_trees(root, plant)
            for i in range(count):
                for design in (("turns", "duet") if i % 2 == 0 else ("duet", "turns")):
                    s = run_session(root, design, label, i)
                    sessions.append(s)
                    print(f"{label} {i} {design}: {[r['status'] for r in s['rows']]} "
                          f"{[round(r['mde'], 3) for r in s['rows']]} {s['wall_s']:.0f} s exit {s['exit']} "
                          f"load {s['load']:.1f}", flush=True)
    result: dict[str, Any] = {"commit": commit, "started": started,
                              "finished": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    for design in ("turns", "duet"):
        for label in ("aa", "planted"):
            mine = [s for s in sessions if s["design"] == design and s["label"] == label]
            result[f"{design}_{label}"] = summarise(mine)
        result[f"{design}_sessions"] = [s for s in sessions if s["design"] == design]
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["# Turns against the duet design (`benchmarks/paired_duet.py`)", "",
             f"Commit {commit}, {started}; sessions alternate between the designs.", "",
             "| design | A/A verdicts | false alarms | noisy | median stated limit | planted -10% caught "
             "| median wall (A/A session; planted where none) |", "|---|---|---|---|---|---|---|"]
    for design in ("turns", "duet"):
        aa, pl = result[f"{design}_aa"], result[f"{design}_planted"]
        label = "aa" if args.sessions else "planted"  # a planted-only run states the planted verdicts' limits
        limits = [r["mde"] for s in result[f"{design}_sessions"] for r in s["rows"]
                  if s["label"] == label and r["mde"] not in (None, float("inf"))]
        lines.append(f"| {design} | {aa['verdicts']} | {aa['regressed']} | {aa['noisy']} | "
                     f"{statistics.median(limits):.1%} | {pl['regressed']} of {pl['verdicts']} | "
                     f"{aa['median_wall_s'] or pl['median_wall_s']:.0f} s |" if limits else f"| {design} | no verdicts |")
    lines += ["", f"Per kind ({'A/A' if args.sessions else 'planted'}): median stated limit", ""]
    for design in ("turns", "duet"):
        kinds = result[f"{design}_aa" if args.sessions else f"{design}_planted"]["by_kind"]
        lines.append(f"- {design}: " + ", ".join(
            f"{k} {v['median_stated_limit']:.1%} ({v['noisy']} of {v['verdicts']} noisy)"
            for k, v in kinds.items() if v["median_stated_limit"] is not None))
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A cost paid once every few iterations: what the median-based throughput sees, and the workaround.

    .venv/bin/python benchmarks/periodic_stall.py [--repeats 3]

Throughput is items/s at the median iteration (``Timings.throughput_per_s``): robust to an iteration the
machine preempted, and blind to a cost that falls on fewer than half of the iterations. Two versions of a
1 ms step, compared in one process by ``tfperf.compare`` (the in-test gate; ``--tfperf-against`` and the
stored gate read the median the same way):

* ``per call``: one ``tfperf`` iteration is one call; the slow version spends 4 ms more on every eighth
  call (1.5x the time per item on average);
* ``per period``: the same two steps, one ``tfperf`` iteration being eight calls (``items=8``), the
  workaround the docs give: make one iteration cover the period of the cost (an epoch, a logging
  interval, the batches between two file reads);
* ``against``: the per-call cost added by a repository's last commit, judged by ``--tfperf-against=HEAD~1``.

For each, the plugin's verdict (with the paired gates' notice of a cost on a few iterations) and, from the
same run's JSON (each round's items over its summed time, the median round), the time per item at the mean:
what a user's epoch takes. Writes ``benchmarks/results/periodic_stall.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from explain_pipelines_against import git  # noqa: E402

SUITE = '''
import time


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def make(stall, calls=1):
    n = [0]

    def step():
        for _ in range(calls):
            n[0] += 1
            spin(0.001)
            if stall and n[0] % 8 == 0:
                spin(0.004)
    return step


def test_per_call(tfperf):
    tfperf.compare({"main": make(False), "pr": make(True)}, reference="main")


def test_per_period(tfperf):
    tfperf.compare({"main": make(False, 8), "pr": make(True, 8)}, reference="main", items=8)
'''


def _throughput(test: dict[str, Any]) -> dict[str, Any]:
    return next((m for m in (test.get("verdict") or {}).get("metrics") or [] if m.get("metric") == "throughput"), {})


def run_once(tmp: Path, index: int) -> list[dict[str, Any]]:
    out = tmp / f"run-{index}.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "--tfperf", "-p", "no:cacheprovider", "-q",
                           "--tfperf-json", str(out), "test_stall.py"], cwd=tmp, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    tests = json.loads(out.read_text())["tests"]
    rows = []
    for layout in ("per_call", "per_period"):
        main, pr = (tests[f"test_stall.py::test_{layout}[{side}]"] for side in ("main", "pr"))
        # items/s over each round's summed time: the mean iteration, what an epoch of these calls takes
        rounds = [statistics.median(t["measurement"]["summary"]["round_throughputs_per_s"]) for t in (main, pr)]
        verdict = _throughput(pr)
        rows.append({"layout": layout, "run": index, "exit": proc.returncode, "pr_status": verdict.get("status"),
                     "median_change": verdict.get("relative_change"), "mean_time_ratio": rounds[0] / rounds[1],
                     "message": verdict.get("message")})
    return rows


AGAINST = '''
import time

STALL = {stall}


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


n = [0]


def step():
    n[0] += 1
    spin(0.001)
    if STALL and n[0] % 8 == 0:
        spin(0.004)


def test_per_call(tfperf):
    tfperf(step)
'''


def run_against(tmp: Path, index: int) -> dict[str, Any]:
    """The same cost under ``--tfperf-against``: a repository whose last commit adds it, judged beside its parent."""
    repo = tmp / "repo"
    if not repo.exists():
        repo.mkdir()
        git(repo, "init", "-q")
        (repo / "pytest.ini").write_text("[pytest]\n")
        (repo / ".gitignore").write_text(".tfperf/\n*.json\n")
        (repo / "test_stall.py").write_text(AGAINST.format(stall=False))
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", "main")
        (repo / "test_stall.py").write_text(AGAINST.format(stall=True))
        git(repo, "commit", "-qam", "pr: 4 ms more every eighth call")
    out = tmp / f"against-{index}.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "--tfperf", "-p", "no:cacheprovider", "-q",
                           "--tfperf-against=HEAD~1", "--tfperf-json", str(out)], cwd=repo, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=900)
    test = json.loads(out.read_text())["tests"]["test_stall.py::test_per_call"]
    verdict = _throughput(test)
    return {"layout": "against", "run": index, "exit": proc.returncode, "pr_status": verdict.get("status"),
            "median_change": verdict.get("relative_change"), "mean_time_ratio": None,
            "message": verdict.get("message")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "periodic_stall")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tfperf-stall-") as name:
        tmp = Path(name)
        (tmp / "test_stall.py").write_text(SUITE)
        (tmp / "pytest.ini").write_text("[pytest]\n")
        for i in range(args.repeats):
            rows += run_once(tmp, i)
            rows.append(run_against(tmp, i))
    Path(str(args.out) + ".json").write_text(json.dumps({"commit": commit, "started": started, "rows": rows},
                                                        indent=1) + "\n")
    md = [f"# A cost every eighth call (commit {commit}, {started})", "",
          "`.venv/bin/python benchmarks/periodic_stall.py`", "",
          "| layout | run | the plugin's verdict on `pr` | its throughput change (median) | time per item, mean, "
          "pr/main | the notice of a cost on a few iterations |", "|---|---|---|---|---|---|"]
    for r in rows:
        change = f"{100 * r['median_change']:+.1f}%" if isinstance(r["median_change"], float) else "-"
        ratio = "-" if r["mean_time_ratio"] is None else f"{r['mean_time_ratio']:.2f}"
        message = str(r.get("message") or "")
        notice = message[message.index("but the mean"):][:60] + "..." if "but the mean" in message else "-"
        md.append(f"| {r['layout']} | {r['run']} | {r['pr_status']} | {change} | {ratio} | {notice} |")
    Path(str(args.out) + ".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

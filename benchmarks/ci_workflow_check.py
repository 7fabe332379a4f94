"""The copy-paste CI set-up tried as a new user would: red on a 20% slower commit, green on an unchanged one.

Run:   nice -n 10 .venv/bin/python benchmarks/ci_workflow_check.py                 (5 red + 5 green trials)
       nice -n 10 .venv/bin/python benchmarks/ci_workflow_check.py --ci gitlab     (the GitLab job's commands)
Writes benchmarks/results/ci_workflow_check.json (``_gitlab.json`` for --ci gitlab) after every trial, so a
partial run keeps its counts; the document names the commit measured and when.

Each trial generates a fresh project (tests/ci_workflow_repo.py): one tfperf
test, a pure-Python loop of N = 50,000 additions (about 1 ms a call), on
``main``; a pull request that either makes the loop 1.25x longer (throughput
-20%) or changes only the README; the CI's checkout of it (GitHub: HEAD
detached on the merge commit, GITHUB_BASE_REF=main; GitLab: HEAD detached on
the source branch, CI_MERGE_REQUEST_TARGET_BRANCH_NAME=main). Then the YAML's
own commands run there, verbatim but for ``python`` and the skipped install
line: ``pytest --tfperf --tfperf-against=auto ...``, with the plugin's
defaults (2 s budget, 10% tolerance), as a new user would have them. Red is
the job's non-zero exit, green its zero exit. Trials alternate red and green,
so a slow spell of the machine falls on both kinds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.ci_workflow_repo import (  # noqa: E402 - after the path is set
    GITHUB,
    GITLAB,
    github_commands,
    gitlab_commands,
    load,
    make_pull_request,
    run_job,
)

RESULTS = ROOT / "benchmarks" / "results" / "ci_workflow_check.json"
BASE_N = 50_000
SLOWER = 1.25  # 1.25x the work: throughput -20%


def verdict_line(output: str) -> str:
    """The throughput verdict the job printed (the failure's line, else the table's row)."""
    found = re.search(r"^\s*throughput: [\d,.]+ .*$", output, re.M)
    if found:
        return found.group(0).strip()
    row = re.search(r"^test_perf\.py::test_sum .*$", output, re.M)
    return row.group(0).strip() if row else ""


def _commit() -> str:
    """The plugin's commit, so that a figure can be told stale once the rule changes after it."""
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5, help="trials of each kind (default 5)")
    parser.add_argument("--ci", choices=("github", "gitlab"), default="github")
    parser.add_argument("--out", type=Path, default=None,
                        help="default: benchmarks/results/ci_workflow_check.json, or ..._gitlab.json for --ci gitlab")
    args = parser.parse_args(argv)
    if args.out is None:  # one file per CI, so that running both never overwrites the other's trials
        args.out = RESULTS if args.ci == "github" else RESULTS.with_name(RESULTS.stem + "_gitlab.json")
    commands = github_commands(load(GITHUB)) if args.ci == "github" else gitlab_commands(load(GITLAB))
    trials: list[dict[str, object]] = []
    document: dict[str, object] = {
        "what": "docs/ci workflow commands in generated pull requests: red = non-zero exit, green = zero exit",
        "ci": args.ci, "commands": commands, "base_n": BASE_N, "slower_factor": SLOWER,
        "settings": "plugin defaults (budget 2 s, tolerance 10%)", "trials": trials,
        "commit": _commit(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    for index in range(2 * args.trials):
        kind = "slower" if index % 2 == 0 else "unchanged"
        with tempfile.TemporaryDirectory(prefix="tfperf-ci-check-") as tmp:
            pr = make_pull_request(Path(tmp), args.ci, base_n=BASE_N,
                                   pr_n=round(BASE_N * SLOWER) if kind == "slower" else BASE_N)
            load_before = os.getloadavg()[0]
            started = time.monotonic()
            job = run_job(pr, commands)
            seconds = time.monotonic() - started
        expected = 1 if kind == "slower" else 0
        trial = {"kind": kind, "returncode": job.returncode, "as_expected": job.returncode == expected,
                 "seconds": round(seconds, 1), "load_1min_before": round(load_before, 2),
                 "load_1min_after": round(os.getloadavg()[0], 2), "verdict": verdict_line(job.output)}
        trials.append(trial)
        print(f"{kind:9s} rc={job.returncode} {'ok' if trial['as_expected'] else 'WRONG'} {seconds:5.1f} s "
              f"load {load_before:.1f}: {trial['verdict'][:160]}", flush=True)
        for name in ("slower", "unchanged"):
            done = [t for t in trials if t["kind"] == name]
            document[f"{name}_{'red' if name == 'slower' else 'green'}"] = \
                f"{sum(1 for t in done if t['as_expected'])} of {len(done)}"
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp_out = args.out.with_suffix(".json.tmp")
        tmp_out.write_text(json.dumps(document, indent=2) + "\n")
        os.replace(tmp_out, args.out)  # atomic: an interrupted run keeps the last complete document
    print(f"slower commit red: {document['slower_red']}; unchanged commit green: {document['unchanged_green']}")
    return 0 if all(t["as_expected"] for t in trials) else 1


if __name__ == "__main__":
    sys.exit(main())

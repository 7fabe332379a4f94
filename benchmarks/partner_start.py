"""What starting the partner ahead saves: one --tfperf-against run of a 1-test suite, two plugin trees taking turns.

    .venv/bin/python benchmarks/partner_start.py --trees /path/to/old /path/to/new --repeats 5

Each tree is a checkout of this repository (``git worktree add``); its ``pytest_tfperf`` is put first on
``PYTHONPATH`` for the runs, so the two differ only in their plugin code. Two suites of one TensorFlow test
(a matmul), each with a ``base/`` copy to run against:

- unchanged: the same test on both sides (one paired verdict, no fresh process);
- slower: the test's matmul is 2x wider than the base's (a red verdict, confirmed by two fresh pairs of
  processes; explanations off, so that only the processes' starts differ).

The trees' runs alternate, ``--repeats`` times each, and the wall time of the whole ``pytest`` command is
reported (median, and every run), with each run's exit code: the verdicts must not change.
Writes ``benchmarks/results/partner_start.md`` (``--out``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TEST = """import tensorflow as tf


def test_step(tfperf):
    x = tf.ones([{n}, {n}])
    tfperf(lambda: tf.matmul(x, x))
"""


def suite(root: Path, name: str, n_current: int, n_base: int) -> Path:
    here = root / name
    (here / "base").mkdir(parents=True)
    for directory, n in ((here, n_current), (here / "base", n_base)):
        (directory / "test_step.py").write_text(TEST.format(n=n))
        (directory / "pytest.ini").write_text("[pytest]\n")
    return here


def run(tree: Path, where: Path) -> tuple[float, int]:
    env = dict(os.environ, PYTHONPATH=str(tree), TF_CPP_MIN_LOG_LEVEL="3")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tfperf",
                           "--tfperf-against=base", "--no-tfperf-explain", "test_step.py"],
                          cwd=where, env=env, capture_output=True, text=True, timeout=600)
    return time.monotonic() - start, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trees", nargs=2, type=Path, required=True, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "partner_start.md")
    args = parser.parse_args()
    labels = [subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=t, capture_output=True, text=True)
              .stdout.strip() or str(t) for t in args.trees]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        suites = {"unchanged": suite(Path(tmp), "unchanged", 96, 96), "slower": suite(Path(tmp), "slower", 192, 96)}
        for name, where in suites.items():
            times: dict[str, list[float]] = {label: [] for label in labels}
            codes: dict[str, list[int]] = {label: [] for label in labels}
            for _ in range(args.repeats):
                for tree, label in zip(args.trees, labels):
                    seconds, code = run(tree.resolve(), where)
                    times[label].append(seconds)
                    codes[label].append(code)
                    print(f"{name} {label}: {seconds:.1f} s, exit {code}", flush=True)
            for label in labels:
                rows.append(f"| {name} | {label} | {statistics.median(times[label]):.1f} s | "
                            f"{', '.join(f'{t:.1f}' for t in times[label])} | {', '.join(map(str, codes[label]))} |")
    lines = ["# Starting the partner ahead: a 1-test --tfperf-against run, two plugin trees taking turns", "",
             f"`.venv/bin/python benchmarks/partner_start.py --trees BEFORE AFTER --repeats {args.repeats}`, "
             f"{os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
             "| suite | plugin commit | median wall time | every run (s) | exit codes |", "|---|---|---|---|---|", *rows]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

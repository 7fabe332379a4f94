"""Median and mean pull time of a held-out pipeline pair, taking turns in one process.

The paired gate compares each round's median iteration; a pipeline whose cost is paid on some pulls only moves the
mean more than the median. This prints both ratios for each case of a held-out set of
``benchmarks/explain_pipelines_against.py`` (healthy and regressed pipelines built in one process, 300 pulls to warm
each, then 4 turns of 1,000 timed pulls a side):

    .venv/bin/python benchmarks/pipeline_pulls.py --set heldout6 [--cases char_tokens ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import explain_pipelines_against as against  # noqa: E402
from explain_pipelines_heldout5_cases import HELDOUT5, HELPERS5  # noqa: E402
from explain_pipelines_heldout6_cases import HELDOUT6, HELPERS6  # noqa: E402

SETS = {"heldout5": (HELDOUT5, HELPERS5), "heldout6": (HELDOUT6, HELPERS6)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=sorted(SETS), default="heldout6")
    parser.add_argument("--cases", nargs="*")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--pulls", type=int, default=1000)
    args = parser.parse_args()
    cases, helpers = SETS[args.set]
    namespace: dict[str, object] = {}
    exec(against.COMMON + against.HELPERS + helpers, namespace)  # noqa: S102 - the benchmark's own helpers
    for case in args.cases or list(cases):
        _, healthy, regressed, _, _ = cases[case]
        pulls = {side: iter(eval(expression, namespace))  # noqa: S307 - the benchmark's own expressions
                 for side, expression in (("healthy", healthy), ("regressed", regressed))}
        for it in pulls.values():
            for _ in range(300):
                next(it)
        medians: dict[str, list[float]] = {side: [] for side in pulls}
        means: dict[str, list[float]] = {side: [] for side in pulls}
        for _ in range(args.turns):
            for side, it in pulls.items():
                times = []
                for _ in range(args.pulls):
                    start = time.perf_counter_ns()
                    next(it)
                    times.append(time.perf_counter_ns() - start)
                medians[side].append(statistics.median(times))
                means[side].append(statistics.fmean(times))
        by_median = statistics.median(h / r for h, r in zip(medians["healthy"], medians["regressed"]))
        by_mean = statistics.median(h / r for h, r in zip(means["healthy"], means["regressed"]))
        print(f"{case}: regressed/healthy throughput by median pull {by_median:.2f}, by mean pull {by_mean:.2f}; "
              f"healthy median pull {statistics.median(medians['healthy']) / 1e3:.1f} us, mean "
              f"{statistics.median(means['healthy']) / 1e3:.1f} us", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

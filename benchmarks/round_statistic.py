"""Which statistic of a round moves least between two identical processes taking turns: its median iteration
or its mean (the round's time over its iterations, what throughput is)?

The paired gate (``--tfperf-against``) compares, pair by pair, each round's median iteration time. A pipeline
that pays its cost on some pulls (a sequential map behind a prefetch, an epoch's end) leaves the median where it
was; a pipeline whose pulls are either served from the buffer or wait for it has a median that can jump between
the two. This asks the design question on unchanged code, without the plugin's judge: two fresh processes of the
same test (``paired_pipelines.SUITE``'s six tests), the idle one stopped (SIGSTOP, as ``against.freeze`` does),
40 rounds a side in turns (ABBA), each round the same number of iterations (about 0.1 s, as the gate's 20 rounds
of a 2 s budget); per pair of rounds the log ratio of each statistic, and the gate's own estimate of its
standard error (``gates.paired.paired_estimate``: a robust spread over the pairs' worth). A smaller standard
error is a smaller slowdown the gate can catch with as many rounds (the limit it states scales with it).

    .venv/bin/python benchmarks/round_statistic.py --sessions 3 --out benchmarks/results/round_statistic

Nothing of the plugin's measuring is used; the consumer loop is ``tfperf.iterate``'s (pull, then the step).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

ROUNDS = 40  # a side, in turns
ROUND_S = 0.1
WARM = 200  # iterations before the rounds

CHILD = r'''
import json, sys, time
import numpy as np
import tensorflow as tf
K = 1

class Capture:
    def iterate(self, ds, items, step):
        it = iter(ds)
        self.one = lambda: step(next(it))
    def __call__(self, fn, items):
        self.one = fn

ns = {}
exec(SUITE, ns)
cap = Capture()
ns[TEST](cap)
one = cap.one
for _ in range(WARM):
    one()
t = time.perf_counter()
n = 0
while time.perf_counter() - t < 0.5:
    one(); n += 1
per_round = max(1, int(n * ROUND_S / 0.5))
print(json.dumps({"ready": per_round}), flush=True)
for line in sys.stdin:
    if line.strip() != "go":
        break
    out = []
    for _ in range(per_round):
        s = time.perf_counter_ns(); one(); out.append(time.perf_counter_ns() - s)
    print(json.dumps(out), flush=True)
'''


def child(test: str) -> subprocess.Popen[str]:
    from paired_pipelines import SUITE

    code = f"SUITE = {SUITE.format(k=1)!r}\nTEST = {test!r}\nWARM = {WARM}\nROUND_S = {ROUND_S}\n" + CHILD
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env)


def pair_session(test: str) -> dict[str, Any]:
    a, b = child(test), child(test)
    sizes = []
    for p in (a, b):
        assert p.stdout is not None
        sizes.append(json.loads(p.stdout.readline())["ready"])
    procs = (a, b)
    for p in procs:
        p.send_signal(signal.SIGSTOP)
    rounds: dict[int, list[list[int]]] = {0: [], 1: []}
    try:
        for i in range(ROUNDS):
            order = (0, 1) if i % 2 == 0 else (1, 0)
            for side in order:
                p = procs[side]
                assert p.stdin is not None and p.stdout is not None
                p.send_signal(signal.SIGCONT)
                p.stdin.write("go\n")
                p.stdin.flush()
                rounds[side].append(json.loads(p.stdout.readline()))
                p.send_signal(signal.SIGSTOP)
    finally:
        for p in procs:
            p.send_signal(signal.SIGCONT)
            p.kill()
            p.wait()
    return {"test": test, "iterations": sizes, "rounds": rounds}


def summary(session: dict[str, Any]) -> dict[str, Any]:
    from pytest_tfperf import stats
    from pytest_tfperf.gates.paired import paired_estimate

    a, b = session["rounds"][0], session["rounds"][1]
    out: dict[str, Any] = {"test": session["test"]}
    for name, statistic in (("median", stats.median), ("mean", lambda xs: math.fsum(xs) / len(xs))):
        logs = [math.log(statistic(y) / statistic(x)) for x, y in zip(a, b)]
        e = paired_estimate(logs, 0.01)
        out[name] = {"se": e.standard_error, "change": e.change, "rho": e.rho, "weight": e.weight,
                     "sd": stats.stdev(logs)}
    cvs = [stats.stdev(r) / (math.fsum(r) / len(r)) for r in a + b if len(r) > 1]
    out["pull_cv"] = stats.median(cvs) if cvs else 0.0
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--tests", nargs="*", default=None)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    from paired_pipelines import KINDS

    tests = args.tests or list(KINDS)
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    rows = []
    for s in range(args.sessions):
        for test in tests:
            row = summary(pair_session(test))
            row["session"] = s
            rows.append(row)
            print(f"{s} {test:24s} se median {row['median']['se']:.4f} mean {row['mean']['se']:.4f} "
                  f"(ratio {row['mean']['se'] / max(row['median']['se'], 1e-12):.2f}); change median "
                  f"{row['median']['change']:+.3f} mean {row['mean']['change']:+.3f}; pull cv {row['pull_cv']:.2f}",
                  flush=True)
    lines = [f"# Round statistic: median iteration or mean, two identical processes in turns",
             "", f"`.venv/bin/python benchmarks/round_statistic.py --sessions {args.sessions} --out {args.out}`, "
             f"{started} to {time.strftime('%Y-%m-%dT%H:%M:%S%z')}, load {os.getloadavg()[0]:.1f} at the end", "",
             "| test | kind | standard error, median (%) | standard error, mean (%) | mean / median | "
             "A/A change median / mean (%) | pull cv |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        m, a = row["median"], row["mean"]
        lines.append(f"| {row['test']} | {KINDS.get(row['test'], '?')} | {100 * m['se']:.2f} | {100 * a['se']:.2f} | "
                     f"{a['se'] / max(m['se'], 1e-12):.2f} | {100 * m['change']:+.1f} / {100 * a['change']:+.1f} | "
                     f"{row['pull_cv']:.2f} |")
    by_test: dict[str, list[float]] = {}
    for row in rows:
        by_test.setdefault(row["test"], []).append(row["mean"]["se"] / max(row["median"]["se"], 1e-12))
    lines += ["", "Median over sessions of the ratio mean / median standard error: " + ", ".join(
        f"{t} {sorted(v)[len(v) // 2]:.2f}" for t, v in by_test.items())]
    Path(args.out + ".json").write_text(json.dumps({"started": started, "rows": rows}, indent=1))
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

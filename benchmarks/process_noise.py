"""How much a TensorFlow workload's speed moves between processes on this machine, and what pairing leaves of it.

Run:   .venv/bin/python benchmarks/process_noise.py            (about 4 minutes on 2 cores)
Writes benchmarks/results/process_noise.json and .md.

1. Fresh processes, one after another (what a stored baseline is compared
   across): each measures the workload of ``validation_study.py`` (a
   ``tf.function`` chain of four 512x512 matmuls) and a reference kernel of
   another shape (a 384x384 matmul chain, a sort and an ``exp``) in
   alternating 0.1 s / 0.03 s blocks for a few seconds, and reports the median
   call time of each. If the machine's slow spells hit every kernel alike, the
   ratio of the two would be steady and could correct a stored baseline.
2. Pairs of live processes taking turns (what ``--tfperf-against`` does): the
   two run the same workload, one 0.1 s round each in ABBA order, 20 rounds;
   the Hodges-Lehmann estimate of their per-round log ratio is the "change"
   that unchanged code shows, and the signed-rank p-value says whether the
   paired rule would call it significant.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import validation_study  # noqa: E402

WORKER = "import sys, time, json\nimport tensorflow as tf\n" + validation_study.TF_WORKLOADS + r'''
ROWS = rows()
RA = tf.random.stateless_normal((384, 384), seed=(9, 9)) / 20.0
RB = tf.random.stateless_normal((1 << 20,), seed=(9, 8))

@tf.function
def reference(a, b):
    x = a
    for _ in range(3):
        x = tf.tanh(tf.matmul(x, a))
    return tf.reduce_sum(x) + tf.reduce_sum(tf.sort(b[:65536])) + tf.reduce_sum(tf.exp(b * 0.001))

KERNELS = {"chain": lambda: chain_step(TABLE, ROWS).numpy(), "reference": lambda: reference(RA, RB).numpy()}
for f in KERNELS.values():
    for _ in range(10):
        f()

def block(name, seconds):
    f, times, end = KERNELS[name], [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter_ns(); f(); times.append(time.perf_counter_ns() - t0)
    times.sort()
    return times[len(times) // 2]

if sys.argv[1] == "sequential":
    out = {"chain": [], "reference": []}
    end = time.perf_counter() + float(sys.argv[2])
    while time.perf_counter() < end:
        out["chain"].append(block("chain", 0.1))
        out["reference"].append(block("reference", 0.03))
    print(json.dumps({k: sorted(v)[len(v) // 2] / 1e6 for k, v in out.items()}), flush=True)
else:  # turns: one round per "go" line on stdin
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "go":
            break
        print(block("chain", 0.1), flush=True)
'''


def spawn(*args: str, **kw: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.Popen([sys.executable, "-c", WORKER, *args], env=env, text=True, stderr=subprocess.DEVNULL, **kw)


def sequential(n: int, seconds: float) -> list[dict[str, float]]:
    out = []
    for i in range(n):
        proc = spawn("sequential", str(seconds), stdout=subprocess.PIPE)
        stdout, _ = proc.communicate()
        row = json.loads(stdout.strip().splitlines()[-1])
        row["ratio"] = row["chain"] / row["reference"]
        out.append(row)
        print(f"process {i + 1}/{n}: chain {row['chain']:.2f} ms, reference {row['reference']:.2f} ms", flush=True)
    return out


# Wilcoxon's exact signed-rank test, the statistic this study's committed results were computed with (the
# paired gate itself now uses gates.paired.paired_estimate).
def signed_rank_null_counts(n: int) -> list[int]:
    """Number of sign patterns of ranks 1..n whose positive ranks sum to 0, 1, ..., n(n+1)/2."""
    counts = [1] + [0] * (n * (n + 1) // 2)
    for rank in range(1, n + 1):
        for total in range(len(counts) - 1, rank - 1, -1):
            counts[total] += counts[total - rank]
    return counts


def signed_rank_p(values: Sequence[float], counts: Sequence[int]) -> float:
    """Exact one-sided p of Wilcoxon's signed-rank test, alternative: the values tend to be negative.

    ``counts`` is ``signed_rank_null_counts(len(values))``. Ties in absolute
    value get their average rank (the p-value is then approximate); exact
    zeros count half on each side.
    """
    n = len(values)
    order = sorted(range(n), key=lambda i: abs(values[i]))
    ranks = [0.0] * n
    i = 0
    while i < n:
        j = i
        while j + 1 < n and abs(values[order[j + 1]]) == abs(values[order[i]]):
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    positive = sum(r for r, v in zip(ranks, values) if v > 0) + sum(r / 2.0 for r, v in zip(ranks, values) if v == 0)
    at_most = math.floor(positive + 1e-9)
    return sum(counts[: at_most + 1]) / 2**n


def turns(n_pairs: int, rounds: int) -> list[dict[str, float]]:
    out = []
    for i in range(n_pairs):
        a = spawn("turns", stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        b = spawn("turns", stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        for p in (a, b):
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        times: dict[int, list[int]] = {id(a): [], id(b): []}
        for r in range(rounds):
            for p in ((a, b) if r % 2 == 0 else (b, a)):
                assert p.stdin is not None and p.stdout is not None
                p.stdin.write("go\n")
                p.stdin.flush()
                times[id(p)].append(int(p.stdout.readline()))
        for p in (a, b):
            assert p.stdin is not None
            p.stdin.close()
            p.wait()
        logs = [math.log(y / x) for x, y in zip(times[id(a)], times[id(b)])]
        walsh = sorted((logs[i] + logs[j]) / 2 for i in range(rounds) for j in range(i, rounds))
        counts = signed_rank_null_counts(rounds)
        p_two = 2 * min(signed_rank_p(logs, counts), signed_rank_p([-v for v in logs], counts))
        row = {"estimate": math.expm1(statistics.median(walsh)), "p_two_sided": min(1.0, p_two)}
        out.append(row)
        print(f"pair {i + 1}/{n_pairs}: {row['estimate']:+.2%} (p = {row['p_two_sided']:.2g})", flush=True)
    return out


def markdown(result: dict[str, Any]) -> str:
    seq = result["sequential"]
    chain = [r["chain"] for r in seq]
    ref = [r["reference"] for r in seq]
    ratio = [r["ratio"] for r in seq]
    est = [r["estimate"] for r in result["turns"]]

    def spread(v: list[float]) -> str:
        return f"{min(v):.2f} to {max(v):.2f} (max/min {max(v) / min(v):.2f})"

    return "\n".join([
        f"Process-to-process noise on this machine, {result['created_at'][:10]}. Reproduce with "
        f"`{result['command']}`.",
        "",
        f"{len(seq)} fresh processes one after another, {result['settings']['seconds']:g} s each:",
        "",
        "| kernel | median call time per process, ms |",
        "|---|---|",
        f"| matmul chain (the validation workload) | {spread(chain)} |",
        f"| reference kernel | {spread(ref)} |",
        f"| ratio chain / reference | {spread(ratio)} |",
        "",
        f"{len(est)} pairs of live processes taking turns, {result['settings']['rounds']} rounds of 0.1 s, "
        f"the same code on both sides: estimated change {min(est):+.1%} to {max(est):+.1%} "
        f"(median {statistics.median(est):+.1%}); smallest two-sided signed-rank p "
        f"{min(r['p_two_sided'] for r in result['turns']):.2g}.",
        "",
    ])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    started = time.monotonic()
    result = {
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": ".venv/bin/python benchmarks/process_noise.py",
        "settings": vars(args),
        "sequential": sequential(args.processes, args.seconds),
        "turns": turns(args.pairs, args.rounds),
    }
    result["wall_s"] = round(time.monotonic() - started, 1)
    out = HERE / "results"
    (out / "process_noise.json").write_text(json.dumps(result, indent=1) + "\n")
    text = markdown(result)
    (out / "process_noise.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the trace recorder adds to a call that traces, as a function's traces pile up.

Run:   .venv/bin/python benchmarks/bench_trace_recorder_cost.py --traces 600 --repeats 3
Writes benchmarks/results/bench_trace_recorder_cost.md.

The recorder's callback runs inside TensorFlow's tracing, so whatever it costs is measured with a workload
that retraces (a Python float argument on every call, the catalog's retracing mistake). For each repeat, a
fresh ``tf.function`` is called ``--traces`` times with a new float, each call timed, once with the recorder
installed and once without, the two runs interleaved; the table gives the median time a call over each
block of 100 traces, and the recorder's share of it. A cost that grows with the traces made so far (as
reading TensorFlow's whole function cache on every trace did) shows as a rising difference block by block.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

BLOCK = 100


def timed_traces(n: int, recorder: bool) -> list[float]:
    """Seconds per call of ``n`` calls of a new tf.function, each with a new Python float (one trace each)."""
    import tensorflow as tf

    from pytest_tfperf.measuring.trace_recorder import TraceRecorder

    r = TraceRecorder()
    if recorder:
        assert r.install()
    try:
        f = tf.function(lambda v, k: tf.reduce_sum(tf.tanh(v * k)))
        x = tf.ones([64])
        out = []
        for i in range(n):
            t0 = time.perf_counter()
            f(x, 1.0 + i * 1e-6)
            out.append(time.perf_counter() - t0)
        if recorder:
            assert r.total() == n, (r.total(), n)  # every call traced, and was counted
        return out
    finally:
        r.uninstall()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=600)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "bench_trace_recorder_cost.md")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE.parent, capture_output=True,
                            text=True).stdout.strip()
    started = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    timed_traces(20, True)  # TensorFlow's own first-call costs, outside the comparison
    blocks = args.traces // BLOCK
    on: list[list[float]] = [[] for _ in range(blocks)]
    off: list[list[float]] = [[] for _ in range(blocks)]
    for rep in range(args.repeats):
        for recorder in ((True, False) if rep % 2 == 0 else (False, True)):
            calls = timed_traces(args.traces, recorder)
            for b in range(blocks):
                (on if recorder else off)[b].extend(calls[b * BLOCK:(b + 1) * BLOCK])
    lines = [f"# The trace recorder's cost on calls that trace (commit {commit}, {started})", "",
             f"`.venv/bin/python benchmarks/bench_trace_recorder_cost.py --traces {args.traces} "
             f"--repeats {args.repeats}`", "",
             "| traces so far | median ms a call, recorder installed | without | difference |",
             "|---|---|---|---|"]
    for b in range(blocks):
        with_, without = statistics.median(on[b]) * 1e3, statistics.median(off[b]) * 1e3
        lines.append(f"| {b * BLOCK + 1}-{(b + 1) * BLOCK} | {with_:.2f} | {without:.2f} | "
                     f"{with_ - without:+.2f} ms ({(with_ - without) / without:+.0%}) |")
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

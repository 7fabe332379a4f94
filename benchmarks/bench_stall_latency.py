"""How late the watchdog notices a stall, for a stall in Python and one inside TensorFlow's C++.

Run: TF_CPP_MIN_LOG_LEVEL=2 .venv/bin/python benchmarks/bench_stall_latency.py
Writes benchmarks/results/stall_latency.json and prints a table.

Each case measures a workload whose 30th call blocks for good (a ``threading.Event`` that is never
set, either called directly or from a ``tf.py_function`` inside a ``tf.data`` pipeline, so that
``get_next`` blocks in C++), under a stall deadline of 1 s. The figure is the overshoot: how long
after the deadline ``StallError`` reached the calling thread (the watchdog polls every 50 ms).
Abandoned threads stay blocked until the process exits, as they would in a pytest session.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from pathlib import Path

from pytest_tfperf.measuring import runner
from pytest_tfperf.measuring.workload import RunSettings, Workload, dataset_puller
from pytest_tfperf.measuring.watchdog import StallError, StallPolicy

HERE = Path(__file__).resolve().parent
REPS = 5
POLICY = StallPolicy(multiple=100, floor_s=1.0, ceiling_s=1.0, poll_s=0.05)


def python_block() -> Workload:
    never = threading.Event()
    calls = {"n": 0}

    def work() -> None:
        calls["n"] += 1
        if calls["n"] == 30:
            never.wait()

    return Workload(call=work)


def tf_get_next_block() -> Workload:
    import tensorflow as tf

    never = threading.Event()

    def blocks(x):  # type: ignore[no-untyped-def]
        if int(x) == 30:
            never.wait()
        return x

    ds = tf.data.Dataset.range(10**6).map(lambda x: tf.py_function(blocks, [x], tf.int64))
    return Workload(call=dataset_puller(lambda: iter(ds)))


def overshoot_s(make: object) -> float:
    settings = RunSettings(budget_s=0.5, rounds=3, warmup_s=0.0, stall=POLICY)
    try:
        runner.measure({"": make()}, settings)  # type: ignore[operator]
    except StallError as exc:
        return (exc.waited_ns - exc.deadline_ns) / 1e9
    raise AssertionError("the workload did not stall")


def main() -> None:
    results: dict[str, dict[str, float]] = {}
    for name, make in (("python_event_wait", python_block), ("tf_data_get_next", tf_get_next_block)):
        overshoots = [overshoot_s(make) for _ in range(REPS)]
        results[name] = {"deadline_s": POLICY.ceiling_s, "overshoot_s_median": statistics.median(overshoots),
                         "overshoot_s_max": max(overshoots), "repetitions": REPS}
        print(f"{name:20s} deadline {POLICY.ceiling_s:.1f} s; noticed {statistics.median(overshoots) * 1e3:.0f} ms "
              f"after it (median; max {max(overshoots) * 1e3:.0f} ms) over {REPS} stalls")
    out = HERE / "results" / "stall_latency.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(f"written to {out.relative_to(HERE.parent)}")


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"({time.perf_counter() - t0:.1f} s)")

"""What memory probing costs: CPU per round for the exact probes, CPU per second for the samplers.

Run: .venv/bin/python benchmarks/bench_probe_cost.py [--quick] [--no-tf]
Writes benchmarks/results/probe_cost.json and prints tables.

1. reset()+peak() pair: wall and CPU time of one pair, the work each round
   adds for the exact probes (TF allocator counters, VmHWM), and for the
   samplers (a thread start and join per round). As a share of one core it is
   pair CPU / round length; the runner's default round is about 0.4 s.
2. Samplers during a measured phase: the sampling thread's own CPU time
   (CLOCK_THREAD_CPUTIME_ID, read by the thread at the end of its window) per
   second, while the main thread (a) sleeps and (b) runs a Python-bound loop
   that holds the GIL, plus that loop's throughput with the sampler against
   without, interleaved (order alternates), several repetitions.
   A no-op tick gives the thread-wake-up floor at each interval; at 20 ms it is
   the floor of the NVML sampler, whose NVML calls could not be measured here
   (no GPU).
3. collect_environment(): import and first call in a fresh process.

The product's target: memory probing at most 0.5% of one core.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_tfperf.probes import memory_probes as mp
from pytest_tfperf.probes import nvml
from pytest_tfperf.probes.environment import collect_environment

HERE = Path(__file__).resolve().parent
ROUND_S = 0.4  # default measured phase ~2 s in 5 rounds


def pair_cost(probe: Any, pairs: int) -> dict[str, float]:
    walls, cpus = [], []
    for _ in range(pairs):
        c0, w0 = time.process_time_ns(), time.perf_counter_ns()
        probe.reset()
        probe.peak()
        w1, c1 = time.perf_counter_ns(), time.process_time_ns()
        walls.append(w1 - w0)
        cpus.append(c1 - c0)
    cpu_us = sum(cpus) / pairs / 1e3  # process_time is coarse per call; its mean over many pairs is not
    return {
        "pairs": pairs,
        "wall_median_us": statistics.median(walls) / 1e3,
        "wall_p90_us": sorted(walls)[int(0.9 * pairs)] / 1e3,
        "cpu_mean_us": cpu_us,
        "pct_of_core_at_0.4s_rounds": 100 * cpu_us / 1e6 / ROUND_S,
        "pct_of_core_at_0.1s_rounds": 100 * cpu_us / 1e6 / 0.1,
    }


def busy_loop(seconds: float) -> float:
    """Python-bound, GIL-holding work: iterations per second."""
    end = time.perf_counter() + seconds
    n = 0
    x = 0
    while time.perf_counter() < end:
        for i in range(10_000):
            x += i
        n += 10_000
    return n / seconds


def sampler_window(
    sampler: mp.WindowSampler, seconds: float, work: Callable[[float], float] | None
) -> tuple[float, float, float, float]:
    """(sampler CPU as % of one core, ticks per second, loop rate or 0, CPU us per tick) over one window."""
    sampler.start()
    t0 = time.perf_counter()
    if work is None:
        time.sleep(seconds)
        rate = 0.0
    else:
        rate = work(seconds)
    sampler.stop()
    elapsed = time.perf_counter() - t0
    per_tick_us = sampler.last_window_cpu_ns / max(sampler.ticks, 1) / 1e3
    return 100 * sampler.last_window_cpu_ns / 1e9 / elapsed, sampler.ticks / elapsed, rate, per_tick_us


def sampler_cost(name: str, tick: Callable[[], None], interval_s: float, window_s: float, reps: int) -> dict[str, Any]:
    sampler = mp.WindowSampler(tick, interval_s, name="bench-sampler")
    idle = [sampler_window(sampler, window_s, None) for _ in range(reps)]
    busy, ratios = [], []
    for rep in range(reps):
        order = ("with", "without") if rep % 2 == 0 else ("without", "with")
        rates = {}
        for which in order:
            if which == "with":
                pct, ticks_per_s, rates[which], _ = sampler_window(sampler, window_s, busy_loop)
                busy.append((pct, ticks_per_s))
            else:
                rates[which] = busy_loop(window_s)
        ratios.append(rates["with"] / rates["without"])
    return {
        "sampler": name,
        "interval_ms": interval_s * 1e3,
        "thread_cpu_pct_of_core_idle_main": statistics.median(r[0] for r in idle),
        "ticks_per_s_idle_main": statistics.median(r[1] for r in idle),
        "cpu_us_per_tick_idle_main": statistics.median(r[3] for r in idle),
        "thread_cpu_pct_of_core_busy_main": statistics.median(r[0] for r in busy),
        "ticks_per_s_busy_main": statistics.median(r[1] for r in busy),
        "busy_loop_throughput_ratio_median": statistics.median(ratios),
        "busy_loop_throughput_ratio_min": min(ratios),
        "busy_loop_throughput_ratio_max": max(ratios),
        "reps": reps,
        "window_s": window_s,
    }


def environment_cost(reps: int) -> dict[str, float]:
    code = (
        "import time; t0 = time.perf_counter();"
        "from pytest_tfperf.probes.environment import collect_environment; t1 = time.perf_counter();"
        "collect_environment(); t2 = time.perf_counter(); collect_environment(); t3 = time.perf_counter();"
        "print((t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3)"
    )
    rows = []
    for _ in range(reps):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        rows.append([float(x) for x in out.split()])
    return {
        "import_ms_median": statistics.median(r[0] for r in rows),
        "first_call_ms_median": statistics.median(r[1] for r in rows),
        "first_call_ms_max": max(r[1] for r in rows),
        "cached_call_ms_median": statistics.median(r[2] for r in rows),
        "reps": reps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="shorter windows and fewer repetitions")
    parser.add_argument("--no-tf", action="store_true", help="skip the TensorFlow allocator probe (saves ~3 s)")
    args = parser.parse_args()
    window_s, reps, pairs = (0.3, 3, 300) if args.quick else (0.5, 7, 2000)

    results: dict[str, Any] = {
        "machine": collect_environment().hard_dict(),
        "loadavg_at_start": os.getloadavg()[0],
        "round_s_assumed": ROUND_S,
    }

    # 1. reset+peak pairs
    construction: dict[str, float] = {}
    pair_rows: dict[str, Any] = {}
    mp._hwm_problem_by_pid.clear()
    t0 = time.perf_counter()
    hwm = mp.HwmRssProbe()
    construction["HwmRssProbe (clear_refs self-check)_ms"] = (time.perf_counter() - t0) * 1e3
    if hwm.unavailable is None:
        pair_rows["rss_hwm"] = pair_cost(hwm, pairs)
    else:
        pair_rows["rss_hwm"] = {"unavailable": hwm.unavailable}
    probe = mp.SampledRssProbe()
    pair_rows["rss_sampled"] = pair_cost(probe, max(pairs // 4, 50))
    probe.close()
    if not args.no_tf:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        tf.constant(0.0) + 1.0  # initialise the runtime before timing the self-check
        t0 = time.perf_counter()
        tf_probe = mp.TfAllocatorProbe("CPU:0")
        construction["TfAllocatorProbe CPU:0 (self-check)_ms"] = (time.perf_counter() - t0) * 1e3
        pair_rows["tf_allocator_cpu0"] = (
            pair_cost(tf_probe, pairs) if tf_probe.unavailable is None else {"unavailable": tf_probe.unavailable}
        )
    nvml_probes = nvml.nvml_probes() if nvml.nvidia_driver_visible() else []
    if nvml_probes and nvml_probes[0].unavailable is None:
        pair_rows["nvml_gpu0"] = pair_cost(nvml_probes[0], max(pairs // 4, 50))
    else:
        pair_rows["nvml_gpu0"] = {"unavailable": nvml_probes[0].unavailable if nvml_probes else "no NVIDIA driver"}
    for probe in nvml_probes:
        probe.close()
    results["pair_cost"] = pair_rows
    results["construction"] = construction

    # 2. samplers during a measured phase
    statm, read_psutil = mp.StatmRssReader(), mp.psutil_rss_reader()
    rows = []
    for interval in (0.001, 0.005, 0.010, 0.020):
        rows.append(sampler_cost("rss statm (default)", lambda: statm() and None, interval, window_s, reps))
        rows.append(sampler_cost("rss psutil", lambda: read_psutil() and None, interval, window_s, reps))
        rows.append(sampler_cost("no-op tick (wake-up floor)", lambda: None, interval, window_s, reps))
    results["samplers"] = rows

    # 3. environment
    results["collect_environment"] = environment_cost(3 if args.quick else 7)

    out = HERE / "results" / "probe_cost.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")

    print(f"reset()+peak() pair (round assumed {ROUND_S} s)")
    print(f"{'probe':<22}{'wall med us':>12}{'cpu us':>10}{'% core @0.4s':>14}{'% core @0.1s':>14}")
    for name, row in pair_rows.items():
        if "unavailable" in row:
            print(f"{name:<22}  unavailable: {row['unavailable'][:90]}")
            continue
        print(f"{name:<22}{row['wall_median_us']:>12.1f}{row['cpu_mean_us']:>10.1f}"
              f"{row['pct_of_core_at_0.4s_rounds']:>14.4f}{row['pct_of_core_at_0.1s_rounds']:>14.4f}")
    for name, ms in construction.items():
        print(f"construction {name}: {ms:.1f} ms")
    print()
    print("samplers: thread CPU as % of one core, and a GIL-bound loop's throughput with/without")
    print("  (% idle / % busy: main thread sleeping / running a GIL-bound loop; ticks/s: actual sampling rate)")
    if results["loadavg_at_start"] > (os.cpu_count() or 1):
        print(f"  machine busy (load {results['loadavg_at_start']:.1f}): the throughput ratios are mostly noise; "
              "the thread CPU figures much less so")
    print(f"{'sampler':<28}{'every ms':>9}{'% idle':>8}{'us/tick':>8}{'ticks/s':>8}{'% busy':>8}{'ticks/s':>8}"
          f"{'ratio med':>10}{'min':>7}{'max':>7}")
    for r in rows:
        print(f"{r['sampler']:<28}{r['interval_ms']:>9g}{r['thread_cpu_pct_of_core_idle_main']:>8.2f}"
              f"{r['cpu_us_per_tick_idle_main']:>8.0f}"
              f"{r['ticks_per_s_idle_main']:>8.0f}{r['thread_cpu_pct_of_core_busy_main']:>8.2f}"
              f"{r['ticks_per_s_busy_main']:>8.0f}{r['busy_loop_throughput_ratio_median']:>10.3f}"
              f"{r['busy_loop_throughput_ratio_min']:>7.3f}{r['busy_loop_throughput_ratio_max']:>7.3f}")
    env = results["collect_environment"]
    print()
    print(f"collect_environment: import {env['import_ms_median']:.1f} ms, "
          f"first call {env['first_call_ms_median']:.1f} ms "
          f"(max {env['first_call_ms_max']:.1f}), cached call {env['cached_call_ms_median']:.2f} ms")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

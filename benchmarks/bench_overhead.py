"""What the harness itself costs: per-iteration overhead and plugin load time.

Run: .venv/bin/python benchmarks/bench_overhead.py
Writes benchmarks/results/overhead.json and prints a table.

1. Per-iteration overhead: the measuring loop timing a no-op, against a bare
   Python loop calling the same no-op. Both are timed from the outside with
   the same clock, interleaved, several repetitions; the difference per
   iteration is what the harness adds to every measured iteration.
2. Plugin load time: wall time of `pytest --help` with the plugin against
   `pytest -p no:tfperf --help`, in fresh processes, interleaved.
3. The measurer in its own memory figures: the RSS high-water mark's rise
   above each round's start (the real VmHWM probe, Linux) for a no-op and
   for `sum(range(1000))`, neither of which keeps anything; each is measured
   in a fresh process so that nothing else of this script runs beside it.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pytest_tfperf.measuring import runner
from pytest_tfperf.measuring.variant_state import VariantState
from pytest_tfperf.measuring.watchdog import Progress
from pytest_tfperf.measuring.workload import RunSettings, Workload

HERE = Path(__file__).resolve().parent
N = 2_000_000
REPS = 7


def noop() -> None:
    return None


def bare_loop(n: int) -> int:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        noop()
    return time.perf_counter_ns() - t0


def harness_loop(n: int) -> int:
    settings = RunSettings(budget_s=1.0, rounds=1, warmup_s=0.0)
    state = VariantState("", Workload(call=noop))
    state.per_probe_rounds = []
    state.per_probe_baseline = []
    progress = Progress()
    runner._reserve(state, n)  # as ``measure`` does, before any round
    t0 = time.perf_counter_ns()
    runner._timed_round(state, n, time.perf_counter_ns, None, (), progress)
    elapsed = time.perf_counter_ns() - t0
    del settings
    return elapsed


def per_iteration_overhead() -> dict[str, float]:
    bare, harness = [], []
    for rep in range(REPS):
        pair = [(bare_loop, bare), (harness_loop, harness)]
        for fn, out in (pair if rep % 2 == 0 else pair[::-1]):
            out.append(fn(N) / N)
    diffs = [h - b for h, b in zip(harness, bare)]
    return {
        "bare_loop_ns_per_iteration": statistics.median(bare),
        "harness_ns_per_iteration": statistics.median(harness),
        "overhead_ns_per_iteration_median": statistics.median(diffs),
        "overhead_ns_per_iteration_max": max(diffs),
        "repetitions": REPS,
        "iterations_per_repetition": N,
    }


def help_time(extra: list[str]) -> float:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", *extra, "--help"], check=True, stdout=subprocess.DEVNULL,
                   env=env, cwd=HERE.parent)
    return time.perf_counter() - t0


def plugin_load_time(reps: int = 9) -> dict[str, float]:
    with_plugin, without = [], []
    help_time([])  # warm the page cache
    for rep in range(reps):
        pair = [([], with_plugin), (["-p", "no:tfperf"], without)]
        for extra, out in (pair if rep % 2 == 0 else pair[::-1]):
            out.append(help_time(extra))
    diffs = [a - b for a, b in zip(with_plugin, without)]
    heavy = subprocess.run(
        [sys.executable, "-c",
         "import sys, pytest_tfperf.plugin; print(','.join(m for m in ('tensorflow','pandas','pynvml') "
         "if m in sys.modules))"],
        capture_output=True, text=True, check=True).stdout.strip()
    return {
        "pytest_help_s_with_plugin": statistics.median(with_plugin),
        "pytest_help_s_without_plugin": statistics.median(without),
        "plugin_load_ms_median": statistics.median(diffs) * 1e3,
        "heavy_modules_imported_by_plugin": heavy or "none",
        "repetitions": reps,
    }


# One measurement with the default settings (2 s, 5 rounds), as `tfperf(fn)` runs it.
RSS_RISE_CHILD = """
import json, sys
from pytest_tfperf.probes import memory_probes
from pytest_tfperf.measuring import runner
from pytest_tfperf.measuring.workload import RunSettings, Workload
workloads = {"noop": lambda: None, "sum_range_1000": lambda: sum(range(1000))}
probe = memory_probes.HwmRssProbe()
if probe.unavailable:
    print(json.dumps({"unavailable": probe.unavailable})); sys.exit()
raw = runner.measure({"": Workload(call=workloads[sys.argv[1]])}, RunSettings(), probes=[probe])[""]
peak = raw.memory[0]
print(json.dumps({"iterations_per_round": raw.timings.round_sizes[0],
                  "rise_bytes": [p - s for p, s in zip(peak.per_round_peak_bytes, peak.per_round_start_bytes)]}))
"""


def rss_rise_per_round(reps: int = 3) -> dict[str, Any]:
    out: dict[str, Any] = {"repetitions": reps, "limit_bytes": 64 * 1024}
    for name in ("noop", "sum_range_1000"):
        rises: list[int] = []
        iterations: list[int] = []
        for _ in range(reps):
            done = subprocess.run([sys.executable, "-c", RSS_RISE_CHILD, name], capture_output=True, text=True,
                                  check=True, cwd=HERE.parent)
            child = json.loads(done.stdout)
            if "unavailable" in child:
                return {"unavailable": child["unavailable"]}
            rises += child["rise_bytes"]
            iterations.append(child["iterations_per_round"])
        out[name] = {"max_rise_bytes": max(rises), "median_rise_bytes": statistics.median(rises),
                     "rounds": len(rises), "iterations_per_round_median": statistics.median(iterations)}
    return out


def main() -> None:
    results = {"per_iteration": per_iteration_overhead(), "plugin_load": plugin_load_time(),
               "rss_rise_per_round": rss_rise_per_round()}
    out = HERE / "results" / "overhead.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    pi, pl = results["per_iteration"], results["plugin_load"]
    print(f"harness overhead per iteration: {pi['overhead_ns_per_iteration_median']:.0f} ns median "
          f"(max {pi['overhead_ns_per_iteration_max']:.0f} ns) over a bare loop of "
          f"{pi['bare_loop_ns_per_iteration']:.0f} ns/iteration; target <= 1000 ns")
    print(f"plugin load: +{pl['plugin_load_ms_median']:.1f} ms on `pytest --help` "
          f"({pl['pytest_help_s_with_plugin']:.3f} s vs {pl['pytest_help_s_without_plugin']:.3f} s); "
          f"target <= 50 ms; heavy modules imported: {pl['heavy_modules_imported_by_plugin']}")
    rr = results["rss_rise_per_round"]
    if "unavailable" in rr:
        print(f"RSS rise per round: not measured ({rr['unavailable']})")
    else:
        for name in ("noop", "sum_range_1000"):
            r = rr[name]
            print(f"RSS high-water rise within a round, {name}: max {r['max_rise_bytes'] / 1024:.0f} KiB, "
                  f"median {r['median_rise_bytes'] / 1024:.0f} KiB over {r['rounds']} rounds of "
                  f"{r['iterations_per_round_median']:.0f} iterations; target < 64 KiB")
    print(f"written to {out.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()

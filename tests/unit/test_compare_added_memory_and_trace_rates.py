"""The gate compares what a workload itself adds to memory, and retracing as a rate."""

from __future__ import annotations

from pytest_tfperf.gates.rounds import judge_rounds
from pytest_tfperf.gates.verdict import Tolerances
from pytest_tfperf.model import Measurement, MemoryPeak, MemorySource, Timings

MIB = 2**20


def measurement(peaks: tuple[int, ...], starts: tuple[int, ...], *, traces: int = 0,
                iterations_per_round: int = 10) -> Measurement:
    rounds = len(peaks)
    timings = Timings(samples_ns=(1_000_000,) * (rounds * iterations_per_round),
                      round_sizes=(iterations_per_round,) * rounds, items_per_iteration=1, first_call_ns=1)
    peak = MemoryPeak(MemorySource.TF_ALLOCATOR, "CPU:0", max(peaks), starts[0], peaks,
                      per_round_start_bytes=starts)
    return Measurement(test_id="t", mode="call", timings=timings, memory=(peak,), traces_first_call=1,
                       traces_steady=traces)


def test_leftovers_between_rounds_do_not_count_as_the_workloads_memory() -> None:
    # Another variant, interleaved, leaves 100 MiB more alive before each of this variant's rounds;
    # this workload itself still adds 20 MiB per round.
    baseline = measurement((120 * MIB,) * 5, (100 * MIB,) * 5)
    current = measurement(tuple((100 + 100 * r + 20) * MIB for r in range(5)),
                          tuple((100 + 100 * r) * MIB for r in range(5)))
    verdict = judge_rounds(current, baseline, Tolerances())
    mem = verdict.metric("peak_tf_allocator[CPU:0]")
    assert mem is not None and str(mem.status) == "unchanged", mem.message


def test_ten_percent_more_added_memory_is_caught() -> None:
    baseline = measurement((120 * MIB,) * 5, (100 * MIB,) * 5)
    current = measurement((122 * MIB,) * 5, (100 * MIB,) * 5)  # adds 22 MiB instead of 20
    mem = judge_rounds(current, baseline, Tolerances()).metric("peak_tf_allocator[CPU:0]")
    assert mem is not None and str(mem.status) == "regressed", mem.message


def test_retracing_on_every_call_is_compared_per_iteration() -> None:
    baseline = measurement((MIB,) * 5, (0,) * 5, traces=50, iterations_per_round=10)  # 1 per iteration
    current = measurement((MIB,) * 5, (0,) * 5, traces=150, iterations_per_round=30)  # still 1 per iteration
    traces = judge_rounds(current, baseline, Tolerances()).metric("traces_steady")
    assert traces is not None and str(traces.status) == "unchanged", traces.message
    worse = measurement((MIB,) * 5, (0,) * 5, traces=300, iterations_per_round=30)  # 2 per iteration
    traces = judge_rounds(worse, baseline, Tolerances()).metric("traces_steady")
    assert traces is not None and str(traces.status) == "regressed", traces.message


def test_any_steady_trace_fails_when_the_baseline_had_none() -> None:
    baseline = measurement((MIB,) * 5, (0,) * 5, traces=0)
    current = measurement((MIB,) * 5, (0,) * 5, traces=1, iterations_per_round=1000)
    traces = judge_rounds(current, baseline, Tolerances()).metric("traces_steady")
    assert traces is not None and str(traces.status) == "regressed", traces.message

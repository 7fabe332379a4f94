"""Memory growth: the within-round slope, its interval, and when a growth is flagged. Synthetic readings only."""

from __future__ import annotations

import math
import random

import pytest

from pytest_tfperf.diagnoses import diagnostics
from pytest_tfperf.measuring import memory_growth
from pytest_tfperf.measuring.memory_growth import GrowthRecorder, MemorySeries, fit_growth
from pytest_tfperf.model import MemorySource

KIB = 1024


def series(slope: float, *, rounds: int = 5, chunks: int = 13, chunk: int = 32, noise: float = 0.0,
           between_rounds: float = 0.0, step_at: int | None = None, step_bytes: int = 0, seed: int = 1,
           source: str = "rss") -> MemorySeries:
    """Readings as the runner takes them: one at each round start, one after each chunk of iterations.

    ``between_rounds`` adds what other variants grow while this one waits; ``step_at`` adds a one-time jump
    (the allocator's pool growing once) at that measured iteration.
    """
    rng = random.Random(seed)
    xs, rs, ys = [], [], []
    x = 0
    offset = 50 * 2**20
    for r in range(rounds):
        if r:
            offset += between_rounds
        for i in range(chunks + 1):
            if i:
                x += chunk
            jump = step_bytes if step_at is not None and x >= step_at else 0
            xs.append(x)
            rs.append(r)
            ys.append(int(offset + slope * x + jump + rng.gauss(0, noise)))
    return MemorySeries(source=source, label="process RSS" if source == "rss" else source, iterations=tuple(xs),
                        rounds=tuple(rs), bytes_in_use=tuple(ys))


def test_a_leak_of_one_mib_per_iteration_is_measured_and_flagged() -> None:
    fit = fit_growth(series(1024 * KIB, noise=200 * KIB))
    assert fit is not None
    assert fit.slope_bytes_per_iteration == pytest.approx(1024 * KIB, rel=0.01)
    assert fit.ci_low_bytes_per_iteration is not None and fit.ci_high_bytes_per_iteration is not None
    assert fit.ci_low_bytes_per_iteration < 1024 * KIB < fit.ci_high_bytes_per_iteration
    assert fit.rounds_growing == fit.rounds == 5
    assert fit.leaking()


def test_a_flat_pipeline_with_page_noise_is_not_flagged() -> None:
    for seed in range(20):
        fit = fit_growth(series(0, noise=64 * KIB, seed=seed))
        assert fit is not None and not fit.leaking()


def test_rss_creep_is_significant_but_below_the_practical_floor() -> None:
    # the research's clean eager loop: RSS creeps 0.2 KiB per iteration, R^2 0.98
    fit = fit_growth(series(0.2 * KIB, noise=0.5 * KIB))
    assert fit is not None and fit.significant
    assert not fit.leaking()


def test_growth_of_other_variants_between_rounds_does_not_count() -> None:
    # interleaved pair: the other variant leaks 100 MiB while this one waits, this one is flat
    fit = fit_growth(series(0, between_rounds=100 * 2**20, noise=4 * KIB))
    assert fit is not None
    assert abs(fit.slope_bytes_per_iteration) < 1 * KIB
    assert not fit.leaking()


def test_a_one_time_step_of_the_pool_is_not_a_steady_growth() -> None:
    fit = fit_growth(series(0, step_at=1000, step_bytes=64 * 2**20, noise=4 * KIB))
    assert fit is not None
    assert fit.rounds_growing == 1  # only the round in which the pool grew
    assert not fit.steady and not fit.leaking()


def test_slow_workloads_with_one_iteration_per_round_still_get_a_slope() -> None:
    fit = fit_growth(series(2 * 2**20, rounds=5, chunks=1, chunk=1, noise=8 * KIB))
    assert fit is not None and fit.rounds == 5 and fit.readings == 10
    assert fit.leaking()


def test_too_few_readings_give_no_interval_and_no_flag() -> None:
    fit = fit_growth(series(2 * 2**20, rounds=1, chunks=1, chunk=1))
    assert fit is not None
    assert fit.ci_low_bytes_per_iteration is None and not fit.significant and not fit.leaking()
    only_one = MemorySeries("rss", "process RSS", iterations=(0,), rounds=(0,), bytes_in_use=(5,))
    assert fit_growth(only_one) is None


def test_the_metric_is_the_largest_significant_slope_and_zero_when_flat() -> None:
    leak = series(300 * KIB, noise=16 * KIB, source="tf_allocator[CPU:0]")
    creep = series(1 * KIB, noise=0.5 * KIB)
    extras, d = diagnostics.memory_growth_diagnosis([creep, leak])
    assert dict(extras)["memory_growth_bytes_per_iteration"] == pytest.approx(300 * KIB, rel=0.02)
    assert d is not None and d.severity == "warning" and d.kind == "memory_growth"
    assert d.summary.startswith("memory grows by 300.0 KiB per iteration (95% CI ")
    assert ("over 1,024 iterations, in 3 of 3 rounds (tf_allocator[CPU:0]), and keeps growing at that pace in the "
            "later half of 2,080 iterations; process RSS +1.0 KiB") in d.summary
    assert "Something keeps data alive across iterations" in d.summary
    figures = dict(d.figures)
    assert figures["rss_slope_bytes_per_iteration"] == pytest.approx(1 * KIB, rel=0.1)
    assert figures["tf_allocator[CPU:0]_ci_low_bytes_per_iteration"] > 0

    extras, d = diagnostics.memory_growth_diagnosis([series(0, noise=64 * KIB)])
    assert dict(extras)["memory_growth_bytes_per_iteration"] == 0.0
    assert d is not None and d.severity == "info"
    assert d.summary.startswith("no steady memory growth: process RSS ")
    assert "over 2,080 iterations" in d.summary


def test_analyse_adds_the_growth_metric_gateable_by_the_marker_budget() -> None:
    from pytest_tfperf.gates.budgets import budgets_from_marker, check_budgets
    from pytest_tfperf.config import MarkerOptions
    from pytest_tfperf.model import Timings
    from pytest_tfperf.measuring.workload import RawRun, build_measurement

    timings = Timings(samples_ns=(1000,) * 10, round_sizes=(5, 5), items_per_iteration=1, first_call_ns=1)
    budget = budgets_from_marker(MarkerOptions(max_memory_growth_bytes_per_iteration=2**20))
    for slope, expected in ((2 * 2**20, 1), (0, 0)):
        raw = RawRun(timings=timings, memory=(), input_wait_ns=(), memory_series=(series(slope, noise=4 * KIB),))
        extras, diagnoses = diagnostics.analyse(raw)
        m = build_measurement("t", "call", raw, extra_metrics=extras, diagnoses=diagnoses)
        assert [v.metric for v in check_budgets(m, budget)] == ["memory_growth_bytes_per_iteration"] * expected


def test_chunk_size_spreads_about_64_readings_over_the_run() -> None:
    assert memory_growth.chunk_size(2000) == 32
    assert memory_growth.chunk_size(10) == 1
    assert memory_growth.chunk_size(0) == 1


def test_a_recorder_keeps_a_series_per_working_reader() -> None:
    class Reader:
        def __init__(self, source: str, values: list[int | None]) -> None:
            self.source, self.label, self.values = source, source, values

        def read(self) -> int | None:
            return self.values.pop(0)

    rec = GrowthRecorder([Reader("rss", [1, 2, 3]), Reader("tf_allocator[CPU:0]", [1, None, 3])])
    for x in (0, 10, 20):
        rec.record(x, 0)
    (only,) = rec.series()
    assert only.source == "rss" and only.iterations == (0, 10, 20) and only.bytes_in_use == (1, 2, 3)


def test_readers_follow_the_probes_rss_always_tf_where_its_probe_works() -> None:
    class Probe:
        def __init__(self, source: MemorySource, device: str, unavailable: str | None = None) -> None:
            self.source, self.device, self.unavailable = source, device, unavailable

    assert memory_growth.readers_for([]) == []
    readers = memory_growth.readers_for([Probe(MemorySource.RSS_HWM, "host"),
                                         Probe(MemorySource.TF_ALLOCATOR, "CPU:0"),
                                         Probe(MemorySource.TF_ALLOCATOR, "GPU:0", unavailable="no stats"),
                                         Probe(MemorySource.NVML, "GPU:0")])
    assert [r.source for r in readers] == ["rss", "tf_allocator[CPU:0]"]


def test_a_probe_with_its_own_current_reading_is_read_through_it() -> None:
    class Probe:
        source, device, unavailable = MemorySource.TF_ALLOCATOR, "GPU:0", None

        def current(self) -> int:
            return 4242

    _, reader = memory_growth.readers_for([Probe()])
    assert reader.source == "tf_allocator[GPU:0]" and reader.read() == 4242


def test_the_rss_reader_sees_memory_that_is_touched() -> None:
    reader = memory_growth.RssReader()
    before = reader.read()
    block = bytearray(64 * 2**20)  # zero-filled: every page is touched
    after = reader.read()
    del block
    assert before is not None and after is not None
    assert after - before >= 48 * 2**20


def warm_up_series(total_bytes: float, tau: float, *, leak: float = 0.0, rounds: int = 5, chunks: int = 13,
                   chunk: int = 32, noise: float = 16 * KIB, seed: int = 3, start: int = 0) -> MemorySeries:
    """RSS that rises by ``total_bytes`` and levels off (time constant ``tau`` iterations), plus a leak."""
    rng = random.Random(seed)
    xs, rs, ys = [], [], []
    x = 0
    for r in range(rounds):
        for i in range(chunks + 1):
            if i:
                x += chunk
            xs.append(x)
            rs.append(r)
            settled = total_bytes * (1 - math.exp(-(x + start) / tau))
            ys.append(int(50 * 2**20 + settled + leak * x + rng.gauss(0, noise)))
    return MemorySeries(source="rss", label="process RSS", iterations=tuple(xs), rounds=tuple(rs),
                        bytes_in_use=tuple(ys), after_first_call_bytes=50 * 2**20, warmup_iterations=12)


def test_warm_up_growth_that_levels_off_is_reported_apart_and_is_no_leak() -> None:
    # EfficientNetB0's shape: 27 MiB over the first few hundred steps, then flat
    s = warm_up_series(60 * 2**20, tau=60, chunk=4)  # 260 measured iterations
    extras, d = diagnostics.memory_growth_diagnosis([s])
    assert d is not None and d.severity == "info"
    assert dict(extras)["memory_growth_bytes_per_iteration"] == 0.0
    assert "process RSS grew " in d.summary and "(warm-up), then " in d.summary and "in the later half" in d.summary
    whole = fit_growth(s)
    assert whole is not None and whole.leaking()  # what the old rule, on the whole series, accused


def test_a_leak_under_a_warm_up_is_still_flagged_at_its_own_rate() -> None:
    extras, d = diagnostics.memory_growth_diagnosis([warm_up_series(27 * 2**20, tau=300, leak=256 * KIB)])
    assert d is not None and d.severity == "warning"
    assert dict(extras)["memory_growth_bytes_per_iteration"] == pytest.approx(256 * KIB, rel=0.05)


def test_warm_up_that_fills_the_whole_window_is_suspected_until_measured_longer() -> None:
    # tau far beyond the window: the data cannot tell warm-up from a leak, so the runner measures longer
    # 50 measured iterations, all inside a rise that levels off over a few hundred (time constant 100)
    early = warm_up_series(200 * 2**20, tau=100, chunks=10, chunk=1)
    assert memory_growth.needs_confirmation([early])
    # measured longer, to 200 iterations: the later half has slowed to a third of the early rate
    longer = warm_up_series(200 * 2**20, tau=100, rounds=1, chunks=40, chunk=5)
    assert not memory_growth.needs_confirmation([longer])
    assert memory_growth.confirmation_plan(50) == (250, 7)  # on to 300 iterations since the first call
    assert memory_growth.confirmation_plan(260) == (260, 8)  # as many again
    assert memory_growth.confirmation_plan(20) == (280, 8)


@pytest.mark.parametrize("seed", range(12))
def test_the_budget_and_the_diagnosis_always_agree(seed: int) -> None:
    from pytest_tfperf.gates.budgets import budgets_from_marker, check_budgets
    from pytest_tfperf.config import MarkerOptions
    from pytest_tfperf.model import Timings
    from pytest_tfperf.measuring.workload import RawRun, build_measurement

    rng = random.Random(seed)
    s = warm_up_series(rng.choice([0, 5, 27, 200]) * 2**20, tau=rng.choice([30, 300, 3000]),
                       leak=rng.choice([0, 8, 60, 70, 256]) * KIB, noise=rng.choice([4, 64, 256]) * KIB, seed=seed)
    timings = Timings(samples_ns=(1000,) * 10, round_sizes=(5, 5), items_per_iteration=1, first_call_ns=1)
    raw = RawRun(timings=timings, memory=(), input_wait_ns=(), memory_series=(s,))
    extras, diagnoses = diagnostics.analyse(raw)
    (d,) = diagnoses
    metric = dict(extras)["memory_growth_bytes_per_iteration"]
    for limit in (64 * KIB, 128 * KIB, 2**20):  # budgets at or above the floor a leak is taken from
        m = build_measurement("t", "call", raw, extra_metrics=extras, diagnoses=diagnoses)
        failed = bool(check_budgets(m, budgets_from_marker(MarkerOptions(max_memory_growth_bytes_per_iteration=limit))))
        assert not failed or d.severity == "warning", (limit, metric, d.summary)
    assert (d.severity == "warning") == (metric >= memory_growth.GROWTH_FLOOR_BYTES), (metric, d.summary)
    if metric > 0:
        assert _kib_text(metric) in d.summary  # the figure a budget reads is the one the diagnosis states


def _kib_text(value: float) -> str:
    return f"{value / 1024:,.1f} KiB" if value < 10 * 2**20 else f"{value / 2**20:,.1f} MiB"


def test_supported_growth_that_is_no_leak_says_which_test_it_failed() -> None:
    # a pool that grows in one round of the later half: significant, large, but not steady
    _, d = diagnostics.memory_growth_diagnosis([series(0, step_at=1800, step_bytes=64 * 2**20, noise=4 * KIB)])
    assert d is not None and d.severity == "info"
    assert "rounds of the later half: steps, not a steady leak" in d.summary

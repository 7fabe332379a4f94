"""The measuring loop, driven by a fake clock and fake probes: no TensorFlow, no real time."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tracemalloc

import pytest

from pytest_tfperf.measuring import memory_growth, runner
from pytest_tfperf.measuring.variant_state import VariantState
from pytest_tfperf.measuring.watchdog import Abandoned, Progress
from pytest_tfperf.measuring.workload import (
    DatasetPuller,
    Plan,
    RunSettings,
    Workload,
    build_measurement,
    dataset_puller,
    plan_rounds,
)
from pytest_tfperf.model import TRACES_EACH, MemorySource, TraceEvent
from tests.helpers import FakeClock


class FakeProbe:
    source = MemorySource.TF_ALLOCATOR
    device = "CPU:0"

    def __init__(self, unavailable: str | None = None) -> None:
        self.unavailable = unavailable
        self.in_use = 100
        self.high = 100
        self.resets = 0

    def allocate(self, n: int) -> None:
        self.in_use += n
        self.high = max(self.high, self.in_use)
        self.in_use -= n

    def reset(self) -> int | None:
        self.resets += 1
        self.high = self.in_use
        return None if self.unavailable else self.in_use

    def peak(self) -> int | None:
        return None if self.unavailable else self.high

    def close(self) -> None:
        pass


def test_plan_fills_the_budget_with_equal_rounds() -> None:
    plan = plan_rounds(1_000_000, RunSettings(budget_s=2.0, rounds=5))  # 1 ms per iteration
    assert plan == Plan(rounds=5, iterations_per_round=400)


def test_plan_for_a_slow_workload_keeps_at_least_min_rounds() -> None:
    plan = plan_rounds(3e9, RunSettings(budget_s=2.0, rounds=5, min_rounds=3))  # 3 s per iteration
    assert plan == Plan(rounds=3, iterations_per_round=1)


def test_settings_reject_nonsense() -> None:
    with pytest.raises(ValueError, match="budget_s"):
        RunSettings(budget_s=0)
    with pytest.raises(ValueError, match="rounds"):
        RunSettings(rounds=0)


def test_every_iteration_is_timed_and_first_call_is_separate() -> None:
    clock = FakeClock()
    calls = []

    def work() -> None:
        # the first call is slow (tracing), then steady 1 ms
        clock.work(50_000_000 if not calls else 1_000_000)
        calls.append(1)

    raw = runner.measure({"": Workload(call=work, items_per_iteration=32)},
                         RunSettings(budget_s=0.05, rounds=5, warmup_s=0.0), clock=clock, watch=False)[""]
    t = raw.timings
    assert t.first_call_ns == 50_000_000
    assert t.round_sizes == (10, 10, 10, 10, 10)
    assert set(t.samples_ns) == {1_000_000}
    assert t.throughput_per_s == pytest.approx(32_000)  # 32 items per ms


def test_variants_are_interleaved_round_by_round() -> None:
    clock = FakeClock()
    order: list[str] = []

    def make(name: str, ns: int):
        def work() -> None:
            clock.work(ns)
            order.append(name)
        return work

    raws = runner.measure({"a": Workload(call=make("a", 1_000_000)),
                           "b": Workload(call=make("b", 2_000_000))},
                          RunSettings(budget_s=0.01, rounds=4, warmup_s=0.0), clock=clock, watch=False)
    assert raws["a"].timings.round_sizes == (2, 2, 2, 2)
    assert raws["b"].timings.round_sizes == (1, 1, 1, 1)
    steady = order[4:]  # after two warm-up calls each
    # ABBA: a a b | b a a | a a b | b a a
    assert steady == ["a", "a", "b", "b", "a", "a", "a", "a", "b", "b", "a", "a"]


def test_memory_peaks_are_reset_per_round_and_read_at_round_end() -> None:
    clock = FakeClock()
    probe = FakeProbe()
    sizes = iter([0, 0] + [10, 20, 30, 40, 50, 60])  # warm-up allocates nothing

    def work() -> None:
        clock.work(1_000_000)
        probe.allocate(next(sizes))

    raw = runner.measure({"": Workload(call=work)}, RunSettings(budget_s=0.006, rounds=3, warmup_s=0.0),
                         clock=clock, probes=[probe], watch=False)[""]
    (peak,) = raw.memory
    assert probe.resets == 1 + 3  # once before the first call (for OOM messages), then once per round
    assert peak.per_round_peak_bytes == (120, 140, 160)
    assert peak.peak_bytes == 160
    assert peak.baseline_bytes == 100


def test_an_unavailable_probe_is_reported_with_its_reason() -> None:
    clock = FakeClock()
    raw = runner.measure({"": Workload(call=lambda: clock.work(1_000))},
                         RunSettings(budget_s=0.001, rounds=2, warmup_s=0.0), clock=clock,
                         probes=[FakeProbe(unavailable="stats are off")], watch=False)[""]
    (peak,) = raw.memory
    assert peak.peak_bytes is None and peak.unavailable == "stats are off"


def test_pull_and_step_time_the_input_wait_apart() -> None:
    clock = FakeClock()

    def pull() -> int:
        clock.work(3_000_000)
        return 1

    def step(element: object) -> None:
        clock.work(1_000_000)

    w = Workload(call=pull, pull=pull, step=step, items_per_iteration=8)
    raw = runner.measure({"": w}, RunSettings(budget_s=0.04, rounds=2, warmup_s=0.0), clock=clock,
                         watch=False)[""]
    assert set(raw.timings.samples_ns) == {4_000_000}
    assert set(raw.input_wait_ns) == {3_000_000}
    assert len(raw.input_wait_ns) == raw.timings.iterations


def test_trace_counts_split_warm_up_from_steady_state() -> None:
    clock = FakeClock()
    traces = {"n": 0}

    def work() -> None:
        clock.work(1_000_000)
        traces["n"] += 1 if traces["n"] < 1 else 0  # traces once, on the first call
        if clock.now > 20_000_000:
            traces["n"] += 1  # then retraces late in the run

    w = Workload(call=work, trace_total=lambda: traces["n"])
    raw = runner.measure({"": w}, RunSettings(budget_s=0.03, rounds=3, warmup_s=0.0), clock=clock,
                         watch=False)[""]
    assert raw.traces_first_call == 1
    assert raw.traces_steady == traces["n"] - 1 > 0


def test_the_causes_of_steady_traces_come_back_with_the_run_and_warm_up_traces_stay_out() -> None:
    clock = FakeClock()
    log: list[TraceEvent] = []

    def work() -> None:
        clock.work(1_000_000)
        if not log or clock.now > 20_000_000:  # traced on the first call, then on every late call
            log.append(TraceEvent(function="f", location="t.py:1", cause="arguments", changed="x: shape",
                                  detail=f"x: shape ({len(log)},) -> ({len(log) + 1},)"))

    asked: list[tuple[int, int]] = []

    def events(after: int, upto: int) -> tuple[TraceEvent, ...]:
        asked.append((after, upto))
        return tuple(log[after:upto])

    w = Workload(call=work, trace_total=lambda: len(log), trace_events=events, trace_counting=TRACES_EACH)
    raw = runner.measure({"": w}, RunSettings(budget_s=0.03, rounds=3, warmup_s=0.0), clock=clock,
                         watch=False)[""]
    assert raw.traces_first_call == 1 and raw.trace_counting == TRACES_EACH
    assert raw.steady_trace_events == tuple(log[1:]) and len(raw.steady_trace_events) == raw.traces_steady > 0
    assert all(upto > after >= 1 for after, upto in asked)  # asked only for rounds that traced, never warm-up
    assert build_measurement("t", "call", raw).trace_counting == TRACES_EACH


def test_output_check_sees_every_iteration_index() -> None:
    clock = FakeClock()
    seen: list[int] = []
    w = Workload(call=lambda: clock.work(1_000), check_output=lambda i, out: seen.append(i))
    runner.measure({"": w}, RunSettings(budget_s=0.00001, rounds=2, warmup_s=0.0), clock=clock, watch=False)
    assert seen == list(range(len(seen))) and len(seen) >= 4


def test_dataset_puller_restarts_a_finite_dataset_and_refuses_an_empty_one() -> None:
    pull = dataset_puller(lambda: iter([1, 2]))
    assert [pull() for _ in range(5)] == [1, 2, 1, 2, 1]
    empty = dataset_puller(lambda: iter([]))
    with pytest.raises(ValueError, match="empty"):
        empty()


def test_smoke_runs_the_workload_exactly_once() -> None:
    calls = []
    raw = runner.smoke(Workload(call=lambda: calls.append(1), items_per_iteration=4), RunSettings())
    assert calls == [1]
    assert raw.timings.iterations == 1 and raw.timings.items_per_iteration == 4


class FakeReader:
    """Memory in use that grows by ``per_call`` bytes each time ``grow()`` runs; reading costs fake time."""

    def __init__(self, clock: FakeClock, cost_ns: int = 0) -> None:
        self.source = "rss"
        self.label = "process RSS"
        self.clock = clock
        self.cost_ns = cost_ns
        self.in_use = 1_000_000
        self.reads = 0

    def read(self) -> int | None:
        self.reads += 1
        self.clock.work(self.cost_ns)  # a reading that took time must not show in any sample
        return self.in_use


def test_memory_is_read_between_chunks_untimed_with_the_iteration_index() -> None:
    clock = FakeClock()
    reader = FakeReader(clock, cost_ns=7_000_000)

    def work() -> None:
        clock.work(1_000_000)
        reader.in_use += 4096

    raw = runner.measure({"": Workload(call=work)}, RunSettings(budget_s=0.5, rounds=5, warmup_s=0.0),
                         clock=clock, watch=False, memory_readers=[reader])[""]
    assert set(raw.timings.samples_ns) == {1_000_000}  # 7 ms readings never inside an iteration
    (series,) = raw.memory_series
    assert 60 <= len(series.iterations) <= 80  # about TARGET_READINGS, plus one at each round start
    assert series.iterations[0] == 0 and series.iterations[-1] == raw.timings.iterations
    assert sorted(set(series.rounds)) == [0, 1, 2, 3, 4]
    # the reading follows the iterations it comes after: 4 KiB each, exactly
    steps = [(b - a, yb - ya) for a, b, ya, yb in zip(series.iterations, series.iterations[1:], series.bytes_in_use,
                                                      series.bytes_in_use[1:]) if b > a]
    assert steps and all(dy == 4096 * dx for dx, dy in steps)


def test_without_readers_nothing_is_read_and_no_series_is_reported() -> None:
    clock = FakeClock()
    raw = runner.measure({"": Workload(call=lambda: clock.work(1_000))},
                         RunSettings(budget_s=0.001, rounds=2, warmup_s=0.0), clock=clock, watch=False)[""]
    assert raw.memory_series == ()


def test_a_failed_reader_drops_its_series_instead_of_faking_a_step() -> None:
    clock = FakeClock()
    good, bad = FakeReader(clock), FakeReader(clock)
    bad.source = "tf_allocator[CPU:0]"
    calls = {"n": 0}

    def flaky() -> int | None:
        calls["n"] += 1
        return None if calls["n"] == 5 else 123

    bad.read = flaky  # type: ignore[method-assign]
    raw = runner.measure({"": Workload(call=lambda: clock.work(1_000_000))},
                         RunSettings(budget_s=0.02, rounds=2, warmup_s=0.0), clock=clock, watch=False,
                         memory_readers=[good, bad])[""]
    assert [s.source for s in raw.memory_series] == ["rss"]


def test_pull_and_step_are_also_measured_apart_within_the_same_budget() -> None:
    clock = FakeClock()
    cached: list[int] = []

    def pull() -> int:
        clock.work(3_000_000)
        cached.append(len(cached))
        return cached[-1]

    stepped: list[object] = []

    def step(element: object) -> None:
        clock.work(1_000_000)
        stepped.append(element)

    w = Workload(call=pull, pull=pull, step=step, items_per_iteration=8)
    settings = RunSettings(budget_s=0.4, rounds=4, warmup_s=0.0)
    start = clock.now
    raw = runner.measure({"": w}, settings, clock=clock, watch=False)[""]
    split = raw.input_split
    assert split is not None
    assert set(raw.timings.samples_ns) == {4_000_000}
    assert set(split.dataset_alone.samples_ns) == {3_000_000}
    assert set(split.step_alone.samples_ns) == {1_000_000}
    assert split.step_alone.items_per_iteration == 8
    # the step alone re-runs one cached element
    (element, times), = collections.Counter(stepped).most_common(1)
    assert times >= split.step_alone.iterations  # every timed step-alone call, on the same element
    # together 60%, each side alone 20% of the measured budget
    together_ns, dataset_ns, step_ns = (sum(t.samples_ns) for t in (raw.timings, split.dataset_alone,
                                                                   split.step_alone))
    assert together_ns == pytest.approx(0.6 * 0.4e9, rel=0.05)
    assert dataset_ns == pytest.approx(0.2 * 0.4e9, rel=0.15)  # whole iterations per round: 6 x 3 ms
    assert step_ns == pytest.approx(0.2 * 0.4e9, rel=0.05)
    assert clock.now - start < 0.5e9  # warm-ups included: the split does not stretch the budget
    assert len(raw.input_wait_ns) == raw.timings.iterations  # waits are the together phase's only


def test_split_can_be_turned_off() -> None:
    clock = FakeClock()
    w = Workload(call=lambda: 1, pull=lambda: clock.work(1_000), step=lambda e: clock.work(1_000))
    raw = runner.measure({"": w}, RunSettings(budget_s=0.001, rounds=2, warmup_s=0.0), clock=clock,
                         watch=False, split_input=False)[""]
    assert raw.input_split is None and raw.input_wait_ns


def test_an_error_leaves_with_where_it_happened_and_the_peaks_at_that_moment() -> None:
    clock = FakeClock()
    probe = FakeProbe()
    calls = {"n": 0}

    def work() -> None:
        calls["n"] += 1
        clock.work(1_000_000)
        if calls["n"] == 30:
            probe.high = 5_000
            raise MemoryError("no more")

    with pytest.raises(MemoryError) as info:
        runner.measure({"": Workload(call=work)}, RunSettings(budget_s=0.05, rounds=5, warmup_s=0.0),
                       clock=clock, probes=[probe], watch=False)
    exc = info.value
    assert exc.tfperf_phase.startswith("round ")  # type: ignore[attr-defined]
    assert exc.tfperf_peaks == (("tf_allocator", "CPU:0", 5_000, None),)  # type: ignore[attr-defined]
    assert exc.tfperf_peaks_since == "this round"  # type: ignore[attr-defined]


def test_an_abandoned_measurement_stops_at_its_next_chunk() -> None:
    clock = FakeClock()
    progress_seen: list[Progress] = []
    calls = {"n": 0}

    def work() -> None:
        calls["n"] += 1
        clock.work(1_000_000)

    st = VariantState("", Workload(call=work))
    st.per_probe_rounds, st.per_probe_baseline = [], []
    progress = Progress()
    progress_seen.append(progress)
    progress.abandoned = True  # as the watchdog sets it after a stall
    with pytest.raises(Abandoned):
        runner._timed_round(st, 100, clock, None, (), progress, chunk=10)
    assert calls["n"] == 10


def test_each_round_starts_with_its_own_variants_typical_time() -> None:
    clock = FakeClock()
    seen: dict[str, set[float | None]] = {"a": set(), "b": set()}
    holder: dict[str, Progress] = {}

    def make(name: str, ns: int):  # type: ignore[no-untyped-def]
        def work() -> None:
            clock.work(ns)
            progress = holder.get("p")
            if progress is not None and progress.phase.startswith("round"):
                seen[name].add(progress.typical_ns)
        return work

    original = runner.Progress

    class Spy(original):  # type: ignore[valid-type, misc]
        __slots__ = ()

        def __init__(self) -> None:
            super().__init__()
            holder["p"] = self

    runner.Progress = Spy  # type: ignore[misc]
    try:
        runner.measure({"a": Workload(call=make("a", 1_000_000)),
                        "b": Workload(call=make("b", 50_000_000))},
                       RunSettings(budget_s=0.2, rounds=3, warmup_s=0.0), clock=clock, watch=False)
    finally:
        runner.Progress = original  # type: ignore[misc]
    assert seen["a"] == {1_000_000} and seen["b"] == {50_000_000}


# -- the input split without interference, restarts, confirming growth ------------------------------------


def test_the_extra_phases_run_after_the_together_rounds_on_their_own_iterator() -> None:
    clock = FakeClock()
    events: list[str] = []

    def make_puller(tag: str) -> DatasetPuller:
        def elements():  # noqa: ANN202
            for i in range(5):  # a finite dataset: 5 elements an epoch
                clock.work(1_000_000)
                events.append(tag)
                yield i

        return dataset_puller(elements)

    shared = make_puller("together")
    handed: list[object] = []

    def handover(element: object):  # noqa: ANN202
        def pull() -> object:
            clock.work(200_000)
            handed.append(element)
            return element

        return pull

    w = Workload(call=shared, pull=shared, step=lambda e: clock.work(4_000_000), items_per_iteration=1,
                        restarts=lambda: shared.restarts, fresh_pull=lambda: make_puller("alone"), handover=handover)
    raw = runner.measure({"": w}, RunSettings(budget_s=0.5, rounds=3, warmup_s=0.0), clock=clock,
                         watch=False, memory_readers=[])[""]
    # every pull of the shared iterator comes before the first of the dataset-alone phase's own
    # every pull of the shared iterator comes before the dataset-alone phase's own, but the one element the
    # step-alone phase takes from it at the very end
    first_alone = events.index("alone")
    assert events[first_alone:].count("together") == 1 and events[-1] == "together"
    split = raw.input_split
    assert split is not None
    # restarts: marked in the together phase, left out of the dataset-alone rate
    assert raw.input_restart_iterations and all(raw.input_wait_ns[i] >= 1_000_000 for i in raw.input_restart_iterations)
    assert set(split.dataset_alone.samples_ns) == {1_000_000}
    # the handover floor is measured in the step-alone phase and kept out of the step's own time
    assert set(split.handover_ns) == {200_000} and set(split.step_alone.samples_ns) == {4_000_000}
    assert handed and len(set(map(id, handed))) == 1


def test_restarted_pulls_are_marked_by_their_index() -> None:
    clock = FakeClock()
    pull = dataset_puller(lambda: iter(range(4)))
    w = Workload(call=pull, pull=pull, step=lambda e: clock.work(1_000_000), restarts=lambda: pull.restarts)
    raw = runner.measure({"": w}, RunSettings(budget_s=0.02, rounds=2, warmup_s=0.0), clock=clock,
                         watch=False, split_input=False)[""]
    # warm-up took elements 0 and 1; measured pulls are 2, 3, (restart) 0, 1, 2, 3, (restart) 0, ...
    assert raw.input_restart_iterations[:2] == (2, 6)


def _growing_workload(clock: FakeClock, reader: FakeReader, per_call: object) -> Workload:
    calls = {"n": 0}

    def work() -> None:
        clock.work(1_000_000)
        calls["n"] += 1
        reader.in_use += per_call(calls["n"])  # type: ignore[operator]

    return Workload(call=work)


def test_a_steady_leak_is_measured_longer_and_confirmed() -> None:
    from pytest_tfperf.diagnoses import diagnostics

    clock = FakeClock()
    reader = FakeReader(clock)
    w = _growing_workload(clock, reader, lambda n: 256 * 1024)
    raw = runner.measure({"": w}, RunSettings(budget_s=0.05, rounds=5, warmup_s=0.0), clock=clock,
                         watch=False, memory_readers=[reader])[""]
    (series,) = raw.memory_series
    assert series.confirmation_iterations >= 100
    extras, (d,) = diagnostics.analyse(raw)
    assert d.severity == "warning" and dict(extras)["memory_growth_bytes_per_iteration"] == pytest.approx(256 * 1024)


def test_warm_up_growth_is_measured_longer_and_then_not_accused() -> None:
    from pytest_tfperf.diagnoses import diagnostics

    clock = FakeClock()
    reader = FakeReader(clock)
    # 1 MiB a call for the first 60 calls (warm-up), flat afterwards: the timed rounds (about 50 calls)
    # lie inside the rise, so only measuring longer can tell
    w = _growing_workload(clock, reader, lambda n: 2**20 if n <= 60 else 0)
    raw = runner.measure({"": w}, RunSettings(budget_s=0.05, rounds=5, warmup_s=0.0), clock=clock,
                         watch=False, memory_readers=[reader])[""]
    (series,) = raw.memory_series
    assert series.confirmation_iterations >= 100
    extras, (d,) = diagnostics.analyse(raw)
    assert d.severity == "info" and dict(extras)["memory_growth_bytes_per_iteration"] == 0.0
    assert "process RSS grew " in d.summary and "(warm-up)" in d.summary


def _efficientnet_like(n: int) -> int:
    """RSS a call adds in a warm-up of 160 calls at a steady 848 KiB a call: the main-job process in which
    keras.applications EfficientNetB0 read as leaking grew that fast up to about call 160, then (by the
    curve measured apart, ``memory_growth``) not at all."""
    return 848 * 1024 if n <= 160 else 0


def test_a_warm_up_of_a_hundred_and_more_steps_is_measured_past_and_not_accused() -> None:
    from pytest_tfperf.diagnoses import diagnostics

    clock = FakeClock()
    reader = FakeReader(clock)
    w = _growing_workload(clock, reader, _efficientnet_like)
    raw = runner.measure({"": w}, RunSettings(budget_s=0.05, rounds=5, warmup_s=0.0), clock=clock,
                         watch=False, memory_readers=[reader])[""]
    (series,) = raw.memory_series
    # measured on to 300 calls since the first: the later half lies past the rise (a confirmation that ended
    # near call 160 read it as a leak)
    assert max(series.iterations) + series.warmup_iterations >= memory_growth.CONFIRM_PAST_ITERATIONS - 1
    extras, (d,) = diagnostics.analyse(raw)
    assert d.severity == "info" and dict(extras)["memory_growth_bytes_per_iteration"] == 0.0


def test_a_confirmation_stops_once_the_leak_alone_has_grown_past_its_cap() -> None:
    from pytest_tfperf.diagnoses import diagnostics

    clock = FakeClock()
    reader = FakeReader(clock)
    w = _growing_workload(clock, reader, lambda n: 4 * 2**20)  # 4 MiB a call: 250 calls more would be 1 GiB
    raw = runner.measure({"": w}, RunSettings(budget_s=0.05, rounds=5, warmup_s=0.0), clock=clock,
                         watch=False, memory_readers=[reader])[""]
    (series,) = raw.memory_series
    cap_calls = memory_growth.CONFIRM_MAX_GROWTH_BYTES // (4 * 2**20)
    assert cap_calls <= series.confirmation_iterations < cap_calls + 10  # stopped at the first reading past it
    extras, (d,) = diagnostics.analyse(raw)
    assert d.severity == "warning" and dict(extras)["memory_growth_bytes_per_iteration"] == pytest.approx(4 * 2**20)


def test_nothing_is_measured_longer_without_growth() -> None:
    clock = FakeClock()
    reader = FakeReader(clock)
    w = _growing_workload(clock, reader, lambda n: 0)
    raw = runner.measure({"": w}, RunSettings(budget_s=0.05, rounds=5, warmup_s=0.0), clock=clock,
                         watch=False, memory_readers=[reader])[""]
    assert raw.memory_series[0].confirmation_iterations == 0


# -- the measurer stays out of its own memory figures -----------------------------


class TracemallocProbe:
    """The Python heap's peak through ``tracemalloc``: every allocation the interpreter makes, exactly."""

    source = MemorySource.RSS_HWM
    device = "host"
    unavailable = None

    def reset(self) -> int | None:
        tracemalloc.reset_peak()
        return tracemalloc.get_traced_memory()[0]

    def peak(self) -> int | None:
        return tracemalloc.get_traced_memory()[1]

    def close(self) -> None:
        pass


def test_a_round_allocates_nothing_the_probes_can_see() -> None:
    # 20,000 iterations a round: a list of their samples alone would be 160 KB.
    clock = FakeClock()
    probe = TracemallocProbe()
    tracemalloc.start()
    try:
        raw = runner.measure({"": Workload(call=lambda: clock.work(1_000))},
                             RunSettings(budget_s=0.06, rounds=3, warmup_s=0.0),
                             clock=clock, probes=[probe], watch=False)[""]
    finally:
        tracemalloc.stop()
    peak = raw.memory[0]
    assert raw.timings.round_sizes == (20_000,) * 3
    rises = [p - s for p, s in zip(peak.per_round_peak_bytes, peak.per_round_start_bytes)]
    # What remains is the growth readings between chunks (about 2 KB), never the samples.
    assert max(rises) < 16 * 1024, rises


def test_the_samples_of_a_pull_and_step_workload_stay_out_of_the_round_too() -> None:
    clock = FakeClock()
    probe = TracemallocProbe()

    def pull() -> int:
        clock.work(300)
        return 1

    def step(element: object) -> None:
        clock.work(700)

    tracemalloc.start()
    try:
        raw = runner.measure({"": Workload(call=lambda: None, pull=pull, step=step)},
                             RunSettings(budget_s=0.02, rounds=5, warmup_s=0.0),
                             clock=clock, probes=[probe], watch=False, split_input=False)[""]
    finally:
        tracemalloc.stop()
    peak = raw.memory[0]
    rises = [p - s for p, s in zip(peak.per_round_peak_bytes, peak.per_round_start_bytes)]
    assert max(rises) < 16 * 1024, rises
    assert len(raw.input_wait_ns) == len(raw.timings.samples_ns) == 20_000
    assert set(raw.input_wait_ns) == {300}


_HWM_NOOP_SCRIPT = """
import json
from pytest_tfperf.probes import memory_probes
from pytest_tfperf.measuring import memory_growth, runner
from pytest_tfperf.measuring.workload import RunSettings, Workload
probe = memory_probes.HwmRssProbe()
out = {"unavailable": probe.unavailable}
if probe.unavailable is None:
    for name, call in (("no-op", lambda: None), ("sum(range(1000))", lambda: sum(range(1000)))):
        peak = runner.measure({"": Workload(call=call)},
                              RunSettings(budget_s=0.2, rounds=3, warmup_s=0.0), probes=[probe])[""].memory[0]
        out[name] = [p - s for p, s in zip(peak.per_round_peak_bytes, peak.per_round_start_bytes)]
print("RESULT " + json.dumps(out))
"""


def test_the_real_rss_high_water_mark_of_a_no_op_round_stays_under_64_kib() -> None:
    # In a fresh process, so that nothing of the test session runs beside the rounds.
    # A list of samples grew the high-water mark by 15-18 MiB a round here.
    # A second fresh process only when the first saw more: twice in about ten full suite runs the first round of a
    # process's first measurement read 76-88 KiB (19-22 pages), never in 12 runs of the script alone, with or
    # without load; the harness's own growth is the same in every round of every process, a page fault of the
    # machine's is not.
    seen = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", _HWM_NOOP_SCRIPT], capture_output=True, text=True,
                              timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        assert done.returncode == 0 and lines, done.stderr[-2000:]
        result = json.loads(lines[0][len("RESULT "):])
        if result["unavailable"] is not None:
            pytest.skip(f"no exact RSS high-water mark here: {result['unavailable']}")
        seen.append({name: result[name] for name in ("no-op", "sum(range(1000))")})
        if all(max(rounds) < 64 * 1024 for rounds in seen[-1].values()):
            return
    pytest.fail(f"a round's RSS high-water mark rose 64 KiB or more in two fresh processes: {seen}")

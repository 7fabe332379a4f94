"""The catalog's second measurement of a missed throughput margin, driven by a fake clock."""

from __future__ import annotations

import pytest

from pytest_tfperf.catalog.confirm import confirm_throughput_misses, interleaved_rounds
from pytest_tfperf.catalog.effects import throughput_effect
from pytest_tfperf.catalog.scenario import Comparison, Metric, Scenario, Variant

GATE = Comparison("anti", "fix", min_effect=1.1, measured_here="1.49-1.68x")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _scenario(clock: FakeClock, cost_s: dict[str, float], calls: list[str]) -> Scenario:
    def run(name: str):  # noqa: ANN202
        def call() -> None:
            calls.append(name)
            clock.now += cost_s[name]
        return call

    return Scenario(key="input_pipeline", title="t", metric=Metric.THROUGHPUT, items_per_iteration=8,
                    variants=tuple(Variant(n, run(n), n) for n in ("anti", "fix")), comparisons=(GATE,))


def test_rounds_alternate_their_order_and_count_items_per_second() -> None:
    clock, calls = FakeClock(), []
    s = _scenario(clock, {"anti": 0.125, "fix": 0.0625}, calls)
    rates = interleaved_rounds(s.workloads(), items=8, rounds=4, round_s=0.375, clock=clock)
    assert rates["anti"] == pytest.approx([64.0] * 4)  # 3 calls of 0.125 s a round, 8 items each
    assert rates["fix"] == pytest.approx([128.0] * 4)  # 6 calls of 0.0625 s
    # ABBA: 9 calls a round for the pair; anti opens rounds 0 and 2, fix rounds 1 and 3.
    assert [calls[i] for i in (0, 9, 18, 27)] == ["anti", "fix", "anti", "fix"]
    assert len(calls) == 36


def test_a_miss_the_second_measurement_clears_passes_and_says_both() -> None:
    clock, calls = FakeClock(), []
    s = _scenario(clock, {"anti": 0.125, "fix": 0.0625}, calls)
    first = throughput_effect("input_pipeline", GATE, [100, 100], [108, 104])
    assert not first.passed
    [e] = confirm_throughput_misses(s, [first], rounds=2, round_s=0.25, clock=clock)
    assert e.passed and e.value == pytest.approx(2.0)
    assert "1.08x" in e.detail and "second, direct measurement (2 interleaved rounds a side)" in e.detail
    assert calls  # it ran


def test_a_fix_that_stopped_helping_misses_twice_and_fails() -> None:
    clock, calls = FakeClock(), []
    s = _scenario(clock, {"anti": 0.125, "fix": 0.125}, calls)
    first = throughput_effect("input_pipeline", GATE, [100, 100], [101, 100])
    [e] = confirm_throughput_misses(s, [first], rounds=2, round_s=0.25, clock=clock)
    assert not e.passed and e.value == pytest.approx(1.0)
    assert "does NOT beat" in e.message() and "1.01x" in e.message()


def test_passing_ungated_and_unmeasured_effects_run_nothing() -> None:
    clock, calls = FakeClock(), []
    s = _scenario(clock, {"anti": 0.125, "fix": 0.0625}, calls)
    passed = throughput_effect("input_pipeline", GATE, [100, 100], [150, 160])
    ungated = throughput_effect("input_pipeline", Comparison("anti", "fix", 1.1, "", gated=False), [100, 100], [90, 90])
    unmeasured = throughput_effect("input_pipeline", GATE, [100], [90])
    assert confirm_throughput_misses(s, [passed, ungated, unmeasured], clock=clock) == [passed, ungated, unmeasured]
    assert calls == []


def test_bad_round_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="rounds >= 2"):
        interleaved_rounds({"a": lambda: None}, items=1, rounds=1)

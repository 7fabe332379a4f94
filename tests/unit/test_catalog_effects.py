from __future__ import annotations

import math

import pytest

from pytest_tfperf.catalog.effects import (
    effects_from_measurements,
    growth_effect,
    non_finite_effect,
    peak_effect,
    throughput_effect,
    traces_effect,
)
from pytest_tfperf.catalog.scenario import Comparison, Metric, Scenario, Variant
from pytest_tfperf.model import Measurement, MemoryPeak, MemorySource, Timings

GATE = Comparison("anti", "fix", min_effect=1.2, measured_here="1.32-1.50")


def test_throughput_effect_is_the_ratio_of_best_rounds() -> None:
    # A half-speed episode in the fix's third round does not move the effect.
    e = throughput_effect("s", GATE, anti_rounds=[100, 110, 105], fix_rounds=[150, 160, 80])
    assert e.value == pytest.approx(160 / 110)
    assert e.spread == pytest.approx((80 / 105, 150 / 100))
    assert e.passed


def test_throughput_effect_below_the_gate_fails_with_the_figures() -> None:
    e = throughput_effect("input_pipeline", GATE, anti_rounds=[100, 100], fix_rounds=[110, 105])
    assert not e.passed
    text = e.message()
    assert "'fix' does NOT beat 'anti'" in text
    assert "1.1x" in text
    assert ">= 1.2x" in text
    assert "1.32-1.50" in text


def test_one_call_each_is_not_a_throughput_measurement() -> None:
    e = throughput_effect("s", GATE, anti_rounds=[100], fix_rounds=[1000])
    assert e.value is None
    assert not e.measured
    assert e.headline() == "not measured"


def test_peak_effect_compares_transient_peaks() -> None:
    mib = 2**20
    e = peak_effect("s", Comparison("anti", "fix", 2.0, ""), [56 * mib, 60 * mib], [18 * mib, 19 * mib], "CPU:0")
    assert e.value == pytest.approx(60 / 19)
    assert e.passed
    assert "60.0 MiB vs 19.0 MiB" in e.detail


def test_a_fix_without_any_transient_peak_wins_outright() -> None:
    e = peak_effect("s", Comparison("anti", "fix", 2.0, ""), [2**20], [0], "CPU:0")
    assert math.isinf(e.value)
    assert e.passed


def test_growth_effect_is_the_difference_of_slopes() -> None:
    e = growth_effect("s", Comparison("anti", "fix", 0.9, ""), 1.0, 0.0)
    assert e.value == 1.0 and e.passed
    assert not growth_effect("s", Comparison("anti", "fix", 0.9, ""), 0.5, 0.0).passed
    assert not growth_effect("s", Comparison("anti", "fix", 0.9, ""), None, 0.0).measured


def test_traces_effect_is_per_call() -> None:
    e = traces_effect("s", Comparison("anti", "fix", 0.9, ""), 150, 150, 0, 900)
    assert e.value == 1.0 and e.passed
    assert not traces_effect("s", Comparison("anti", "fix", 0.9, ""), 10, 150, 0, 900).passed


@pytest.mark.parametrize(("anti_first", "fix_first", "anti_calls", "passed", "measured"), [
    (3.0, None, 100, True, True),  # the mistake diverges early, the fix never
    (80.0, None, 100, False, True),  # diverges, but later than the gate allows
    (None, None, 100, False, True),  # the mistake never diverged: the scenario no longer shows it
    (3.0, 7.0, 100, False, True),  # the fix diverged too
    (None, None, 5, False, False),  # five calls: too few to tell
])
def test_non_finite_effect(anti_first: float | None, fix_first: float | None, anti_calls: int, passed: bool,
                           measured: bool) -> None:
    e = non_finite_effect("s", Comparison("anti", "fix", 50, ""), anti_first, fix_first, anti_calls, 100)
    assert e.passed is passed
    assert e.measured is measured


def _measurement(name: str, round_throughputs: list[float], peaks: list[int], base: int,
                 traces_steady: int = 0) -> Measurement:
    # One iteration per round of 1 item: the round's time is 1/throughput.
    samples = tuple(int(1e9 / t) for t in round_throughputs)
    timings = Timings(samples_ns=samples, round_sizes=(1,) * len(samples), items_per_iteration=1,
                      first_call_ns=1)
    memory = (MemoryPeak(MemorySource.TF_ALLOCATOR, "CPU:0", max(peaks), baseline_bytes=base,
                         per_round_peak_bytes=tuple(peaks)),)
    return Measurement(test_id=name, mode="call", timings=timings, memory=memory, traces_steady=traces_steady)


def _scenario(metric: Metric, observe: dict[str, float | None] | None = None) -> Scenario:
    obs = observe or {}
    return Scenario(
        key="k", title="t", metric=metric, items_per_iteration=1,
        variants=tuple(Variant(n, lambda: None, n, observe=(lambda n=n: obs.get(n)) if n in obs else None)
                       for n in ("anti", "fix")),
        comparisons=(Comparison("anti", "fix", 2.0, ""),),
    )


def test_effects_from_measurements_uses_round_throughputs() -> None:
    m = {"anti": _measurement("a", [10, 12, 11], [0, 0, 0], 0), "fix": _measurement("f", [30, 20, 33], [0, 0, 0], 0)}
    [e] = effects_from_measurements(_scenario(Metric.THROUGHPUT), m)
    assert e.value == pytest.approx(33 / 12, rel=1e-6)


def test_effects_from_measurements_subtracts_the_memory_in_use_at_the_start() -> None:
    mib = 2**20
    m = {"anti": _measurement("a", [1, 1], [100 * mib, 100 * mib], 40 * mib),
         "fix": _measurement("f", [1, 1], [60 * mib, 61 * mib], 40 * mib)}
    [e] = effects_from_measurements(_scenario(Metric.TF_PEAK), m)
    assert e.value == pytest.approx(60 / 21)


def test_effects_from_measurements_reads_observations_for_growth() -> None:
    m = {"anti": _measurement("a", [1, 1], [0, 0], 0), "fix": _measurement("f", [1, 1], [0, 0], 0)}
    [e] = effects_from_measurements(_scenario(Metric.GROWTH, {"anti": 3.0, "fix": 0.0}), m)
    assert e.value == 3.0


def test_scenario_rejects_comparisons_of_unknown_variants() -> None:
    with pytest.raises(ValueError, match="unknown variant 'fixed'"):
        Scenario(key="k", title="t", metric=Metric.THROUGHPUT, items_per_iteration=1,
                 variants=(Variant("anti", lambda: None, ""), Variant("fix", lambda: None, "")),
                 comparisons=(Comparison("anti", "fixed", 2.0, ""),))


def test_scenario_rejects_repeated_variant_names() -> None:
    with pytest.raises(ValueError, match="repeat"):
        Scenario(key="k", title="t", metric=Metric.THROUGHPUT, items_per_iteration=1,
                 variants=(Variant("anti", lambda: None, ""), Variant("anti", lambda: None, "")), comparisons=())


def test_on_a_gpu_unmeasured_speed_gates_relax_to_not_worse() -> None:
    scenario = Scenario(
        key="k", title="t", metric=Metric.THROUGHPUT, items_per_iteration=1,
        variants=(Variant("anti", lambda: None, ""), Variant("fix", lambda: None, ""),
                  Variant("fix2", lambda: None, "")),
        comparisons=(Comparison("anti", "fix", 20.0, "133-214x"),
                     Comparison("anti", "fix2", 20.0, "133-214x", min_effect_gpu=3.0)),
    )
    unmeasured, measured = scenario.on_gpu().comparisons
    assert unmeasured.min_effect == 1.0
    assert "not yet measured on a GPU" in unmeasured.measured_here
    assert measured.min_effect == 3.0


def test_on_a_gpu_count_gates_stay() -> None:
    scenario = _scenario(Metric.TRACES)
    assert scenario.on_gpu() is scenario


# -- the margins' rule --------------------------------------------------------------------------------------


def test_margin_is_the_prediction_bound_for_one_new_process_rounded_down() -> None:
    import math

    from pytest_tfperf.catalog.effects import margin_from_ratios
    from pytest_tfperf.stats import t_quantile

    ratios = [1.8, 1.7, 1.9, 1.75, 1.85, 1.8, 1.72, 1.88, 1.78, 1.82]
    logs = [math.log(r) for r in ratios]
    mean = sum(logs) / 10
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 9)
    bound = math.exp(mean - t_quantile(0.9995, 9) * sd * math.sqrt(1.1))
    got = margin_from_ratios(ratios, ceiling=3.0)
    assert got.bound == pytest.approx(bound)
    assert got.runs == 10 and got.lowest == 1.7 and got.median == pytest.approx(1.8)
    assert got.bound < got.lowest
    assert got.margin == math.floor(bound * 10) / 10  # two significant figures, down
    assert got.reason.startswith("the prediction bound")
    # The margin lies at or below the bound, so the model's chance of a miss is at most 1 - confidence.
    assert 0 < got.miss_chance <= 0.0005


def test_margin_never_above_the_effect_the_scenario_stands_for() -> None:
    from pytest_tfperf.catalog.effects import margin_from_ratios

    got = margin_from_ratios([120.0, 130.0, 125.0, 128.0, 122.0], ceiling=20.0)
    assert got.margin == 20.0 and "stated effect" in got.reason
    assert got.miss_chance < 1e-6


def test_margin_never_above_the_lowest_ratio_seen() -> None:
    from pytest_tfperf.catalog.effects import margin_from_ratios

    # Identical ratios: no spread, the bound equals them; the margin is still rounded down below.
    got = margin_from_ratios([3.77, 3.77, 3.77, 3.77], ceiling=10.0)
    assert got.margin == 3.7 and got.miss_chance == 0.0


def test_a_bound_below_the_floor_gates_at_the_floor_and_says_how_likely_a_miss_is() -> None:
    from pytest_tfperf.catalog.effects import margin_from_ratios

    got = margin_from_ratios([1.6, 1.0, 1.7, 0.9, 1.5, 1.2], ceiling=1.3)
    assert got.margin == 1.1 and got.bound < 1.1
    assert "floor 1.1x" in got.reason and "cannot show" in got.reason
    assert 0.1 < got.miss_chance < 0.9  # two of six runs were below it


def test_margin_rule_needs_a_few_finite_ratios_and_a_floor_above_one() -> None:
    import math

    from pytest_tfperf.catalog.effects import margin_from_ratios

    with pytest.raises(ValueError, match="at least 3"):
        margin_from_ratios([2.0, math.inf, 3.0], ceiling=2.0)
    with pytest.raises(ValueError, match="1 < floor"):
        margin_from_ratios([2.0, 2.1, 2.2], ceiling=2.0, floor=1.0)

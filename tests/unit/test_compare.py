"""The regression decision on synthetic measurements (seeded, no clocks, no TensorFlow).

Noise model of the simulations: each iteration time is lognormal around the
round's level (per-iteration CV 3%), and each round has its own random offset
(between-round CV 1.5%), which stands in for the run-to-run variation that a
per-iteration test would ignore. Run this file as a script for the figures with
more trials and noisier settings.
"""

from __future__ import annotations

import dataclasses
import random
import re

import pytest

from pytest_tfperf.gates.memory import round_spread_bytes
from pytest_tfperf.gates.paired import judge_paired
from pytest_tfperf.gates.pooling import pool
from pytest_tfperf.gates.rounds import judge_rounds
from pytest_tfperf.gates.verdict import MIB, Status, Tolerances
from pytest_tfperf.model import Direction, Measurement, MemoryPeak, MemorySource, Timings

TEST_ID = "tests/test_pipeline.py::test_train_step"


def synthetic(
    seed: int,
    *,
    time_factor: float = 1.0,
    rounds: int = 5,
    per_round: int = 60,
    cv_iter: float = 0.03,
    cv_round: float = 0.015,
    cv_run: float = 0.0,
    base_ns: float = 1e6,
    items: float = 64.0,
    memory: tuple[MemoryPeak, ...] = (),
    traces_steady: int | None = 0,
) -> Measurement:
    rng = random.Random(seed)
    run = rng.lognormvariate(0.0, cv_run) if cv_run else 1.0
    samples: list[int] = []
    for _ in range(rounds):
        level = base_ns * time_factor * run * rng.lognormvariate(0.0, cv_round)
        samples += [int(level * rng.lognormvariate(0.0, cv_iter)) for _ in range(per_round)]
    return Measurement(
        test_id=TEST_ID,
        mode="call",
        timings=Timings(tuple(samples), (per_round,) * rounds, items, first_call_ns=50_000_000),
        memory=memory,
        traces_first_call=1,
        traces_steady=traces_steady,
        environment_id="env1",
    )


def gate(current: Measurement, baseline: Measurement, remeasure: Measurement, seed: int) -> Status:
    """The plugin's flow: judge; if borderline, measure again, pool, and judge once more (final)."""
    verdict = judge_rounds(current, baseline, Tolerances(), seed=seed)
    if verdict.needs_remeasure:
        verdict = judge_rounds(pool(current, remeasure), baseline, Tolerances(), seed=seed)
    return verdict.status


def regression_rate(time_factor: float, trials: int, **noise: float) -> float:
    alarms = 0
    for i in range(trials):
        baseline = synthetic(10_000 + i, **noise)
        current = synthetic(20_000 + i, time_factor=time_factor, **noise)
        again = synthetic(30_000 + i, time_factor=time_factor, **noise)
        alarms += gate(current, baseline, again, seed=i) is Status.REGRESSED
    return alarms / trials


# -- throughput: the product's promise ------------------------------------------


def test_a_a_comparisons_alarm_at_most_1_percent() -> None:
    assert regression_rate(1.0, trials=200) <= 0.01


def test_a_10_percent_slowdown_is_caught_at_least_95_percent_of_the_time() -> None:
    # Iterations take 10% longer: throughput falls by 9.1%, a little less than the tolerance.
    assert regression_rate(1.10, trials=200) >= 0.95


def test_a_20_percent_slowdown_is_always_caught() -> None:
    assert regression_rate(1.20, trials=200) == 1.0


def test_regression_verdict_carries_figures_and_direction() -> None:
    verdict = judge_rounds(synthetic(2, time_factor=1.25), synthetic(1), Tolerances())
    t = verdict.metric("throughput")
    assert t is not None
    assert verdict.status == "regressed" and verdict.failed
    assert t.status is Status.REGRESSED and t.direction is Direction.HIGHER_IS_BETTER
    assert t.relative_change == pytest.approx(1 / 1.25 - 1, abs=0.03)
    assert t.ci_low is not None and t.ci_high is not None
    assert t.ci_low <= t.relative_change <= t.ci_high < -0.05
    assert t.p_value is not None and t.p_value <= 0.01
    assert t.decision_threshold == pytest.approx(-0.05)
    assert t.baseline_value == pytest.approx(synthetic(1).throughput_per_s)


def test_speedup_beyond_tolerance_is_an_improvement_not_a_failure() -> None:
    verdict = judge_rounds(synthetic(2, time_factor=1 / 1.25), synthetic(1), Tolerances())
    assert verdict.status == "improved"
    assert not verdict.failed
    assert re.search(r"throughput faster than baseline by 2\d% \(99% CI \+\d", verdict.summary())
    notice = verdict.improvement_message("pytest --tfperf --tfperf-update")
    assert notice is not None and "pytest --tfperf --tfperf-update" in notice and TEST_ID in notice


def test_small_speedup_is_unchanged() -> None:
    verdict = judge_rounds(synthetic(2, time_factor=1 / 1.06), synthetic(1), Tolerances())
    assert verdict.status == "unchanged"
    assert verdict.improvement_message("x") is None


def test_rounds_that_vary_too_much_are_reported_noisy_with_what_could_be_missed() -> None:
    statuses = []
    for i in range(30):
        verdict = judge_rounds(synthetic(100 + i, cv_round=0.10), synthetic(200 + i, cv_round=0.10), Tolerances(), seed=i)
        statuses.append(verdict.status)
        t = verdict.metric("throughput")
        assert t is not None
        if t.status is Status.NOISY:
            assert t.minimum_detectable_change is not None and t.minimum_detectable_change > 0.10
            assert "too noisy to decide" in t.message and "caught" in t.message
    assert statuses.count(Status.UNCHANGED) == 0
    assert statuses.count(Status.NOISY) >= 27


def test_quiet_measurements_report_what_they_can_catch() -> None:
    t = judge_rounds(synthetic(2), synthetic(1), Tolerances()).metric("throughput")
    assert t is not None and t.status is Status.UNCHANGED
    assert t.minimum_detectable_change is not None and 0.05 < t.minimum_detectable_change < 0.10
    assert f"catches slowdowns of {t.minimum_detectable_change:.1%} or more" in t.message


def test_too_few_rounds_cannot_reach_the_confidence_level_and_say_so() -> None:
    verdict = judge_rounds(synthetic(2, rounds=3, time_factor=1.5), synthetic(1, rounds=3), Tolerances())
    t = verdict.metric("throughput")
    assert t is not None and t.status is Status.NOISY
    assert t.minimum_detectable_change == float("inf")
    assert "at least 5 rounds" in t.message


def test_borderline_evidence_asks_for_a_remeasure_and_clear_evidence_does_not() -> None:
    borderline = judge_rounds(synthetic(2, time_factor=1.05, cv_round=0.03), synthetic(1, cv_round=0.03), Tolerances())
    assert borderline.needs_remeasure
    assert not judge_rounds(synthetic(2), synthetic(1), Tolerances()).needs_remeasure
    assert not judge_rounds(synthetic(2, time_factor=1.3), synthetic(1), Tolerances()).needs_remeasure


def test_tolerance_moves_the_decision_threshold() -> None:
    current, baseline = synthetic(2, time_factor=1.08), synthetic(1)
    assert judge_rounds(current, baseline, Tolerances()).status == "regressed"  # 7.4% slower > 5%
    loose = judge_rounds(current, baseline, Tolerances(throughput=0.20))  # decides at 10%
    assert loose.status == "unchanged"


def test_throughput_compares_items_per_second_not_iteration_time() -> None:
    # Twice the items per iteration at the same iteration time is twice the throughput.
    verdict = judge_rounds(synthetic(2, items=128.0), synthetic(1, items=64.0), Tolerances())
    t = verdict.metric("throughput")
    assert t is not None and t.status is Status.IMPROVED
    assert t.relative_change == pytest.approx(1.0, abs=0.05)


def test_judge_is_deterministic_for_a_seed() -> None:
    current, baseline = synthetic(2, time_factor=1.05), synthetic(1)
    assert judge_rounds(current, baseline, Tolerances(), seed=3) == judge_rounds(current, baseline, Tolerances(), seed=3)


def test_judge_refuses_other_tests_and_other_environments() -> None:
    other = dataclasses.replace(synthetic(2), test_id="tests/test_x.py::test_other")
    with pytest.raises(ValueError, match="its own baseline"):
        judge_rounds(other, synthetic(1), Tolerances())
    elsewhere = dataclasses.replace(synthetic(2), environment_id="env2")
    with pytest.raises(ValueError, match="different environments"):
        judge_rounds(elsewhere, synthetic(1), Tolerances())


# -- memory -------------------------------------------------------------------


def tf_peak(peak_bytes: int, per_round: tuple[int, ...] = ()) -> MemoryPeak:
    return MemoryPeak(MemorySource.TF_ALLOCATOR, "CPU:0", peak_bytes, 0, per_round or (peak_bytes,) * 5)


def rss_peak(peak_bytes: int) -> MemoryPeak:
    return MemoryPeak(MemorySource.RSS_HWM, "host", peak_bytes, 0, (peak_bytes,) * 5)


def with_memory(peaks: tuple[MemoryPeak, ...]) -> Measurement:
    # One short round of timings: these tests are about memory, and a tiny
    # throughput comparison keeps a thousand trials fast.
    return synthetic(0, rounds=1, per_round=3, memory=peaks)


def memory_status(current: tuple[MemoryPeak, ...], baseline: tuple[MemoryPeak, ...], metric: str) -> Status:
    verdict = judge_rounds(with_memory(current), with_memory(baseline), Tolerances(bootstrap_resamples=100))
    m = verdict.metric(metric)
    assert m is not None
    return m.status


@pytest.mark.parametrize("base", [3 * MIB, 10 * MIB, 100 * MIB, 2048 * MIB])
def test_ten_percent_more_allocator_memory_is_always_caught_and_no_change_never(base: int) -> None:
    name = "peak_tf_allocator[CPU:0]"
    if base * 0.10 > MIB:  # below the 1 MiB floor a 10% change is deliberately ignored
        assert memory_status((tf_peak(int(base * 1.10)),), (tf_peak(base),), name) is Status.REGRESSED
    assert memory_status((tf_peak(base),), (tf_peak(base),), name) is Status.UNCHANGED
    assert memory_status((tf_peak(int(base * 1.01)),), (tf_peak(base),), name) is Status.UNCHANGED


def test_interleaving_jitter_rarely_alarms_and_ten_percent_is_still_caught() -> None:
    # tf.data and Keras threads move the allocator's peak by a few MiB from round to round
    # (here: each round adds uniform 0-4 MiB to a 100 MiB peak).
    name = "peak_tf_allocator[CPU:0]"
    base = 100 * MIB

    def jittery(rng: random.Random, scale: float) -> MemoryPeak:
        rounds = tuple(int(scale * base + rng.uniform(0, 4 * MIB)) for _ in range(5))
        return tf_peak(max(rounds), rounds)

    rng = random.Random(11)
    trials = 1000
    false_alarms = sum(
        memory_status((jittery(rng, 1.0),), (jittery(rng, 1.0),), name) is Status.REGRESSED for _ in range(trials)
    )
    caught = sum(
        memory_status((jittery(rng, 1.10),), (jittery(rng, 1.0),), name) is Status.REGRESSED for _ in range(trials)
    )
    assert false_alarms <= trials * 0.005
    assert caught == trials


def test_a_leak_within_the_measurement_does_not_widen_its_own_band() -> None:
    leaking = tf_peak(140 * MIB, tuple(m * MIB for m in (100, 110, 120, 130, 140)))
    assert round_spread_bytes(leaking.per_round_peak_bytes) == pytest.approx(0, abs=1)
    assert memory_status((leaking,), (tf_peak(100 * MIB),), "peak_tf_allocator[CPU:0]") is Status.REGRESSED


def test_memory_whose_rounds_vary_by_more_than_the_cap_is_noisy() -> None:
    wild = tf_peak(20 * MIB, tuple(m * MIB for m in (10, 20, 12, 18, 11)))
    verdict = judge_rounds(with_memory((wild,)), with_memory((wild,)), Tolerances())
    m = verdict.metric("peak_tf_allocator[CPU:0]")
    assert m is not None and m.status is Status.NOISY
    assert m.minimum_detectable_change is not None and m.minimum_detectable_change > 0.10


def test_rss_has_a_16_mib_floor_and_a_10_percent_band() -> None:
    base = 600 * MIB
    assert memory_status((rss_peak(base + 12 * MIB),), (rss_peak(base),), "peak_rss_hwm[host]") is Status.UNCHANGED
    assert memory_status((rss_peak(base + 70 * MIB),), (rss_peak(base),), "peak_rss_hwm[host]") is Status.REGRESSED
    small = 50 * MIB  # 10% is 5 MiB, under the floor
    assert memory_status((rss_peak(small + 10 * MIB),), (rss_peak(small),), "peak_rss_hwm[host]") is Status.UNCHANGED


def test_less_memory_is_an_improvement() -> None:
    assert memory_status((tf_peak(80 * MIB),), (tf_peak(100 * MIB),), "peak_tf_allocator[CPU:0]") is Status.IMPROVED


def test_missing_memory_figures_are_unavailable_with_the_reason() -> None:
    gone = MemoryPeak(MemorySource.TF_ALLOCATOR, "CPU:0", None, unavailable="TF_ENABLE_ONEDNN_OPTS=0")
    verdict = judge_rounds(with_memory((gone,)), with_memory((tf_peak(MIB),)), Tolerances())
    m = verdict.metric("peak_tf_allocator[CPU:0]")
    assert m is not None and m.status is Status.UNAVAILABLE and "TF_ENABLE_ONEDNN_OPTS=0" in m.message
    only_now = judge_rounds(with_memory((rss_peak(MIB),)), with_memory(()), Tolerances()).metric("peak_rss_hwm[host]")
    assert only_now is not None and only_now.status is Status.UNAVAILABLE and "baseline" in only_now.message


# -- traces -------------------------------------------------------------------


def test_any_increase_in_steady_state_traces_is_a_regression() -> None:
    verdict = judge_rounds(synthetic(2, traces_steady=1), synthetic(1, traces_steady=0), Tolerances())
    t = verdict.metric("traces_steady")
    assert t is not None and t.status is Status.REGRESSED and verdict.status == "regressed"
    assert "0 -> 1" in t.message
    assert judge_rounds(synthetic(2, traces_steady=1), synthetic(1, traces_steady=2), Tolerances()).metric(
        "traces_steady"
    ).status is Status.IMPROVED  # type: ignore[union-attr]
    allowed = Tolerances(traces_steady_increase=2)
    assert judge_rounds(synthetic(2, traces_steady=2), synthetic(1), allowed).status == "unchanged"
    missing = judge_rounds(synthetic(2, traces_steady=None), synthetic(1), Tolerances()).metric("traces_steady")
    assert missing is not None and missing.status is Status.UNAVAILABLE


# -- messages -----------------------------------------------------------------


def test_failure_message_says_what_moved_how_sure_against_what_and_how_to_refresh() -> None:
    current = synthetic(2, time_factor=1.25, memory=(tf_peak(110 * MIB),), traces_steady=3)
    baseline = synthetic(1, memory=(tf_peak(100 * MIB),))
    verdict = judge_rounds(current, baseline, Tolerances())
    text = verdict.failure_message("3f2a9c1d4e5b6a7c", "pytest --tfperf --tfperf-update tests/test_pipeline.py")
    assert TEST_ID in text
    assert "throughput" in text and "items/s" in text
    t = verdict.metric("throughput")
    assert t is not None and t.relative_change is not None
    # The printed rates agree with the printed change: the current one is the baseline's times the estimate.
    estimated = baseline.throughput_per_s * (1.0 + t.relative_change)
    assert f"{baseline.throughput_per_s:,.1f} items/s -> {estimated:,.1f} items/s" in text
    assert f"({t.relative_change * 100:+.1f}%, 99% bounds" in text
    assert t.ci_high is not None and t.ci_high < 0.0  # a failed verdict's bounds never reach zero
    assert "99% confidence" in text and "p = " in text
    assert "peak_tf_allocator[CPU:0]: 100.0 MiB -> 110.0 MiB (+10.0%" in text
    assert "traces_steady: 0 -> 3" in text
    assert "3f2a9c1d4e5b6a7c" in text
    assert "pytest --tfperf --tfperf-update tests/test_pipeline.py" in text


def test_status_compares_equal_to_plain_strings() -> None:
    assert Status.REGRESSED == "regressed" and str(Status.NOISY) == "noisy"


def test_tolerances_reject_nonsense_with_the_field_name() -> None:
    with pytest.raises(ValueError, match="Tolerances.throughput"):
        Tolerances(throughput=10)
    with pytest.raises(ValueError, match="Tolerances.rss_floor_bytes"):
        Tolerances(rss_floor_bytes=-1)
    with pytest.raises(ValueError, match="Tolerances.confidence"):
        Tolerances(confidence=1.0)
    assert Tolerances().throughput_decision_threshold == pytest.approx(0.05)


# -- pool ---------------------------------------------------------------------


def test_pool_concatenates_rounds_and_keeps_the_worst_figures() -> None:
    a = synthetic(1, rounds=5, memory=(tf_peak(100 * MIB),), traces_steady=0)
    b = synthetic(2, rounds=3, memory=(tf_peak(104 * MIB, (104 * MIB,) * 3),), traces_steady=1)
    b = dataclasses.replace(b, timings=dataclasses.replace(b.timings, first_call_ns=1))
    pooled = pool(a, b)
    assert pooled.timings.round_sizes == a.timings.round_sizes + b.timings.round_sizes
    assert pooled.timings.samples_ns == a.timings.samples_ns + b.timings.samples_ns
    assert pooled.timings.first_call_ns == a.timings.first_call_ns
    peak = pooled.memory_peak(MemorySource.TF_ALLOCATOR)
    assert peak is not None and peak.peak_bytes == 104 * MIB and len(peak.per_round_peak_bytes) == 8
    assert pooled.traces_steady == 1
    assert pooled.test_id == a.test_id and pooled.environment_id == "env1"


def test_pool_refuses_measurements_that_do_not_belong_together() -> None:
    with pytest.raises(ValueError, match="one test"):
        pool(synthetic(1), dataclasses.replace(synthetic(2), test_id="other"))
    with pytest.raises(ValueError, match="items per iteration"):
        pool(synthetic(1), synthetic(2, items=32.0))


# -- paired (interleaved) measurements -----------------------------------------
# Noise model: the machine's speed drifts from round to round (shared by both
# sides, CV 8%: what a shared 2-core VM does between minutes); each side adds
# its own round noise (1.5%) and iteration noise (3%), and one round in fifty
# of either side falls into a half-speed spell of the host (not shared).


def paired(seed: int, time_factor: float, *, rounds: int = 20, per_round: int = 20,
           cv_machine: float = 0.08, spell_rate: float = 0.02) -> tuple[Measurement, Measurement]:
    rng = random.Random(seed)
    base: list[int] = []
    cur: list[int] = []
    for _ in range(rounds):
        machine = 1e6 * rng.lognormvariate(0.0, cv_machine)
        for side, factor in ((base, 1.0), (cur, time_factor)):
            level = machine * factor * rng.lognormvariate(0.0, 0.015) * (2.0 if rng.random() < spell_rate else 1.0)
            side += [int(level * rng.lognormvariate(0.0, 0.03)) for _ in range(per_round)]

    def measurement(samples: list[int], name: str) -> Measurement:
        return Measurement(test_id=f"{TEST_ID}[{name}]", mode="call", environment_id="env1", traces_steady=0,
                           timings=Timings(tuple(samples), (per_round,) * rounds, 64.0, first_call_ns=1))

    return measurement(cur, "new"), measurement(base, "base")


def paired_rate(time_factor: float, trials: int, **kw: float) -> float:
    return sum(judge_paired(*paired(i, time_factor, **kw), Tolerances()).status is Status.REGRESSED
               for i in range(trials)) / trials


def test_paired_rounds_cancel_a_drift_that_moves_both_sides() -> None:
    assert paired_rate(1.0, trials=200) <= 0.01
    assert paired_rate(1.10, trials=200) >= 0.95  # throughput -9.1%
    assert paired_rate(1.20, trials=200, spell_rate=0.0) == 1.0
    # Half-speed spells that hit one side only can hide even a large slowdown, rarely.
    assert paired_rate(1.20, trials=200) >= 0.99


def test_the_two_sample_rank_test_loses_what_pairing_sees() -> None:
    # Same data, 8 rounds a side, a 10% drift between rounds: unpaired, it hides a 10% slowdown.
    data = [paired(i, 1.10, rounds=8, cv_machine=0.10) for i in range(50)]
    unpaired = sum(judge_rounds(dataclasses.replace(cur, test_id=base.test_id), base, Tolerances()).status
                   is Status.REGRESSED for cur, base in data)
    pairwise = sum(judge_paired(cur, base, Tolerances()).status is Status.REGRESSED for cur, base in data)
    assert unpaired <= 10 and pairwise >= 40


def test_paired_verdict_says_how_it_was_judged() -> None:
    verdict = judge_paired(*paired(3, 1.25), Tolerances())
    t = verdict.metric("throughput")
    assert t is not None and t.status is Status.REGRESSED
    assert "one-sided test over 20 interleaved rounds" in t.message
    assert t.relative_change is not None and t.ci_low is not None and t.ci_high is not None
    assert t.ci_low < t.relative_change < t.ci_high < 0
    assert t.relative_change == pytest.approx(1 / 1.25 - 1, abs=0.03)
    assert verdict.test_id.endswith("[new]")


def test_paired_judging_needs_rounds_side_by_side() -> None:
    cur, base = paired(1, 1.0)
    with pytest.raises(ValueError, match="side by side"):
        judge_paired(cur, dataclasses.replace(base, timings=synthetic(1, rounds=4).timings), Tolerances())
    with pytest.raises(ValueError, match="different environments"):
        judge_paired(cur, dataclasses.replace(base, environment_id="env2"), Tolerances())


@pytest.mark.parametrize("rounds", [1, 5])
def test_too_few_paired_rounds_cannot_reach_the_confidence_level_and_say_so(rounds: int) -> None:
    cur, base = paired(1, 1.5, rounds=rounds, spell_rate=0.0)
    t = judge_paired(cur, base, Tolerances()).metric("throughput")
    assert t is not None and t.status is Status.NOISY
    assert t.minimum_detectable_change == float("inf")
    assert "a verdict needs at least 7 interleaved rounds" in t.message


if __name__ == "__main__":  # pragma: no cover - figures for the report, not a test
    import sys

    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from validation.intervals import wilson_interval

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    settings = [
        ("per-round CV 1.5% (unit-test model)", {}),
        ("per-round CV 3%", {"cv_round": 0.03}),
        ("per-round CV 4%", {"cv_round": 0.04}),
        ("+ hidden per-run CV 2%", {"cv_run": 0.02}),
    ]
    print(f"{n} trials per cell; rate [95% Wilson CI]; 'slowdown' = iteration time x factor")
    for label, noise in settings:
        cells = []
        for factor in (1.0, 1.05, 1.10, 1.20):
            hits = round(regression_rate(factor, n, **noise) * n)
            lo, hi = wilson_interval(hits, n)
            cells.append(f"x{factor:.2f}: {hits / n:6.1%} [{lo:.1%}-{hi:.1%}]")
        print(f"{label:38s} " + "  ".join(cells))


def test_the_first_look_ends_the_rounds_only_when_the_change_is_surely_within_the_threshold() -> None:
    from pytest_tfperf.gates.paired import FIRST_LOOK_ROUNDS, clearly_within

    tol = Tolerances()
    same = [100.0 * (1.0 + 0.004 * ((i * 7) % 5 - 2)) for i in range(FIRST_LOOK_ROUNDS)]
    base = [100.0] * FIRST_LOOK_ROUNDS
    assert clearly_within(same, base, tol)
    assert not clearly_within(same[:-1], base[:-1], tol)  # before the look: never
    assert not clearly_within([v * 0.92 for v in same], base, tol)  # 8% slower: a regression may come of it
    assert not clearly_within([v * 1.12 for v in same], base, tol)  # 12% faster: an improvement may
    noisy = [100.0 * (1.0 + 0.3 * ((i * 7) % 5 - 2)) for i in range(FIRST_LOOK_ROUNDS)]
    assert not clearly_within(noisy, base, tol)  # too spread to be sure of anything


def test_rounds_that_move_together_in_spells_weigh_as_fewer_pairs() -> None:
    """Measured on a loaded 2-core machine: spells of several rounds on one side. The same values in spells
    give a wider interval than shuffled, and no verdict where the shuffled ones would give one."""
    from pytest_tfperf.gates.paired import paired_estimate

    spells = [0.12] * 6 + [-0.02] * 4 + [0.15] * 5 + [0.0] * 5  # four spells, 20 rounds
    shuffled = [spells[(i * 7) % 20] for i in range(20)]
    tight, wide = paired_estimate(shuffled, 0.01), paired_estimate(spells, 0.01)
    assert wide.rho > 0.5 and wide.weight < 10 and tight.weight == 20
    assert wide.change == tight.change  # one estimate: the order of the rounds does not move it
    assert wide.high - wide.low > 1.5 * (tight.high - tight.low)
    assert tight.p_faster < 0.01 < wide.p_faster


def test_the_bounds_and_the_p_value_say_the_same() -> None:
    from pytest_tfperf.gates.paired import paired_estimate

    for seed in range(200):
        rng = __import__("random").Random(seed)
        logs = [rng.gauss(-0.03, 0.05) for _ in range(rng.choice((8, 10, 20, 40)))]
        e = paired_estimate(logs, 0.01)
        assert (e.high < 0.0) == (e.p_slower < 0.01) or abs(e.p_slower - 0.01) < 1e-9
        assert e.low <= e.change <= e.high


def test_the_against_limit_is_caught_as_often_as_it_says_by_the_whole_procedure() -> None:
    """``against_detectable_slowdown`` states what the three-pair procedure catches: simulate that procedure
    under the model the limit assumes (each pair's estimate off by its standard error and its own offset) at
    the stated limit, and it must catch it at least 95% of the time; half as far from the threshold, it may
    not."""
    import math
    import random

    from pytest_tfperf import stats
    from pytest_tfperf.gates.paired import BETWEEN_PAIRS, PAIRS_TO_FAIL, against_detectable_slowdown

    tol = Tolerances()
    rng = random.Random(7)
    DRAWS = 60_000  # noqa: N806
    slack = 3.0 * math.sqrt(0.95 * 0.05 / DRAWS)  # three of the simulation's own standard errors
    threshold = -math.log1p(-tol.throughput_decision_threshold)

    def caught(slowdown: float, se: float, df: float) -> float:
        critical = stats.t_quantile(tol.confidence, df) * se
        hits = 0
        for _ in range(DRAWS):
            reads = [slowdown + rng.gauss(0, se) + rng.gauss(0, BETWEEN_PAIRS) for _ in range(PAIRS_TO_FAIL)]
            first = reads[0] > max(threshold, critical)
            fresh = all(r > critical for r in reads[1:])
            hits += first and fresh and sum(reads) / len(reads) > threshold
        return hits / DRAWS

    for se, df in ((0.002, 19.0), (0.01, 15.0), (0.02, 9.0)):
        limit = -math.log1p(-against_detectable_slowdown(se, df, tol))
        assert caught(limit, se, df) >= 0.95 - slack
        assert caught(threshold + (limit - threshold) / 2, se, df) < 0.95 - slack
    assert against_detectable_slowdown(0.01, 15.0, tol) < against_detectable_slowdown(0.02, 15.0, tol)
    assert math.isinf(against_detectable_slowdown(math.inf, 15.0, tol))


def periodic(seed: int, *, stall: float, every: int = 8, rounds: int = 20, per_round: int = 64,
             round_cv: float = 0.0) -> Measurement:
    """1 ms iterations (3% noise), every ``every``-th one ``stall`` ms longer: the median iteration never moves.
    ``round_cv``: each round's own speed, as a busy machine moves it."""
    rng = random.Random(seed)
    samples = []
    for _ in range(rounds):
        level = rng.lognormvariate(0.0, round_cv) if round_cv else 1.0
        samples += [int(level * (1e6 * rng.lognormvariate(0.0, 0.03) + (stall * 1e6 if i % every == every - 1
                                                                          else 0.0))) for i in range(per_round)]
    return Measurement(test_id=TEST_ID, mode="call", timings=Timings(tuple(samples), (per_round,) * rounds, 1.0, 50_000_000),
                       memory=(), traces_first_call=1, traces_steady=0, environment_id="env1")


def test_a_cost_on_every_eighth_iteration_is_told_beside_a_verdict_that_cannot_see_it() -> None:
    """4 ms more on every eighth 1 ms iteration is 1.5x the time per item, and leaves the median iteration where
    it was: the verdict (the median's) stays unchanged, and its message says the mean time per item is slower."""
    verdict = judge_paired(periodic(1, stall=4.0), periodic(2, stall=0.0), Tolerances())
    throughput = verdict.metric("throughput")
    assert throughput is not None and throughput.status is not Status.REGRESSED
    assert re.search(r"; but the mean time per item is 3\d\.\d% slower \(20 interleaved rounds, p = ", throughput.message)
    assert "not judged: make one iteration cover the cost's period (items=) to judge it" in throughput.message


def test_unchanged_code_with_rare_slow_iterations_on_both_sides_gets_no_such_notice() -> None:
    notices = 0
    for seed in range(200):
        verdict = judge_paired(periodic(2 * seed, stall=4.0, every=50), periodic(2 * seed + 1, stall=4.0, every=50),
                               Tolerances())
        throughput = verdict.metric("throughput")
        assert throughput is not None
        notices += "mean time per item" in throughput.message
    assert notices == 0


def test_beside_another_version_of_the_code_the_notice_is_not_given() -> None:
    """Under --tfperf-against the sides are two processes, which differ in their rare slow iterations for as long
    as they live: unchanged code got the notice 4 times in 360 verdicts there, so the verdict alone does not give
    it; the plan does once two fresh pairs read it too (tests/unit/test_against_periodic.py)."""
    verdict = judge_paired(periodic(1, stall=4.0), periodic(2, stall=0.0), Tolerances(), against=True)
    throughput = verdict.metric("throughput")
    assert throughput is not None and "mean time per item" not in throughput.message


def test_beside_a_noisy_verdict_the_notice_is_not_given() -> None:
    """The notice is for a median sure of itself while the mean moved; rounds too noisy to decide say so already."""
    noisy = judge_paired(periodic(3, stall=4.0, round_cv=0.3), periodic(4, stall=0.0, round_cv=0.3), Tolerances())
    throughput = noisy.metric("throughput")
    assert throughput is not None and throughput.status is Status.NOISY
    assert "mean time per item" not in throughput.message

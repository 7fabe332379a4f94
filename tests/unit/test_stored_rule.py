"""The stored-baseline rule: prediction bound over a baseline's runs, confirmation, detection limit.

Noise is synthetic and seeded: these tests check the rule's arithmetic and its
error rates through the shipped code (``gates.stored.judge`` with ``BaselineRuns``),
not this machine's speed.
"""

from __future__ import annotations

import math
import random

import pytest

from pytest_tfperf import stats
from pytest_tfperf.gates import stored_rule
from pytest_tfperf.gates.stored import judge
from pytest_tfperf.gates.verdict import Status, Tolerances
from pytest_tfperf.config import DEFAULT_RUNS
from pytest_tfperf.model import Measurement, MemoryPeak, MemorySource, Timings
from pytest_tfperf.gates.baseline_runs import BaselineRuns
from pytest_tfperf.storage.runs import RECORD, REFRESH, RunSummary

TEST = "tests/t.py::test_step"
MIB = 2**20


def measurement(throughput: float, *, added: int | None = None, traces: int = 0) -> Measurement:
    """A run whose median iteration gives ``throughput`` items/s (100 items per iteration)."""
    ns = round(100 * 1e9 / throughput)
    memory = () if added is None else (
        MemoryPeak(MemorySource.TF_ALLOCATOR, "CPU:0", added + 10 * MIB, 10 * MIB,
                   per_round_peak_bytes=(added + 10 * MIB,) * 5, per_round_start_bytes=(10 * MIB,) * 5),)
    return Measurement(test_id=TEST, mode="call", timings=Timings((ns,) * 25, (5,) * 5, 100.0, ns),
                       memory=memory, traces_first_call=1, traces_steady=traces, environment_id="env")


def run(throughput: float, *, kind: str = REFRESH, added: int | None = None, i: int = 0) -> RunSummary:
    memory = () if added is None else (("peak_tf_allocator[CPU:0]", added),)
    return RunSummary(run_id=f"r{i}", recorded_at=f"2026-11-26T00:00:{i:02d}Z", kind=kind,
                      throughput_per_s=throughput, memory_added_bytes=memory)


def runs(values: list[float], history: list[float] = ()) -> BaselineRuns:  # type: ignore[assignment]
    return BaselineRuns(tuple(run(v, i=i) for i, v in enumerate(values)),
                        tuple(run(v, kind=RECORD, i=i) for i, v in enumerate(history)))


def test_spread_pools_baseline_deviations_and_successive_differences() -> None:
    s = stored_rule.run_spread([1.0, 2.0, 3.0])
    assert (s.level, s.n_runs, s.df) == (2.0, 3, 2.0) and s.sd == pytest.approx(1.0)
    # A step in the recorded history is one large difference, not a shifted mean for every run.
    flat = stored_rule.run_spread([1.0, 2.0, 3.0], [5.0] * 10)
    stepped = stored_rule.run_spread([1.0, 2.0, 3.0], [5.0] * 5 + [9.0] * 5)
    assert flat.sd < stepped.sd < 1.2 * math.sqrt((2.0 + 16.0 / 2.0) / (2 + 9))
    assert flat.n_history == 10 and flat.df == pytest.approx(2.0 + 2 * 81 / 26)
    assert not stored_rule.run_spread([1.0, 2.0]).known  # 1 degree of freedom: t(0.99, 1) = 31.8


def _monte_carlo_joint(k: float, df: int, rho: float, trials: int, seed: int) -> float:
    """Unchanged code, simulated: a baseline of ``df + 1`` normal runs, then a run and its confirmation
    sharing a component of variance ``rho``; the share where both fall ``k`` spreads below the mean."""
    rng = random.Random(seed)
    n = df + 1
    hits = 0
    for _ in range(trials):
        base = [rng.gauss(0.0, 1.0) for _ in range(n)]
        bound = sum(base) / n - k * stats.stdev(base)
        shared = rng.gauss(0.0, math.sqrt(rho))
        both = all(shared + rng.gauss(0.0, math.sqrt(1.0 - rho)) < bound for _ in range(2))
        hits += both
    return hits / trials


def test_two_runs_judged_against_one_baseline_cross_together_more_often_than_independent_runs() -> None:
    # The old rule put each run alone at 1% (Student t at 99%) and called both 0.01%; sharing the
    # baseline, both cross nine times as often. The quadrature agrees with a simulation of that.
    old_k = stats.t_quantile(0.99, 6) * math.sqrt(1 + 1 / 7)
    assert stored_rule._joint_crossing(old_k, 6, 7, 0.0) == pytest.approx(9.06e-4, rel=0.01)
    k = 1.8  # a loose bound, so a few thousand trials estimate its joint rate to a few percent
    expected = stored_rule._joint_crossing(k, 6, 7, 0.3)
    simulated = _monte_carlo_joint(k, 6, 0.3, 6000, seed=3)
    assert abs(simulated - expected) < 4 * math.sqrt(expected * (1 - expected) / 6000)


def test_the_bound_factor_meets_the_joint_false_alarm_rate_and_widens_with_correlation() -> None:
    for df, n in ((6, 7), (12, 13), (4.5, 7)):
        k = stored_rule.bound_factor(df, n, 1e-4, 0.0)
        assert stored_rule._joint_crossing(k, round(df * 4) / 4, n, 0.0) == pytest.approx(1e-4, rel=1e-3)
    assert stored_rule.bound_factor(6, 7, 1e-4, 0.0) < stored_rule.bound_factor(6, 7, 1e-4, 0.3)
    # More degrees of freedom, a tighter bound; with many, it tends to the bivariate normal's.
    assert stored_rule.bound_factor(30, 7, 1e-4) < stored_rule.bound_factor(6, 7, 1e-4)
    s = stored_rule.run_spread([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    assert s.prediction_half_width(0.99) == pytest.approx(stored_rule.bound_factor(6, 7, 1e-4) * s.sd)


def test_a_suite_of_one_test_is_floored_by_the_calibration_workload_with_its_degrees_of_freedom() -> None:
    calibration = [1000.0 * math.exp(0.1 * z) for z in (-1.5, -0.5, 0.0, 0.5, 1.5, -1.0, 1.0)]
    floor = stored_rule.machine_floor([(0.01, 6.0)], calibration)
    assert floor.source == "calibration" and floor.df == 6.0
    assert floor.sd == pytest.approx(stored_rule.log_spread(calibration))
    quiet = runs([1000.0, 1001.0, 999.0, 1000.5, 999.5, 1000.0, 1000.2])
    floored = BaselineRuns(quiet.runs, machine=floor)
    verdict = judge(measurement(900.0), measurement(1000.0), Tolerances(), runs=floored)
    m = verdict.metric("throughput")
    assert m is not None and m.status is Status.UNCHANGED, m.message
    assert "its calibration workload, 6 degrees of freedom" in m.message
    # Without the floor the test's own agreeing runs would have failed that same run.
    assert judge(measurement(900.0), measurement(1000.0), Tolerances(), runs=quiet).needs_confirmation


def test_without_a_calibration_the_suite_floors_a_test_given_enough_tests() -> None:
    few = [(0.2, 6.0)] * (stored_rule.MIN_TESTS_FOR_MACHINE - 1)
    assert stored_rule.machine_floor(few).source == "assumed"
    many = [(0.05 * i, 6.0) for i in range(1, 9)]
    suite = stored_rule.machine_floor(many)
    assert suite.source == "suite" and suite.sd == pytest.approx(0.3)
    # The calibration, where the refresh measured it, is the floor whatever the suite's size.
    assert stored_rule.machine_floor(many, [1000.0, 1001.0, 999.0]).source == "calibration"
    own = stored_rule.run_spread([0.0, 0.5, 1.0])
    kept = stored_rule.floored(own, suite)  # a test noisier than the floor keeps its own spread
    assert (kept.sd, kept.df) == (own.sd, own.df)
    # Every spread behind that bound comes from one refresh: its shared spell is assumed.
    assert kept.shared == stored_rule.REFRESH_CORRELATION


def test_unchanged_run_inside_the_bound_is_unchanged_and_states_its_limit() -> None:
    base = runs([1000.0, 1020.0, 980.0, 1010.0, 990.0])
    verdict = judge(measurement(995.0), measurement(1000.0), Tolerances(), runs=base)
    m = verdict.metric("throughput")
    assert m is not None and m.status is Status.UNCHANGED and not verdict.needs_confirmation
    assert m.baseline_runs == 5 and 0.05 < m.detection_limit < 0.2
    assert f"slowdowns of {m.detection_limit:.0%} or more are caught here" in m.message


def test_a_slowdown_beyond_the_bound_needs_a_fresh_process_then_fails() -> None:
    base = runs([1000.0, 1020.0, 980.0, 1010.0, 990.0])
    first = judge(measurement(600.0), measurement(1000.0), Tolerances(), runs=base)
    assert first.status is Status.REGRESSED and first.needs_confirmation and not first.confirmed
    final = judge(measurement(600.0), measurement(1000.0), Tolerances(), runs=base, confirmation=measurement(610.0))
    assert final.status is Status.REGRESSED and final.confirmed and not final.needs_confirmation
    assert "this process ran 40.0% and a fresh process 39.0% slower" in final.metric("throughput").message


def test_a_slow_process_that_a_fresh_one_does_not_repeat_is_not_a_regression() -> None:
    base = runs([1000.0, 1020.0, 980.0, 1010.0, 990.0])
    final = judge(measurement(600.0), measurement(1000.0), Tolerances(), runs=base, confirmation=measurement(1005.0))
    m = final.metric("throughput")
    assert m is not None and m.status is Status.UNCHANGED and m.message.count("not confirmed") == 1


def test_a_wide_limit_says_so_and_points_to_the_paired_gate_but_still_fails_gross_slowdowns() -> None:
    base = runs([1000.0, 1400.0, 800.0, 1200.0, 900.0, 1100.0, 950.0])  # a noisy runner: runs spread by ~18%
    unchanged = judge(measurement(950.0), measurement(1000.0), Tolerances(), runs=base).metric("throughput")
    assert unchanged is not None and unchanged.status is Status.UNCHANGED and unchanged.detection_limit > 0.10
    assert "wider than the 10% tolerance" in unchanged.message and "--tfperf-against" in unchanged.message
    # A slowdown beyond the limit that verdict stated fails (both runs below the bound).
    level = math.exp(sum(math.log(r.throughput_per_s) for r in base.runs) / len(base.runs))
    beyond = level * (1.0 - unchanged.detection_limit) * 0.95
    slow = judge(measurement(beyond), measurement(1000.0), Tolerances(), runs=base, confirmation=measurement(beyond))
    assert slow.status is Status.REGRESSED


def test_too_few_runs_judge_no_throughput_and_say_how_many() -> None:
    verdict = judge(measurement(100.0), measurement(1000.0), Tolerances())  # a version-1 baseline: one run
    m = verdict.metric("throughput")
    assert m is not None and m.status is Status.NOISY and math.isinf(m.detection_limit)
    assert "the baseline has 1 baseline run of this environment" in m.message
    assert "at least 3 runs" in m.message and not verdict.needs_confirmation
    # Recorded runs can supply what the baseline lacks.
    more = judge(measurement(100.0), measurement(1000.0), Tolerances(),
                 runs=runs([1000.0], [1000.0, 1010.0, 990.0, 1005.0]))
    assert more.metric("throughput").status is Status.REGRESSED and more.metric("throughput").history_runs == 4


def test_improvement_beyond_bound_and_tolerance_is_a_notice() -> None:
    base = runs([1000.0, 1020.0, 980.0, 1010.0, 990.0])
    verdict = judge(measurement(1500.0), measurement(1000.0), Tolerances(), runs=base)
    assert verdict.status is Status.IMPROVED and not verdict.failed


def test_memory_band_covers_the_spread_between_processes_and_must_be_confirmed() -> None:
    # Peaks that vary by ~10% from process to process, as a real Keras step's do.
    values = [26 * MIB, 29 * MIB, 27 * MIB, 28 * MIB, 26 * MIB]
    base = BaselineRuns(tuple(run(1000.0, added=v, i=i) for i, v in enumerate(values)))
    a_a = judge(measurement(1000.0, added=round(29.4 * MIB)), measurement(1000.0, added=26 * MIB), Tolerances(),
                runs=base)
    mem = a_a.metric("peak_tf_allocator[CPU:0]")
    assert mem is not None and mem.status is not Status.REGRESSED, mem.message
    assert "bound over 5 runs in separate processes" in mem.message
    big = judge(measurement(1000.0, added=60 * MIB), measurement(1000.0, added=26 * MIB), Tolerances(), runs=base)
    assert big.status is Status.REGRESSED and big.needs_confirmation
    gone = judge(measurement(1000.0, added=60 * MIB), measurement(1000.0, added=26 * MIB), Tolerances(), runs=base,
                 confirmation=measurement(1000.0, added=27 * MIB))
    assert gone.metric("peak_tf_allocator[CPU:0]").status is not Status.REGRESSED


def test_memory_floor_still_catches_ten_percent_of_a_steady_workload() -> None:
    base = BaselineRuns(tuple(run(1000.0, added=16 * MIB, i=i) for i in range(5)))
    verdict = judge(measurement(1000.0, added=round(17.6 * MIB)), measurement(1000.0, added=16 * MIB),
                    Tolerances(), runs=base, confirmation=measurement(1000.0, added=round(17.6 * MIB)))
    assert verdict.metric("peak_tf_allocator[CPU:0]").status is Status.REGRESSED


def _simulate(run_sd: float, slowdown: float, trials: int, seed: int) -> float:
    """Share of trials judged regressed by the shipped rule: the default number of baseline runs, a run, a
    fresh confirmation."""
    rng = random.Random(seed)
    hits = 0
    for _ in range(trials):
        # The baseline's runs and the calibration's in the same processes, floored as the session floors them.
        calibration = [1000.0 * math.exp(rng.gauss(0.0, run_sd)) for _ in range(DEFAULT_RUNS)]
        own = runs([1000.0 * math.exp(rng.gauss(0.0, run_sd)) for _ in range(DEFAULT_RUNS)])
        base_runs = BaselineRuns(own.runs, machine=stored_rule.machine_floor([], calibration))
        # A run and its confirmation share a slow or fast spell of the machine.
        rho = stored_rule.CONFIRMATION_CORRELATION
        shared = rng.gauss(0.0, run_sd * math.sqrt(rho))
        cur = [1000.0 * (1.0 - slowdown) * math.exp(shared + rng.gauss(0.0, run_sd * math.sqrt(1 - rho)))
               for _ in range(2)]
        first = judge(measurement(cur[0]), measurement(1000.0), Tolerances(), runs=base_runs)
        if first.needs_confirmation:
            final = judge(measurement(cur[0]), measurement(1000.0), Tolerances(), runs=base_runs,
                          confirmation=measurement(cur[1]))
            hits += final.metric("throughput").status is Status.REGRESSED
    return hits / trials


def test_simulated_quiet_gpu_machine_catches_ten_percent() -> None:
    # Six processes of a GPU step on an NVIDIA H200 had medians within 1.3% of each other: a standard
    # deviation of about 0.5% (the run printed 0.4%; ../shared/research/gpu-h200.md). A 10% slowdown
    # is caught at least 95% of the time. (At that spread the 5% decision threshold is 10 spreads out and
    # decides alone: this checks the catch, not the bound.)
    assert _simulate(0.005, 0.10, 2000, seed=1) >= 0.95


def test_simulated_false_alarms_stay_at_the_design_rate_where_the_bound_decides() -> None:
    # At a 3% spread the 5% decision threshold is under 2 spreads out, so the bound alone keeps unchanged code
    # green: the rule is built for 1e-4 per verdict (a run and its confirmation both below the bound), 2 in
    # 20,000 expected. With the bound set to zero this gives about 2%; at half its width, 7 in 20,000.
    assert _simulate(0.03, 0.0, 20000, seed=4) <= 2 / 20000

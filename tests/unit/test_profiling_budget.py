"""profiling.profile_budget sizes a profiled pass from its calibration: numbers in, a plan out (no clock, no
TensorFlow)."""

from __future__ import annotations

import pytest

from pytest_tfperf.profiling.profile_budget import (
    MARGIN, PassPlan, SideCost, plan_pass, settle_calls, window_deadline_s,
)

US = 1e-6


def total(plan: PassPlan, spent: float) -> float:
    return spent + plan.seconds_windows + plan.seconds_after


def test_plenty_of_time_keeps_the_callers_windows_and_iterations() -> None:
    costs = {"a": SideCost(0.002, 50), "b": SideCost(0.004, 50)}
    plan = plan_pass(10.0, 0.1, costs, 2 * US, ceilings={"a": 20, "b": 10}, max_windows=6, min_windows=5)
    assert plan.fits and plan.windows == 6 and plan.iterations == {"a": 20, "b": 10}
    assert plan.seconds_windows == pytest.approx(6 * (20 * 0.002 + 10 * 0.004))
    assert plan.seconds_after == pytest.approx(6 * 30 * 50 * 2 * US)


def test_many_small_ops_cut_the_iterations_in_proportion_so_the_stop_and_reading_fit() -> None:
    # an LSTM step as measured here: 6 ms profiled, 3,400 host events, 6 us each to stop and read under load
    costs = {"base": SideCost(0.006, 3400), "changed": SideCost(0.018, 3400), "again": SideCost(0.006, 3400)}
    ceilings = {"base": 16, "changed": 6, "again": 16}
    plan = plan_pass(6.0, 0.4, costs, 6 * US, ceilings=ceilings, max_windows=6, min_windows=5)
    assert plan.fits and plan.windows == 6
    assert all(1 <= plan.iterations[s] < ceilings[s] for s in ceilings)
    assert plan.iterations["base"] > plan.iterations["changed"]  # the sides keep their shares
    assert total(plan, 0.4) <= 6.0 * (1 - MARGIN)
    # the largest such plan: one more iteration a side would not fit
    bigger = plan_pass(6.0, 0.4, costs, 6 * US, ceilings={s: n + 1 for s, n in plan.iterations.items()},
                       max_windows=6, min_windows=6, margin=MARGIN)
    assert total(bigger, 0.4) > 6.0 * (1 - MARGIN) * 0.9


def test_windows_are_cut_only_after_iterations_reach_one() -> None:
    costs = {"a": SideCost(0.05, 1000), "b": SideCost(0.05, 1000)}
    # one iteration a side per window costs 0.1 s + 2 x 1000 x 10 us = 0.12 s; 0.75 of 1 s less 0.1 spent: 5 windows
    plan = plan_pass(1.0, 0.1, costs, 10 * US, ceilings={"a": 4, "b": 4}, max_windows=8, min_windows=4)
    assert plan.iterations == {"a": 1, "b": 1} and plan.windows == 5 and plan.fits


def test_a_budget_too_small_gives_the_smallest_pass_and_says_it_does_not_fit() -> None:
    costs = {"a": SideCost(0.5, 10000)}
    plan = plan_pass(1.0, 0.6, costs, 5 * US, ceilings={"a": 3}, max_windows=5, min_windows=5)
    assert plan.windows == 5 and plan.iterations == {"a": 1} and not plan.fits


def test_settle_calls_are_paid_for_and_scale_with_the_iterations() -> None:
    assert settle_calls(10, 0.5) == 5 and settle_calls(1, 0.5) == 1 and settle_calls(10, 0.0) == 0
    costs = {"pipe": SideCost(0.01, 100, settle_ratio=0.5)}
    plan = plan_pass(2.0, 0.0, costs, 1 * US, ceilings={"pipe": 40}, max_windows=6, min_windows=5)
    assert plan.fits and plan.settle == {"pipe": settle_calls(plan.iterations["pipe"], 0.5)}
    calls = plan.iterations["pipe"] + plan.settle["pipe"]
    assert plan.seconds_windows == pytest.approx(6 * calls * 0.01)
    assert total(plan, 0.0) <= 2.0 * (1 - MARGIN)


def test_the_windows_deadline_leaves_the_planned_stop_and_reading() -> None:
    plan = PassPlan(windows=5, iterations={"a": 3}, settle={"a": 0}, seconds_windows=1.0, seconds_after=0.8,
                    fits=True)
    assert plan.seconds_round == pytest.approx(0.2)
    assert window_deadline_s(4.0, plan, margin=0.2) == pytest.approx(4.0 * 0.9 - 0.8)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="same sides"):
        plan_pass(1.0, 0.0, {"a": SideCost(0.1, 1)}, US, ceilings={"b": 1}, max_windows=5, min_windows=5)
    with pytest.raises(ValueError, match="min_windows"):
        plan_pass(1.0, 0.0, {"a": SideCost(0.1, 1)}, US, ceilings={"a": 1}, max_windows=4, min_windows=5)

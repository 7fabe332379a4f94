"""The change an explanation says was measured is the one its verdict states: a paired verdict's estimate over
the rounds' ratios, in seconds per iteration at the baseline's median, not the difference of the two sides'
medians, which can read far from it."""

from __future__ import annotations

import pytest

from pytest_tfperf.explain.orchestrate import verdict_change_s
from pytest_tfperf.gates.paired import judge_paired
from pytest_tfperf.gates.verdict import Tolerances
from pytest_tfperf.model import Measurement, Timings
from pytest_tfperf.session.outcome import Outcome

TEST_ID = "tests/test_fit.py::test_fit"


def measurement(round_ms: list[float], items: float = 32.0) -> Measurement:
    """10 iterations a round, each round at its own speed."""
    samples = tuple(int(ms * 1_000_000) for ms in round_ms for _ in range(10))
    return Measurement(test_id=TEST_ID, mode="call", timings=Timings(samples, (10,) * len(round_ms), items, 1),
                       traces_steady=0)


def test_a_paired_verdicts_change_is_the_one_explained_not_the_medians_difference() -> None:
    # Two speeds: the current side is 40% slower in 11 of 20 rounds. Every iteration's median sits on the slow
    # speed (+40%), the paired estimate over the rounds' ratios about halfway.
    base = measurement([10.0] * 20)
    current = measurement([14.0, 10.0] * 9 + [14.0, 14.0])
    verdict = judge_paired(current, base, Tolerances())
    metric = verdict.metric("throughput")
    assert metric is not None and metric.relative_change is not None and metric.baseline_value is not None
    explained = verdict_change_s(Outcome(measurement=current, verdict=verdict), base)
    # What the verdict's printed rates say (the baseline's, and the baseline's times the change), per iteration
    # of 32 items.
    rates = (metric.baseline_value, metric.baseline_value * (1.0 + metric.relative_change))
    assert f"-> {rates[1]:,.1f} items/s" in metric.message
    printed = 32.0 / rates[1] - 32.0 / rates[0]
    assert explained == pytest.approx(printed, rel=1e-9)
    medians = current.median_s - base.median_s
    assert medians == pytest.approx(0.004, rel=1e-6)
    assert abs(explained - medians) > 0.001  # the medians' difference is not what was explained


def test_without_a_throughput_change_or_with_other_item_counts_the_medians_decide() -> None:
    base, current = measurement([10.0] * 20), measurement([12.0] * 20)
    assert verdict_change_s(Outcome(measurement=current), base) == pytest.approx(0.002)
    other_items = measurement([12.0] * 20, items=16.0)
    verdict = judge_paired(other_items, base, Tolerances())
    assert verdict_change_s(Outcome(measurement=other_items, verdict=verdict), base) == pytest.approx(0.002)

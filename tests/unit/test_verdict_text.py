"""How slowdowns and detection limits are worded: what a user reads in every verdict and summary."""

from __future__ import annotations

import math

import pytest

from pytest_tfperf.reports.report import format_limit
from pytest_tfperf.gates.verdict import slowdown_text, slowdowns_caught


@pytest.mark.parametrize(("lost", "text"), [
    (0.38, "38%"), (0.0, "0%"), (0.5, "2.0x"), (2 / 3, "3.0x"), (0.99, "100.0x"), (0.9949, "196.1x"),
])
def test_a_slowdown_reads_as_a_share_up_to_a_half_then_as_a_factor(lost: float, text: str) -> None:
    assert slowdown_text(lost) == text


@pytest.mark.parametrize("lost", [0.995, 0.999, 0.99999])
def test_a_slowdown_beyond_200x_says_at_least_200x_not_a_figure_it_did_not_measure(lost: float) -> None:
    assert slowdown_text(lost) == "at least 200x"
    assert format_limit(lost) == "at least 200x"
    assert slowdowns_caught(lost) == "slowdowns of at least 200x"


@pytest.mark.parametrize("lost", [math.inf, math.nan])
def test_no_limit_at_all_reads_none(lost: float) -> None:
    assert slowdown_text(lost) == "none"


def test_a_detection_limit_is_worded_as_slowdowns_of_that_size_or_more() -> None:
    assert slowdowns_caught(0.38) == "slowdowns of 38% or more"
    assert slowdowns_caught(2 / 3) == "slowdowns of 3.0x or more"

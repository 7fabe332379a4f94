from __future__ import annotations

import argparse

import pytest

from pytest_tfperf.config import MarkerOptions, fraction, positive_float, positive_int


def test_fraction_accepts_percent_and_fraction() -> None:
    assert fraction("10%") == pytest.approx(0.10)
    assert fraction("0.05") == pytest.approx(0.05)


@pytest.mark.parametrize("text", ["0", "100%", "-5%", "abc", "nan", "1.5"])
def test_fraction_rejects_nonsense(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        fraction(text)


@pytest.mark.parametrize(("fn", "text"), [(positive_float, "0"), (positive_float, "x"), (positive_int, "0"),
                                          (positive_int, "1.5"), (positive_float, "inf")])
def test_numbers_reject_nonsense(fn, text: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(argparse.ArgumentTypeError):
        fn(text)


def test_marker_rejects_unknown_arguments_and_lists_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown @pytest.mark.tfperf argument\(s\) budget; known: .*budget_s"):
        MarkerOptions.from_kwargs({"budget": 3}, "test_x")


@pytest.mark.parametrize("kwargs", [{"rounds": 0}, {"rounds": 2.5}, {"tolerance": 2}, {"max_traces": -1},
                                    {"gate": "yes"}, {"budget_s": -1}, {"min_throughput": float("nan")}])
def test_marker_rejects_bad_values(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="test_x: @pytest.mark.tfperf"):
        MarkerOptions.from_kwargs(kwargs, "test_x")


def test_marker_keeps_valid_values() -> None:
    opts = MarkerOptions.from_kwargs({"budget_s": 1.5, "max_traces": 0, "check_finite": True}, "t")
    assert opts.budget_s == 1.5 and opts.max_traces == 0 and opts.check_finite


def test_a_retiring_marker_argument_still_works_and_says_it_goes() -> None:
    with pytest.warns(DeprecationWarning, match=r"test_x: @pytest.mark.tfperf\(stall_multiple=...\) goes in the next "
                                                r"release: .*use stall_timeout_s"):
        options = MarkerOptions.from_kwargs({"stall_multiple": 50}, "test_x")
    assert options.stall_multiple == 50

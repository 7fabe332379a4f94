"""The catalog's effects as summary lines, read from their stored (JSON) form."""

from __future__ import annotations

from pytest_tfperf.reports.effect_lines import effect_lines, effect_row

THROUGHPUT = {"scenario": "input_pipeline", "anti": "sequential", "fix": "parallel", "metric": "throughput",
              "value": 2.84, "spread": [2.1, 3.3], "min_effect": 1.3, "gated": True, "passed": True}
PEAK = {"scenario": "oversized_batch", "anti": "one_big", "fix": "accumulated", "metric": "tf_allocator_peak",
        "value": 1.1, "spread": None, "min_effect": 2.0, "gated": True, "passed": False}
TRACES = {"scenario": "retracing", "anti": "python_scalar", "fix": "tensor", "metric": "traces", "value": 1.0,
          "min_effect": 0.5, "gated": False, "passed": True}
NAN = {"scenario": "numerical_instability", "anti": "high_lr", "fix": "clipped",
       "metric": "first_non_finite_iteration", "value": "inf", "min_effect": 20, "gated": True, "passed": False}


def test_one_line_per_comparison_with_effect_spread_margin_and_result() -> None:
    header, *rows, footer = effect_lines([THROUGHPUT, PEAK, TRACES, NAN])
    assert header.split() == ["scenario", "fix", "vs", "anti", "effect", "value", "rounds", "gate", "result"]
    assert rows[0].split()[:2] == ["input_pipeline", "parallel"]
    for cell in ("fix/anti throughput", "2.84x", "2.1x..3.3x", ">= 1.3x", "pass"):
        assert cell in rows[0]
    assert "anti/fix memory peak" in rows[1] and rows[1].endswith("FAIL")
    assert "(>= 0.5, not gated)" in rows[2] and rows[2].endswith("reported")
    assert "never" in rows[3] and "<= 20, fix never" in rows[3]
    assert footer.startswith("1 of 3 gated comparison(s) beat their margin; 2 did not")


def test_missing_fields_are_tolerated() -> None:
    row = effect_row({"scenario": "x"})
    assert row.value is None and row.outcome == "not measured" and row.margin_text() == "-"
    assert effect_lines([]) == []


def test_a_failure_the_catalog_did_not_judge_says_why() -> None:
    busy = {**THROUGHPUT, "value": 0.9, "passed": False, "not_judged": "busy machine"}
    _, row, footer = effect_lines([busy])
    assert row.endswith("not judged: busy machine")
    assert footer.startswith("0 of 0 gated comparison(s)")

"""The stored gate's confirmation with the fresh process faked: a regression it cannot confirm fails nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_tfperf.reports import report
from pytest_tfperf.config import MarkerOptions, SessionConfig
from pytest_tfperf.model import BudgetViolation, Direction, Environment, Measurement, Timings
from pytest_tfperf.against.partner_tree import PartnerError
from pytest_tfperf.reports.report_model import build_report
from pytest_tfperf.storage.results_json import results_from_dict, results_to_dict, write_results
from pytest_tfperf.session.outcome import Outcome, outcome_properties
from pytest_tfperf.session.session import TfPerfSession
from pytest_tfperf.reports.shards import load_shards
from pytest_tfperf.gates.verdict import MetricVerdict, Status, Verdict

TEST_ID = "tests/test_pipeline.py::test_step"
ENV = Environment(hard=(("cpu", "x"),), soft=())


def measurement(test_id: str = TEST_ID) -> Measurement:
    samples = tuple(1_000_000 for _ in range(100))
    return Measurement(test_id=test_id, mode="call", timings=Timings(samples, (20,) * 5, 1.0, 1), traces_steady=0,
                       environment_id=ENV.fingerprint)


def regressed(test_id: str = TEST_ID) -> Verdict:
    throughput = MetricVerdict(metric="throughput", unit="items/s", direction=Direction.HIGHER_IS_BETTER,
                               baseline_value=1000.0, current_value=500.0, relative_change=-0.5, ci_low=-0.55,
                               ci_high=-0.45, status=Status.REGRESSED, minimum_detectable_change=0.2,
                               message="throughput: 1,000.0 items/s -> 500.0 items/s: slower than the baseline",
                               confidence=0.99)
    return Verdict(test_id=test_id, metrics=(throughput,), status=Status.REGRESSED, needs_remeasure=False,
                   needs_confirmation=True)


def outcome(test_id: str = TEST_ID, **kwargs: Any) -> Outcome:
    return Outcome(measurement=measurement(test_id), verdict=regressed(test_id), baseline="stored baseline (7 runs)",
                   stored=(measurement(test_id), None), item_id=TEST_ID, **kwargs)


def session(fresh: Any) -> TfPerfSession:
    s = TfPerfSession(SessionConfig(measure=True), "/nonexistent")
    s.stored_gate._measure_in_fresh_process = fresh  # type: ignore[method-assign]
    s._environment = ENV
    return s


def confirm(s: TfPerfSession, *outcomes: Outcome) -> None:
    s.stored_gate.confirm(TEST_ID, list(outcomes), None, s._tolerances(MarkerOptions()))  # type: ignore[arg-type]


def refuse(node_id: str, settings: Any) -> list[Measurement]:
    raise PartnerError("the partner session in /repo could not start: the other session ended")


def test_a_regression_the_fresh_process_cannot_measure_is_unconfirmed_and_not_a_failure() -> None:
    o = outcome()
    assert o.failed  # before: one process's regression
    confirm(session(refuse), o)
    assert str(o.verdict.status) == "unconfirmed" and not o.verdict.failed
    assert o.verdict.unconfirmed_reason == ("the fresh process could not measure it: the partner session in /repo "
                                            "could not start: the other session ended")
    assert o.verdict.metric("throughput").status is Status.REGRESSED  # what this process measured, kept
    assert not o.failed and o.label == "unconfirmed" and o.regressed_metrics == []
    assert o.notices == [
        f"{TEST_ID}: unconfirmed, not failed: throughput slower than baseline by 50% (99% CI -55.0% to -45.0%) in "
        "this process, and a regression fails a test only once a fresh process shows it too, but the fresh process "
        "could not measure it: the partner session in /repo could not start: the other session ended; run the test "
        "again to decide"]


def test_a_test_the_fresh_process_did_not_measure_is_unconfirmed_with_what_it_did_measure() -> None:
    other = measurement(TEST_ID + "[other]")
    o = outcome()
    confirm(session(lambda node_id, settings: [other]), o)
    assert str(o.verdict.status) == "unconfirmed" and not o.failed
    assert o.verdict.unconfirmed_reason == f"the fresh process did not measure it (it measured {TEST_ID}[other])"
    nothing = outcome()
    confirm(session(lambda node_id, settings: []), nothing)
    assert nothing.verdict.unconfirmed_reason == "the fresh process did not measure it (it measured nothing)"


def test_a_budget_still_fails_a_test_whose_regression_is_unconfirmed() -> None:
    o = outcome(violations=(BudgetViolation(metric="throughput", limit=1e9, measured=500.0, unit="items/s"),))
    confirm(session(refuse), o)
    assert str(o.verdict.status) == "unconfirmed"
    assert o.failed and o.label == "OVER LIMIT"


def test_only_a_regression_can_be_unconfirmed() -> None:
    unchanged = Verdict(test_id=TEST_ID, metrics=(), status=Status.UNCHANGED, needs_remeasure=False)
    with pytest.raises(ValueError, match="only a regression can be unconfirmed, this verdict is unchanged"):
        unchanged.unconfirmed("why")


def test_the_reports_say_unconfirmed_with_the_reason(tmp_path: Path) -> None:
    o = outcome()
    s = session(refuse)
    confirm(s, o)
    s.outcomes.append(o)
    props = dict(outcome_properties(o))
    assert props["tfperf_verdict"] == "unconfirmed"
    assert props["tfperf_unconfirmed_reason"].startswith("the fresh process could not measure it:")
    assert any(line.endswith(" unconfirmed") for line in s.summary_lines())  # the table's verdict column

    document = results_to_dict(ENV, [o])
    written = document["tests"][TEST_ID]["verdict"]
    assert written["status"] == "unconfirmed" and written["unconfirmed_reason"] == o.verdict.unconfirmed_reason
    assert results_from_dict(document).verdict(TEST_ID)["status"] == "unconfirmed"  # readers take it as written

    markdown = report.markdown_summary([report.Row(o.measurement, o.label)], [o.verdict])
    assert markdown[-1] == f"- `{TEST_ID}`: {o.verdict.unconfirmed_reason}"
    assert "| unconfirmed |" in markdown[4]

    path = write_results(tmp_path / "r.json", results_to_dict(ENV, [o]))
    (view,) = build_report(load_shards([path])).tests
    assert view.status == "unconfirmed" and not view.failed
    assert view.messages[0] == f"unconfirmed, not failed: {o.verdict.unconfirmed_reason}"


def test_a_multi_line_reason_is_one_markdown_line() -> None:
    o = outcome()
    o.verdict = o.verdict.unconfirmed("it could not start; its output ended with:\n    line one\n    line two")
    markdown = report.markdown_summary([report.Row(o.measurement, o.label)], [o.verdict])
    assert markdown[-1] == f"- `{TEST_ID}`: it could not start; its output ended with:; line one; line two"


def test_new_traces_where_the_baseline_had_none_are_unconfirmed_like_the_rest_when_no_fresh_process_measures() -> None:
    o = outcome()
    exact = MetricVerdict(metric="traces_steady", unit="traces", direction=Direction.LOWER_IS_BETTER,
                          baseline_value=0.0, current_value=3.0, relative_change=None, ci_low=None, ci_high=None,
                          status=Status.REGRESSED, minimum_detectable_change=None,
                          message="traces_steady: 0 -> 3 tf.function traces after warm-up: more retracing")
    o.verdict = Verdict(test_id=TEST_ID, metrics=o.verdict.metrics + (exact,), status=Status.REGRESSED,
                        needs_remeasure=False, needs_confirmation=True)
    confirm(session(refuse), o)
    # A retrace that shows only after some number of iterations is one process's word until a second counts it.
    assert str(o.verdict.status) == "unconfirmed" and not o.failed
    assert len(o.notices) == 1 and o.notices[0].startswith(f"{TEST_ID}: unconfirmed, not failed: ")

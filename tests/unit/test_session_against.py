"""The session's --tfperf-against flow with the partner faked: re-measure of a borderline verdict, pooled."""

from __future__ import annotations

from typing import Any

from pytest_tfperf.config import MarkerOptions, SessionConfig
from pytest_tfperf.model import Measurement, Timings
from pytest_tfperf.session.session import TfPerfSession

TEST_ID = "tests/test_pipeline.py::test_step"


def measurement(factors: list[float]) -> Measurement:
    """20 iterations a round at 1 ms times each round's factor."""
    samples = tuple(int(1_000_000 * f) for f in factors for _ in range(20))
    return Measurement(test_id=TEST_ID, mode="call", timings=Timings(samples, (20,) * len(factors), 1.0, 1),
                       traces_steady=0)


BORDERLINE = measurement([1.0, 1.1] * 10)  # ours: every other round 10% slower: about -5%, interval astride
THEIRS = measurement([1.0] * 20)


class FakePartner:
    def __init__(self) -> None:
        self.restarts = 0

    def restart(self) -> None:
        self.restarts += 1


def session() -> TfPerfSession:
    s = TfPerfSession(SessionConfig(measure=True, against="origin/main"), "/nonexistent")
    s._partner = FakePartner()
    return s


def test_a_borderline_verdict_is_measured_again_beside_a_fresh_partner_and_pooled() -> None:
    s = session()
    calls: list[dict[str, Any]] = []

    def beside(test_id: str, settings: Any, measure_once: Any, *, fallback: str) -> Any:
        calls.append({"test_id": test_id, "fallback": fallback})
        return {"": measurement([1.2] * 20)}, THEIRS, None  # the second look: clearly 17% slower

    s._measure_beside_partner = beside  # type: ignore[method-assign]
    measured = {"": BORDERLINE}
    first = s._evaluate_against(BORDERLINE, THEIRS, MarkerOptions())
    assert first.verdict.needs_remeasure and str(first.verdict.status) != "regressed"

    outcome = s._judge_against(TEST_ID, measured, "", THEIRS, MarkerOptions(), None, None)  # type: ignore[arg-type]
    assert calls == [{"test_id": TEST_ID, "fallback": "the first measurement decided"}]
    assert s._partner.restarts == 1  # type: ignore[attr-defined]
    assert len(measured[""].timings.round_sizes) == 40  # both measurements pooled
    assert str(outcome.verdict.status) == "regressed" and outcome.partner and outcome.paired_with == "origin/main"
    assert outcome.notices == [
        f"{TEST_ID}: re-measured beside a fresh partner process in origin/main because the first verdict was "
        "borderline; judged on both measurements pooled (40 rounds a side)"]


def test_a_throughput_regression_fails_only_once_confirmed_beside_a_fresh_partner() -> None:
    s = session()
    slow = measurement([1.07] * 20)  # 6.5% slower in every round: past the 5% threshold beyond doubt
    assert str(s._evaluate_against(slow, THEIRS, MarkerOptions()).verdict.status) == "regressed"

    # The second partner process runs as fast as ours: the first pair was an offset between two processes.
    s._measure_beside_partner = lambda *a, **k: ({"": measurement([1.0] * 20)}, THEIRS, None)  # type: ignore[method-assign]
    measured = {"": slow}
    outcome = s._judge_against(TEST_ID, measured, "", THEIRS, MarkerOptions(), None, None)  # type: ignore[arg-type]
    assert s._partner.restarts == 1  # type: ignore[attr-defined]
    assert str(outcome.verdict.status) != "regressed"
    assert "because the first verdict was a throughput regression" in outcome.notices[0]


def test_when_the_re_measure_is_lost_the_first_verdict_stands_and_says_so() -> None:
    s = session()
    note = f"{TEST_ID}: not measured beside origin/main: the partner stopped answering; the first measurement decided"
    s._measure_beside_partner = lambda *a, **k: (None, None, note)  # type: ignore[method-assign]
    measured = {"": BORDERLINE}
    outcome = s._judge_against(TEST_ID, measured, "", THEIRS, MarkerOptions(), None, None)  # type: ignore[arg-type]
    assert measured[""] is BORDERLINE
    assert outcome.notices == [f"{note} (a re-measure because the first verdict was borderline)"]


def test_a_clear_verdict_is_not_measured_again() -> None:
    s = session()
    s._measure_beside_partner = lambda *a, **k: (_ for _ in ()).throw(AssertionError("measured again"))  # type: ignore[method-assign]
    clear = measurement([1.0] * 20)
    outcome = s._judge_against(TEST_ID, {"": clear}, "", THEIRS, MarkerOptions(), None, None)  # type: ignore[arg-type]
    assert str(outcome.verdict.status) == "unchanged" and not outcome.notices
    assert s._partner.restarts == 0  # type: ignore[attr-defined]

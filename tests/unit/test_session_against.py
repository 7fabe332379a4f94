"""The session's --tfperf-against plan with the partners faked: a second look when borderline, pooled; a
regression confirmed by two fresh pairs of processes, one after the other, before it fails."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from pytest_tfperf.config import PARTNER_ENV, MarkerOptions, SessionConfig
from pytest_tfperf.measuring.workload import RunSettings
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


def session(**config: Any) -> TfPerfSession:
    s = TfPerfSession(SessionConfig(measure=True, against="origin/main", **config), "/nonexistent")
    s._partner = FakePartner()
    return s


SETTINGS = RunSettings()


def test_a_borderline_verdict_is_looked_at_again_beside_the_same_partner_and_pooled() -> None:
    s = session()
    calls: list[dict[str, Any]] = []

    def beside(test_id: str, settings: Any, measure_once: Any, *, fallback: str, tolerances: Any = None) -> Any:
        calls.append({"test_id": test_id, "fallback": fallback})
        return {"": measurement([1.0] * 20)}, THEIRS, None  # the second look: unchanged

    s._measure_beside_partner = beside  # type: ignore[method-assign]
    s._confirm_against = lambda *a: (_ for _ in ()).throw(AssertionError("confirmed"))  # type: ignore[method-assign]
    measured = {"": BORDERLINE}
    first = s._evaluate_against(BORDERLINE, THEIRS, MarkerOptions())
    assert first.verdict.needs_remeasure and str(first.verdict.status) != "regressed"

    outcome = s._judge_against(TEST_ID, measured, "", THEIRS, MarkerOptions(), SETTINGS, None)  # type: ignore[arg-type]
    assert calls == [{"test_id": TEST_ID, "fallback": "the first measurement decided"}]
    assert s._partner.restarts == 0  # type: ignore[attr-defined]  # the same partner process: a look, not a restart
    assert len(measured[""].timings.round_sizes) == 40  # both measurements pooled
    assert str(outcome.verdict.status) != "regressed" and outcome.partner and outcome.paired_with == "origin/main"
    assert outcome.notices == [
        f"{TEST_ID}: measured a second time beside the same partner because the first verdict was borderline; "
        "judged on both measurements pooled (40 rounds a side)"]


def test_a_regression_seen_at_the_second_look_is_confirmed_with_as_many_rounds() -> None:
    s = session()
    s._measure_beside_partner = lambda *a, **k: ({"": measurement([1.2] * 20)}, THEIRS, None)  # type: ignore[method-assign]
    asked: list[int] = []

    def confirm(test_id: str, settings: RunSettings) -> Any:
        asked.append(settings.rounds)
        return (measurement([1.2] * 40), measurement([1.0] * 40)), None

    s._confirm_against = confirm  # type: ignore[method-assign]
    outcome = s._judge_against(TEST_ID, {"": BORDERLINE}, "", THEIRS, MarkerOptions(), SETTINGS, None)  # type: ignore[arg-type]
    assert asked == [40, 40]  # two fresh pairs, each with as many rounds as the pooled looks
    assert str(outcome.verdict.status) == "regressed"
    assert outcome.notices[-3].startswith(f"{TEST_ID}: confirmed in two fresh processes, one of each version")
    assert outcome.notices[-2].startswith(f"{TEST_ID}: confirmed again in another two fresh processes, one of each "
                                          "version, taking turns: throughput:")
    assert outcome.notices[-1] == (f"{TEST_ID}: the three pairs of processes together: -14.8% (the mean of their "
                                   "estimates), beyond the 5.0% decision threshold")


def test_a_throughput_regression_that_two_fresh_processes_do_not_see_passes_and_says_so() -> None:
    s = session()
    slow = measurement([1.07] * 20)  # 6.5% slower in every round: past the 5% threshold beyond doubt
    assert str(s._evaluate_against(slow, THEIRS, MarkerOptions()).verdict.status) == "regressed"

    # The fresh pair runs alike: the first pair was an offset between two processes.
    fresh_ours = measurement([1.0] * 20)
    s._confirm_against = lambda *a: ((fresh_ours, THEIRS), None)  # type: ignore[method-assign]
    s._measure_beside_partner = lambda *a, **k: (_ for _ in ()).throw(AssertionError("looked again"))  # type: ignore[method-assign]
    measured = {"": slow}
    outcome = s._judge_against(TEST_ID, measured, "", THEIRS, MarkerOptions(), SETTINGS, None)  # type: ignore[arg-type]
    assert str(outcome.verdict.status) == "unchanged"
    assert measured[""] is fresh_ours  # the fresh pair's figures are the ones reported
    assert "not confirmed: this process read throughput:" in outcome.notices[0]
    assert "two fresh processes, one of each version, taking turns, did not" in outcome.notices[0]


def test_a_confirmed_regression_fails_and_names_the_confirmation() -> None:
    s = session()
    slow = measurement([1.07] * 20)
    s._confirm_against = lambda *a: ((measurement([1.08] * 20), THEIRS), None)  # type: ignore[method-assign]
    outcome = s._judge_against(TEST_ID, {"": slow}, "", THEIRS, MarkerOptions(), SETTINGS, None)  # type: ignore[arg-type]
    assert str(outcome.verdict.status) == "regressed"
    assert "confirmed in two fresh processes" in outcome.notices[0] and "slower than the baseline" in outcome.notices[0]
    assert "confirmed again in another two fresh processes" in outcome.notices[1]


def test_a_regression_the_second_fresh_pair_does_not_see_passes_and_reports_that_pair() -> None:
    """Three independent pairs must err alike for a false alarm: two that agree are not yet a failure."""
    s = session()
    cleared = measurement([1.0] * 20)
    pairs = iter([(measurement([1.08] * 20), THEIRS), (cleared, THEIRS)])
    fresh: list[bool] = []

    def confirm(test_id: str, settings: RunSettings, is_fresh: bool = True) -> Any:
        fresh.append(is_fresh)
        return next(pairs), None

    s._confirm_against = confirm  # type: ignore[method-assign]
    measured = {"": measurement([1.07] * 20)}
    outcome = s._judge_against(TEST_ID, measured, "", THEIRS, MarkerOptions(), SETTINGS, None)  # type: ignore[arg-type]
    assert fresh == [True, True]  # two pairs, each started afresh
    assert str(outcome.verdict.status) == "unchanged" and measured[""] is cleared
    assert outcome.notices[0].startswith(f"{TEST_ID}: confirmed in two fresh processes")
    assert outcome.notices[1].startswith(f"{TEST_ID}: not confirmed: this process read throughput:")
    assert "and one fresh pair confirmed it; another two fresh processes, one of each version, taking turns, did " \
           "not read it slower (throughput:" in outcome.notices[1]


def test_when_the_second_confirmation_is_lost_the_first_two_pairs_decide_and_say_so() -> None:
    s = session()
    answers = iter([((measurement([1.08] * 20), THEIRS), None), (None, "the partner stopped answering")])
    s._confirm_against = lambda *a: next(answers)  # type: ignore[method-assign]
    outcome = s._judge_against(TEST_ID, {"": measurement([1.07] * 20)}, "", THEIRS, MarkerOptions(), SETTINGS,  # type: ignore[arg-type]
                               None)
    assert str(outcome.verdict.status) == "regressed"
    assert outcome.notices[-2] == (f"{TEST_ID}: the regression could not be measured again in another two fresh "
                                   "processes (the partner stopped answering); the first two pairs decided")
    assert outcome.notices[-1].startswith(f"{TEST_ID}: the two pairs of processes together: -7.")


def test_pairs_that_each_read_it_slower_but_together_within_the_threshold_pass_and_say_so() -> None:
    """How much slower is decided on the pairs together: one pair's offset moves its own estimate."""
    s = session()
    pairs = iter([(measurement([1.03] * 20), THEIRS), (measurement([1.04] * 20), THEIRS)])
    s._confirm_against = lambda *a: (next(pairs), None)  # type: ignore[method-assign]
    outcome = s._judge_against(TEST_ID, {"": measurement([1.07] * 20)}, "", THEIRS, MarkerOptions(), SETTINGS,  # type: ignore[arg-type]
                               None)
    assert str(outcome.verdict.status) == "unchanged"
    metric = outcome.verdict.metric("throughput")
    assert metric is not None and str(metric.status) == "unchanged" and metric.ci_low is None
    assert math.isclose(metric.relative_change, ((1 / 1.07) * (1 / 1.03) * (1 / 1.04)) ** (1 / 3) - 1)
    assert "(-4.4%, the mean of 3 pairs of processes): each pair read it slower (-6.5%, -2.9%, -3.8%)" in metric.message
    assert outcome.notices[0].startswith(f"{TEST_ID}: confirmed in two fresh processes")  # -2.9%: slower, surely
    assert outcome.notices[-1] == (f"{TEST_ID}: not failed: every pair of processes read it slower, but by 4.4% "
                                   "together, within the 5.0% decision threshold")


def test_a_fresh_pair_within_the_threshold_still_confirms_when_the_pairs_together_are_beyond_it() -> None:
    s = session()
    pairs = iter([(measurement([1.04] * 20), THEIRS), (measurement([1.09] * 20), THEIRS)])
    s._confirm_against = lambda *a: (next(pairs), None)  # type: ignore[method-assign]
    outcome = s._judge_against(TEST_ID, {"": measurement([1.07] * 20)}, "", THEIRS, MarkerOptions(), SETTINGS,  # type: ignore[arg-type]
                               None)
    assert str(outcome.verdict.status) == "regressed"
    assert outcome.notices[-1] == (f"{TEST_ID}: the three pairs of processes together: -6.2% (the mean of their "
                                   "estimates), beyond the 5.0% decision threshold")


def spell(slow: float) -> Measurement:
    """A gross slowdown whose 20 rounds come in two long spells, 30% apart (the lag-1 correlation is capped):
    worth about two independent pairs, so these rounds alone cannot tell, however large the slowdown."""
    return measurement([slow * math.exp(0.3 * (1 if i < 10 else -1) * (1.0 + 0.05 * i)) for i in range(20)])


def test_a_fresh_pair_that_cannot_tell_measures_as_many_rounds_again_before_it_clears_a_regression() -> None:
    s = session()
    gross = spell(40.0)
    fresh = s._evaluate_against(gross, THEIRS, MarkerOptions())
    assert str(fresh.verdict.status) != "regressed" and fresh.verdict.needs_remeasure  # the CI case: it cannot tell
    calls: list[tuple[int, bool]] = []

    def confirm(test_id: str, settings: RunSettings, fresh: bool = True) -> Any:
        calls.append((settings.rounds, fresh))
        return (gross, THEIRS) if fresh else (measurement([40.0] * 20), THEIRS), None

    s._confirm_against = confirm  # type: ignore[method-assign]
    outcome = s._judge_against(TEST_ID, {"": measurement([40.0] * 20)}, "", THEIRS, MarkerOptions(), SETTINGS,  # type: ignore[arg-type]
                               None)
    # the second look: the same fresh pair, as many rounds; then the second fresh pair, likewise
    assert calls == [(20, True), (20, False), (20, True), (20, False)]
    assert str(outcome.verdict.status) == "regressed"
    assert outcome.notices[-3].startswith(f"{TEST_ID}: confirmed in two fresh processes, one of each version, taking "
                                          "turns (measured twice, 40 rounds a side pooled, because its first "
                                          "verdict was borderline): throughput:")


def test_a_fresh_pair_that_cannot_tell_twice_does_not_confirm_and_says_it_looked_twice() -> None:
    s = session()
    noisy = measurement([1.0, 1.6, 0.7, 1.5, 0.6] * 4)  # wild rounds: borderline at any count here
    s._confirm_against = lambda *a: ((noisy, THEIRS), None)  # type: ignore[method-assign]
    outcome = s._judge_against(TEST_ID, {"": measurement([1.07] * 20)}, "", THEIRS, MarkerOptions(), SETTINGS,  # type: ignore[arg-type]
                               None)
    assert str(outcome.verdict.status) != "regressed"
    assert ("taking turns (measured twice, 40 rounds a side pooled, because its first verdict was borderline), "
            "did not read it slower") in outcome.notices[0]


def test_a_fresh_pair_that_cannot_be_asked_again_leaves_its_first_verdict() -> None:
    s = session()
    noisy = measurement([1.0, 1.6, 0.7, 1.5, 0.6] * 4)
    answers = iter([((noisy, THEIRS), None), (None, "the partner stopped answering")])
    s._confirm_against = lambda *a: next(answers)  # type: ignore[method-assign]
    outcome = s._judge_against(TEST_ID, {"": measurement([1.07] * 20)}, "", THEIRS, MarkerOptions(), SETTINGS,  # type: ignore[arg-type]
                               None)
    assert str(outcome.verdict.status) != "regressed"
    assert "taking turns, did not read it slower (throughput:" in outcome.notices[0]


def test_when_the_confirmation_is_lost_the_first_verdict_stands_and_says_so() -> None:
    s = session()
    s._confirm_against = lambda *a: (None, "the partner stopped answering")  # type: ignore[method-assign]
    outcome = s._judge_against(TEST_ID, {"": measurement([1.07] * 20)}, "", THEIRS, MarkerOptions(), SETTINGS,  # type: ignore[arg-type]
                               None)
    assert str(outcome.verdict.status) == "regressed"
    assert outcome.notices == [f"{TEST_ID}: the regression could not be measured again in two fresh processes (the "
                               "partner stopped answering); the first measurement decided"]


def test_when_the_second_look_is_lost_the_first_verdict_stands_and_says_so() -> None:
    s = session()
    note = f"{TEST_ID}: not measured beside origin/main: the partner stopped answering; the first measurement decided"
    s._measure_beside_partner = lambda *a, **k: (None, None, note)  # type: ignore[method-assign]
    measured = {"": BORDERLINE}
    outcome = s._judge_against(TEST_ID, measured, "", THEIRS, MarkerOptions(), SETTINGS, None)  # type: ignore[arg-type]
    assert measured[""] is BORDERLINE
    assert outcome.notices == [f"{note} (a second look because the first verdict was borderline)"]


def test_a_clear_verdict_is_not_measured_again() -> None:
    s = session()
    s._measure_beside_partner = lambda *a, **k: (_ for _ in ()).throw(AssertionError("measured again"))  # type: ignore[method-assign]
    s._confirm_against = lambda *a: (_ for _ in ()).throw(AssertionError("confirmed"))  # type: ignore[method-assign]
    clear = measurement([1.0] * 20)
    outcome = s._judge_against(TEST_ID, {"": clear}, "", THEIRS, MarkerOptions(), SETTINGS, None)  # type: ignore[arg-type]
    assert str(outcome.verdict.status) == "unchanged" and not outcome.notices
    assert s._partner.restarts == 0  # type: ignore[attr-defined]


def test_beside_the_other_version_the_stated_limit_counts_every_pair() -> None:
    """A failure there needs the first pair and two fresh pairs, each with its own offset: the limit it states
    counts them all; an in-test pair states it for one look."""
    s = session()
    ours = measurement([1.0 + 0.04 * ((i * 7) % 5 - 2) for i in range(20)])
    against = s._evaluate_against(ours, THEIRS, MarkerOptions()).verdict.metric("throughput")
    in_test = s._evaluate_paired(ours, THEIRS, "main", MarkerOptions()).verdict.metric("throughput")
    assert against is not None and in_test is not None
    assert against.minimum_detectable_change > in_test.minimum_detectable_change


class FakeRun:
    def __init__(self, log: list[str], side: str, result: Measurement) -> None:
        self.log, self.side, self.result = log, side, result

    def await_ready(self) -> None:
        return None

    def partner_round(self, index: int) -> None:
        self.log.append(f"{self.side}{index}")

    def start_round(self, index: int) -> None:
        self.log.append(f"start {self.side}{index}")

    def end_round(self, index: int) -> None:
        self.log.append(f"end {self.side}{index}")

    def finish(self, completed: bool) -> Measurement:
        return self.result


class FakeProcess:
    """A partner process: counts restarts, answers ``begin`` with a run that logs its rounds."""

    duet_cpu = None

    def __init__(self, log: list[str], side: str, result: Measurement) -> None:
        self.log, self.side, self.result, self.restarts = log, side, result, 0
        self.started = False

    def restart(self) -> None:
        self.restarts += 1
        self.started = False

    def prestart(self) -> None:
        if not self.started:
            self.log.append(f"spawn {self.side}")
        self.started = True

    def begin(self, test_id: str, rounds: int, budget_s: float, **options: Any) -> FakeRun:
        if not self.started:
            self.log.append(f"spawn {self.side}")
        self.started = True
        self.log.append(f"begin {self.side}")
        return FakeRun(self.log, self.side, self.result)


def test_the_second_look_of_a_fresh_pair_is_beside_the_same_two_processes() -> None:
    from pytest_tfperf.against import plan

    s = session()
    log: list[str] = []
    s._partner = FakeProcess(log, "B", THEIRS)  # type: ignore[assignment]
    s._own_partner = FakeProcess(log, "A", measurement([1.2] * 20))
    settings = RunSettings(rounds=2)
    assert plan.confirm(s, TEST_ID, settings) == ((s._own_partner.result, THEIRS), None)
    assert (s._partner.restarts, s._own_partner.restarts) == (1, 1)  # type: ignore[attr-defined]  # fresh
    # both processes started before either is waited for (their imports overlap), then rounds in turns, ABBA
    assert log == ["spawn A", "spawn B", "begin B", "begin A", "A0", "B0", "B1", "A1"]
    log.clear()
    assert plan.confirm(s, TEST_ID, settings, fresh=False)[1] is None
    assert (s._partner.restarts, s._own_partner.restarts) == (1, 1)  # type: ignore[attr-defined]  # the same pair
    assert log == ["begin B", "begin A", "A0", "B0", "B1", "A1"]


def test_in_the_duet_design_a_fresh_pair_measures_each_round_at_once() -> None:
    from pytest_tfperf.against import plan

    s = session()
    log: list[str] = []
    s._partner = FakeProcess(log, "B", THEIRS)  # type: ignore[assignment]
    s._partner.duet_cpu = 1  # type: ignore[attr-defined]
    s._own_partner = FakeProcess(log, "A", THEIRS)
    assert plan.confirm(s, TEST_ID, RunSettings(rounds=2))[1] is None
    assert log == ["spawn A", "spawn B", "begin B", "begin A", "start A0", "start B0", "end A0", "end B0",
                   "start A1", "start B1", "end A1", "end B1"]


def test_a_second_look_needs_a_fresh_pair_to_look_at() -> None:
    from pytest_tfperf.against import plan

    s = session()
    assert plan.confirm(s, TEST_ID, RunSettings(rounds=2), fresh=False) == (None, "no fresh pair to look at again")
    assert s._partner.restarts == 0  # type: ignore[attr-defined]


FASTER = measurement([0.8] * 20)  # 25% faster in every round: "improved" beyond doubt


def test_an_improvement_is_said_only_when_two_fresh_pairs_read_one_too_and_together_beyond_the_tolerance() -> None:
    s = session()
    assert str(s._evaluate_against(FASTER, THEIRS, MarkerOptions()).verdict.status) == "improved"
    asked: list[int] = []

    def confirm(test_id: str, settings: RunSettings) -> Any:
        asked.append(settings.rounds)
        return (measurement([0.82] * 20), THEIRS), None

    s._confirm_against = confirm  # type: ignore[method-assign]
    outcome = s._judge_against(TEST_ID, {"": FASTER}, "", THEIRS, MarkerOptions(), SETTINGS, None)  # type: ignore[arg-type]
    assert str(outcome.verdict.status) == "improved" and len(asked) == 2
    assert outcome.notices[-3].startswith(f"{TEST_ID}: improvement confirmed in two fresh processes, one of each "
                                          "version, taking turns: throughput:")
    assert outcome.notices[-2].startswith(f"{TEST_ID}: improvement confirmed again in another two fresh processes")
    assert outcome.notices[-1].startswith(f"{TEST_ID}: the three pairs of processes together: +23.")
    assert outcome.notices[-1].endswith("beyond the 10.0% tolerance")


def test_an_improvement_the_second_fresh_pair_does_not_see_is_not_said() -> None:
    """One fresh pair agreeing is one more pair's word: unchanged code read "improved" 4 times in 1,014 so."""
    s = session()
    second = measurement([1.0] * 20)
    pairs = iter([(measurement([0.82] * 20), THEIRS), (second, THEIRS)])
    s._confirm_against = lambda *a: (next(pairs), None)  # type: ignore[method-assign]
    measured = {"": FASTER}
    outcome = s._judge_against(TEST_ID, measured, "", THEIRS, MarkerOptions(), SETTINGS, None)  # type: ignore[arg-type]
    assert str(outcome.verdict.status) == "unchanged" and measured[""] is second
    assert outcome.notices[-1].startswith(f"{TEST_ID}: improvement not confirmed: this process read throughput:")
    assert "and one fresh pair confirmed it; another two fresh processes" in outcome.notices[-1]


def test_an_improvement_every_pair_reads_but_by_less_than_the_tolerance_together_is_not_said() -> None:
    s = session()
    pairs = iter([(measurement([0.97] * 20), THEIRS), (measurement([0.97] * 20), THEIRS)])  # +3% each, surely
    s._confirm_against = lambda *a: (next(pairs), None)  # type: ignore[method-assign]
    outcome = s._judge_against(TEST_ID, {"": FASTER}, "", THEIRS, MarkerOptions(), SETTINGS, None)  # type: ignore[arg-type]
    assert str(outcome.verdict.status) == "unchanged"
    assert outcome.notices[-1].startswith(f"{TEST_ID}: not said to be faster: every pair of processes read it faster")
    throughput = next(m for m in outcome.verdict.metrics if m.metric == "throughput")
    assert "each pair read it faster" in throughput.message and "within the 10.0% tolerance" in throughput.message


def test_an_improvement_the_fresh_pair_does_not_see_reports_the_fresh_pair() -> None:
    s = session()
    fresh = measurement([1.0] * 20)
    s._confirm_against = lambda *a: ((fresh, THEIRS), None)  # type: ignore[method-assign]
    measured = {"": FASTER}
    outcome = s._judge_against(TEST_ID, measured, "", THEIRS, MarkerOptions(), SETTINGS, None)  # type: ignore[arg-type]
    assert str(outcome.verdict.status) == "unchanged" and measured[""] is fresh
    assert outcome.notices[0].startswith(f"{TEST_ID}: improvement not confirmed: this process read throughput:")


def test_a_regression_read_by_the_pair_that_did_not_confirm_an_improvement_is_itself_confirmed() -> None:
    s = session()
    pairs = iter([(measurement([1.2] * 20), THEIRS), (measurement([1.0] * 20), THEIRS)])
    s._confirm_against = lambda *a: (next(pairs), None)  # type: ignore[method-assign]
    outcome = s._judge_against(TEST_ID, {"": FASTER}, "", THEIRS, MarkerOptions(), SETTINGS, None)  # type: ignore[arg-type]
    # The improvement's fresh pair read a regression; a second fresh pair did not: one pair's word, not a failure.
    assert str(outcome.verdict.status) == "unchanged"
    assert outcome.notices[0].startswith(f"{TEST_ID}: improvement not confirmed")
    assert "not confirmed: this process read throughput" in outcome.notices[1]


class HoldingRun:
    """A partner's run that holds its test after the result, as under explanations: profiles name the process."""

    def __init__(self, process: HoldingProcess, test_id: str) -> None:
        self.process, self.test_id, self.generation = process, test_id, process.generation

    def partner_round(self, index: int) -> None:
        self.process.log.append(f"{self.process.side}{self.generation} round {index}")

    def finish(self, completed: bool) -> Measurement:
        self.process.held = self
        return THEIRS

    def profile(self, *, side: str, **options: Any) -> tuple[dict[str, Any] | None, str | None]:
        assert self.process.held is self and self.generation == self.process.generation
        if self.process.broken_profile:
            return None, "it crashed"
        self.process.log.append(f"{self.process.side}{self.generation} profiled as {side}")
        return {"process": f"{self.process.side}{self.generation}"}, None


class HoldingProcess:
    def __init__(self, log: list[str], side: str) -> None:
        self.log, self.side, self.generation = log, side, 0
        self.held: HoldingRun | None = None
        self.broken_profile = False

    def restart(self) -> None:
        self.generation += 1
        self.held = None
        self.started = False

    def prestart(self) -> None:
        if not getattr(self, "started", True):
            self.log.append(f"{self.side}{self.generation} start")
        self.started = True

    def begin(self, test_id: str, rounds: int, budget_s: float, **options: Any) -> HoldingRun:
        assert options.get("explain") is True  # held for the profile
        self.prestart()
        self.log.append(f"{self.side}{self.generation} begin")
        return HoldingRun(self, test_id)

    def release_held(self) -> None:
        self.held = None

    def await_started(self) -> None:
        self.log.append(f"{self.side}{self.generation} started")

    @contextmanager
    def frozen(self) -> Iterator[None]:
        self.log.append(f"{self.side}{self.generation} stopped")
        yield
        self.log.append(f"{self.side}{self.generation} resumed")


def test_a_red_verdict_is_profiled_in_more_pairs_none_sharing_a_process_with_another() -> None:
    """The explanation's own pair is this process and the partner process that profiled beside it (B1 here);
    the last confirmation's process of this tree (A1) still holds the test and is not used: every later pair is
    two fresh processes (A2 and B2, then A3 and B3, A4 and B4, A5 and B5: the default five pairs), both started
    and past their import before either sets up the test."""
    from pytest_tfperf.against import plan

    s = session()
    log: list[str] = []
    s._partner = base = HoldingProcess(log, "B")  # type: ignore[assignment]
    s._own_partner = own = HoldingProcess(log, "A")  # type: ignore[assignment]
    base.restart(), own.restart()  # the last fresh pair: A1 and B1, both holding the test
    base.held, own.held = HoldingRun(base, TEST_ID), HoldingRun(own, TEST_ID)
    pairs, notes = plan.profile_fresh_pairs(s, TEST_ID, RunSettings(rounds=20), iterations=5, timeout_s=60.0)
    assert notes == []
    assert [(b["process"], c["process"]) for b, c in pairs] == [("B2", "A2"), ("B3", "A3"), ("B4", "A4"), ("B5", "A5")]
    assert "A1 begin" not in log and "B2 round 0" in log and "B2 round 1" in log  # warmed up, 2 rounds
    # each pair's two fresh processes are started together and past their import before either sets up the test
    for n in (2, 3):
        first, second = (f"A{n}", f"B{n}") if n % 2 == 0 else (f"B{n}", f"A{n}")
        assert log.index(f"A{n} start") < log.index(f"B{n} start") < log.index(f"A{n} started") \
            < log.index(f"B{n} started") < log.index(f"{first} begin") < log.index(f"{second} begin")
    assert own.held is None  # released: the process of this tree waits for nothing more


def test_each_side_of_a_fresh_pair_is_profiled_with_the_other_process_stopped_and_the_order_alternates() -> None:
    """The process not being profiled would refill its tf.data buffers on the cores the other's pass times: each
    pass runs with the other side's process stopped (``Partner.frozen``), and that process resumes after it. The
    process set up first is stopped through the other's set-up, rounds and pass, and profiled second; which
    version goes first alternates, so that this order's effect on a pass falls on both versions alike."""
    from pytest_tfperf.against import plan

    s, log = holding_session(explain_pairs=5)
    pairs, notes = plan.profile_fresh_pairs(s, TEST_ID, RunSettings(rounds=20), iterations=5, timeout_s=60.0)
    assert notes == [] and len(pairs) == 4
    assert [(b["process"], c["process"]) for b, c in pairs] == [("B1", "A1"), ("B2", "A2"), ("B3", "A3"), ("B4", "A4")]
    firsts = []
    for n in (2, 3, 4, 5):
        ours, theirs = f"A{n - 1}", f"B{n - 1}"  # the fakes count generations from the first restart
        first, second = (ours, theirs) if log.index(f"{ours} begin") < log.index(f"{theirs} begin") else (theirs, ours)
        firsts.append(first[0])
        order = [f"{first} round 1", f"{first} stopped", f"{second} begin", f"{second} round 1",
                 f"{second} profiled as", f"{first} resumed", f"{second} stopped", f"{first} profiled as",
                 f"{second} resumed"]
        at = [next(i for i, line in enumerate(log) if line.startswith(step)) for step in order]
        assert at == sorted(at), (first, second, log)
        assert f"{ours} profiled as this-{n}" in log and f"{theirs} profiled as partner-{n}" in log
    assert firsts == ["A", "B", "A", "B"]


def test_a_pair_that_cannot_be_profiled_ends_the_search_and_says_across_how_many_pairs() -> None:
    from pytest_tfperf.against import plan

    s = session()
    log: list[str] = []
    s._partner = base = HoldingProcess(log, "B")  # type: ignore[assignment]
    s._own_partner = HoldingProcess(log, "A")  # type: ignore[assignment]
    base.broken_profile = True
    pairs, notes = plan.profile_fresh_pairs(s, TEST_ID, RunSettings(rounds=20), iterations=5, timeout_s=60.0)
    assert pairs == [] and notes == ["pair 2 of processes could not be profiled (it crashed); the groups were "
                                     "tested across 1"]


def holding_session(**config: Any) -> tuple[TfPerfSession, list[str]]:
    s = session(**config)
    log: list[str] = []
    s._partner = HoldingProcess(log, "B")  # type: ignore[assignment]
    s._own_partner = HoldingProcess(log, "A")  # type: ignore[assignment]
    return s, log


def test_the_number_of_pairs_asked_for_is_the_number_profiled() -> None:
    """--tfperf-explain-pairs N: the explanation's own pair and N - 1 more; 1 asks for no more pairs at all."""
    from pytest_tfperf.against import plan

    for pairs_asked in (2, 4):
        s, log = holding_session(explain_pairs=pairs_asked)
        more = s._more_pairs(RunSettings(rounds=20))
        assert more is not None
        pairs, notes = more(TEST_ID, 5, 60.0)
        assert notes == [] and len(pairs) == pairs_asked - 1
        assert len({p for pair in pairs for p in (pair[0]["process"], pair[1]["process"])}) == 2 * (pairs_asked - 1)
    s, log = holding_session(explain_pairs=1)
    assert s._more_pairs(RunSettings(rounds=20)) is None and log == []
    assert plan.profile_fresh_pairs(s, TEST_ID, RunSettings(rounds=20), iterations=5, timeout_s=60.0) == ([], [])


def test_the_partner_is_started_before_collection_only_where_this_session_measures_against_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    class Starting(FakePartner):
        started = 0

        def prestart(self) -> None:
            self.started += 1

    s = session()
    s._partner = Starting()
    s.start_partner_early()
    assert s._partner.started == 1  # type: ignore[attr-defined]
    partner_side = session()
    partner_side._partner = Starting()
    with monkeypatch.context() as m:
        m.setenv(PARTNER_ENV, "3,4")  # this session is another's partner
        partner_side.start_partner_early()
    assert partner_side._partner.started == 0  # type: ignore[attr-defined]
    plain = TfPerfSession(SessionConfig(measure=True), "/nonexistent")
    plain.start_partner_early()
    assert plain._partner is None

"""The bisect search and its wording, with fake judges and a fake clock: no git, no TensorFlow, no timing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_tfperf.bisect.search import (
    BisectResult,
    Commit,
    ExplainedTest,
    Judgement,
    PairedChange,
    ParentExplanation,
    Step,
    bisect,
    next_probe,
    parent_of,
    planned_steps,
)
from pytest_tfperf.model import Environment
from pytest_tfperf.bisect.report_text import NOTHING, plan_line, result_dict, result_lines, step_line
from pytest_tfperf.bisect.steps import (
    StepRunner,
    _explained_test,
    judgement_from_results,
    rerun_command,
    why_not_collected,
)
from pytest_tfperf.storage.results_json import ResultsDocument

COMMITS = [Commit(sha=f"{i:02d}" * 20, subject=f"commit {i + 1}", author_date=f"2026-11-{i % 28 + 1:02d}T10:00:00+00:00")
           for i in range(31)]


def change(test_id: str, slowdown: float, spread: float = 0.02) -> PairedChange:
    """A paired verdict of ``test_id`` at a throughput change of -slowdown, interval +- spread."""
    status = "regressed" if slowdown > 0.05 else "unchanged"
    return PairedChange(test_id=test_id, status=status, change=-slowdown, ci_low=-slowdown - spread,
                      ci_high=-slowdown + spread, message=f"throughput: {-slowdown:+.1%}")


def planted(*plants: tuple[int, float], skip: frozenset[int] = frozenset(),
            calls: list[int] | None = None) -> Callable[[Commit], Judgement]:
    """A judge for COMMITS: slowdowns planted from the given positions on (they add up), some commits skipped."""
    def judge(commit: Commit) -> Judgement:
        position = COMMITS.index(commit)
        if calls is not None:
            calls.append(position)
        if position in skip:
            return Judgement("skip", reason="the selected tests do not exist or do not import here")
        slowdown = sum(s for at, s in plants if position >= at)
        test = change("t.py::test_x", slowdown)
        return Judgement("bad" if test.status == "regressed" else "good", tests=(test,))
    return judge


class FakeClock:
    def __init__(self, step_s: float = 10.0) -> None:
        self.now, self.step_s = 0.0, step_s

    def __call__(self) -> float:
        self.now += self.step_s  # each step reads it before and after judging: one step_s apart
        return self.now


@pytest.mark.parametrize("at", range(31))
def test_a_single_slowdown_is_found_wherever_it_was_planted_within_the_planned_steps(at: int) -> None:
    result = bisect(COMMITS, planted((at, 0.2)), clock=FakeClock())
    assert result.outcome == "found" and result.first_bad == COMMITS[at]
    assert len(result.steps) <= result.planned_steps == 7  # BAD, 5 halvings of 31 commits, the parent again
    if at > 0:  # the first bad commit's parent is judged twice; GOOD itself never is
        assert [s.position for s in result.steps if s.again] == [at - 1]
        assert [s.judgement.kind for s in result.steps if s.position == at - 1] == ["good", "good"]
    assert result.verdict is not None and result.verdict.tests[0].change == pytest.approx(-0.2)


def test_bad_is_judged_first_and_nothing_regressed_means_nothing_to_bisect() -> None:
    calls: list[int] = []
    result = bisect(COMMITS, planted(calls=calls), clock=FakeClock())
    assert calls == [30]  # one step: BAD against GOOD, nothing else measured
    assert result.outcome == "nothing" and result.first_bad is None
    assert result_lines(result, "v1.0", "main")[0].startswith(NOTHING)
    assert NOTHING == "BAD is not slower than GOOD: nothing to bisect"


def test_a_skipped_commit_is_stepped_around_as_git_bisect_skip_does() -> None:
    calls: list[int] = []
    result = bisect(COMMITS, planted((20, 0.2), skip=frozenset({14, 13}), calls=calls), clock=FakeClock())
    assert result.outcome == "found" and result.first_bad == COMMITS[20]
    # The middle is skipped, then its nearest untried neighbour (the lower on a tie), then the other one.
    assert calls[:4] == [30, 14, 13, 15]
    skipped = [s for s in result.steps if s.judgement.kind == "skip"]
    assert [s.commit for s in skipped] == [COMMITS[14], COMMITS[13]]
    assert "skipped: the selected tests do not exist or do not import here" in "\n".join(result_lines(result, "g", "b"))


def test_when_every_commit_before_the_bad_one_is_skipped_the_candidates_are_named() -> None:
    result = bisect(COMMITS, planted((12, 0.2), skip=frozenset({10, 11})), clock=FakeClock())
    assert result.outcome == "ambiguous" and result.first_bad is None
    assert result.candidates == tuple(COMMITS[10:13])
    assert result_lines(result, "g", "b")[0] == (
        f"the first bad commit is one of {COMMITS[10].short}, {COMMITS[11].short}, {COMMITS[12].short}: "
        "the commits before the last of them were skipped and could not be judged")


def test_a_bad_commit_that_cannot_be_judged_stops_the_search_with_the_reason() -> None:
    result = bisect(COMMITS, planted((5, 0.2), skip=frozenset({30})), clock=FakeClock())
    assert result.outcome == "untestable" and len(result.steps) == 1
    assert result_lines(result, "v1", "main")[0] == (
        "cannot bisect: BAD (main) could not be judged against GOOD (v1): "
        "the selected tests do not exist or do not import here")


def test_two_regressions_report_the_first_crossing_and_name_the_second_where_seen() -> None:
    # 10% from commit 8 on, a further 20% from commit 24 on: BAD is 30% slower than GOOD.
    result = bisect(COMMITS, planted((8, 0.10), (24, 0.20)), clock=FakeClock())
    assert result.outcome == "found" and result.first_bad == COMMITS[8]
    assert len(result.further) == 1
    further = result.further[0]
    assert further.change == pytest.approx(-0.30) and further.first_change == pytest.approx(-0.10)
    # The second slowdown lies after the last step consistent with the first, at or before the first beyond it.
    after, at = COMMITS.index(further.after), COMMITS.index(further.at)
    assert 8 <= after < 24 <= at
    text = "\n".join(result_lines(result, "g", "b"))
    assert f"so a further slowdown lies after {further.after.short} and at or before {further.at.short}" in text


def erring(plant_at: int, wrong_at: set[int]) -> Callable[[Commit], Judgement]:
    """A 20% slowdown from ``plant_at`` on, judged "good" the first time each commit of ``wrong_at`` is judged."""
    right = planted((plant_at, 0.2))
    fooled: set[int] = set()

    def judge(commit: Commit) -> Judgement:
        position = COMMITS.index(commit)
        if position in wrong_at and position not in fooled:
            fooled.add(position)
            return Judgement("good", tests=(change("t.py::test_x", 0.03),))
        return right(commit)
    return judge


@pytest.mark.parametrize("wrong_at", [{14}, {14, 22}, {12}, {12, 13}])
def test_a_slow_commit_once_judged_good_is_caught_by_judging_the_parent_again(wrong_at: set[int]) -> None:
    # Planted at 12: a false "good" at 14 (a halving; then at 22 too), or at 12 itself sends the search past it;
    # the parent of the commit it first reports is judged again, found slow, and the search goes on below it.
    result = bisect(COMMITS, erring(12, wrong_at), clock=FakeClock())
    assert result.outcome == "found" and result.first_bad == COMMITS[12]
    assert result.steps[-1].again and result.steps[-1].position == 11 and result.steps[-1].judgement.kind == "good"
    rechecked_bad = [s for s in result.steps if s.again and s.judgement.kind == "bad"]
    assert rechecked_bad, "the wrong verdict was never caught"


def weak_alarm(plant_at: int, alarm_at: int, *, repeat: bool = False) -> Callable[[Commit], Judgement]:
    """A 20% slowdown from ``plant_at`` on; ``alarm_at`` (before it) judged a weak regression the first time."""
    right = planted((plant_at, 0.2))
    seen: list[int] = []

    def judge(commit: Commit) -> Judgement:
        position = COMMITS.index(commit)
        if position == alarm_at and (repeat or position not in seen):
            seen.append(position)
            weak = PairedChange(test_id="t.py::test_x", status="regressed", change=-0.059, ci_low=-0.08,
                                ci_high=-0.04, threshold=-0.05)
            return Judgement("bad", tests=(weak,))
        return right(commit)
    return judge


def test_a_weak_first_bad_verdict_is_judged_again_and_a_false_alarm_dropped() -> None:
    # Planted at 30 (BAD itself); commit 22 once measured -5.9%, its interval (-8% to -4%) reaching above -5%.
    result = bisect(COMMITS, weak_alarm(30, 22), clock=FakeClock())
    assert result.outcome == "found" and result.first_bad == COMMITS[30]
    assert [(s.position, s.judgement.kind) for s in result.steps if s.again][0] == (22, "good")


def test_a_weak_first_bad_verdict_that_holds_is_kept() -> None:
    result = bisect(COMMITS, weak_alarm(30, 22, repeat=True), clock=FakeClock())
    assert result.outcome == "found" and result.first_bad == COMMITS[22]
    assert [(s.position, s.judgement.kind) for s in result.steps if s.again] == [(22, "bad"), (21, "good")]


def test_a_strong_first_bad_verdict_is_not_judged_again() -> None:
    result = bisect(COMMITS, planted((12, 0.2)), clock=FakeClock())
    assert [s.position for s in result.steps if s.again] == [11]  # only the parent


def test_a_parent_that_cannot_be_judged_again_is_said() -> None:
    calls: list[int] = []
    base = planted((12, 0.2), calls=calls)

    def judge(commit: Commit) -> Judgement:
        if COMMITS.index(commit) == 11 and calls.count(11) == 1:
            calls.append(11)
            return Judgement("skip", reason="too noisy to decide: ...")
        return base(commit)
    result = bisect(COMMITS, judge, clock=FakeClock())
    assert result.outcome == "found" and result.first_bad == COMMITS[12]
    assert result.notes == (f"the first bad commit's parent {COMMITS[11].short} was judged good, then could not be "
                            "judged a second time (too noisy to decide: ...)",)
    assert result.notes[0] in result_lines(result, "g", "b")


def test_a_later_step_within_the_first_commits_interval_is_not_called_a_second_regression() -> None:
    result = bisect(COMMITS, planted((8, 0.20)), clock=FakeClock())
    assert result.further == ()


def test_the_plan_is_stated_up_front_and_costed_from_the_first_step() -> None:
    assert planned_steps(1) == 1 and planned_steps(2) == 3 and planned_steps(31) == 7 and planned_steps(32) == 7
    assert planned_steps(33) == 8
    assert plan_line("v1", "main", 31, 7) == (
        "bisecting 31 first-parent commits after v1 up to main: about 7 paired steps (BAD against GOOD first, the "
        "first bad commit's parent judged twice), each one paired measurement of the selected tests beside GOOD")
    assert plan_line("v1", "main", 31, 7, 40.0) == (
        "bisecting 31 first-parent commits after v1 up to main: about 7 paired steps of about 40 s "
        "(the first took 40 s): about 4.7 min in all")


def test_each_step_is_reported_as_it_ends_and_tabled_with_the_count_and_the_time() -> None:
    seen: list[str] = []
    result = bisect(COMMITS, planted((3, 0.2)), on_step=lambda s: seen.append(step_line(s)), clock=FakeClock(20.0))
    assert len(seen) == len(result.steps)
    assert seen[0] == (f"step 1: {COMMITS[30].short} 'commit 31' ({COMMITS[30].author_date}): BAD (regressed), "
                       "throughput -20.0% (99% bounds -22.0% to -18.0%) against GOOD [20 s]")
    lines = result_lines(result, "g", "b")
    assert lines[:3] == [f"first bad commit: {COMMITS[3].sha}", "  commit 4", f"  author date {COMMITS[3].author_date}"]
    assert lines[3] == ("  t.py::test_x: throughput -20.0% (99% bounds -22.0% to -18.0%) against GOOD, paired verdict "
                        "REGRESSED: throughput: -20.0%")
    table = [ln for ln in lines if ln.startswith("| ")]
    assert len(table) == 1 + len(result.steps)
    assert table[1] == f"| 1 | {COMMITS[30].short} | commit 31 | BAD (regressed) | -20.0% (99% bounds -22.0% to -18.0%) | 20 s |"
    assert table[-1].startswith(f"| {len(result.steps)} | {COMMITS[2].short} | commit 3 | good, judged again | ")
    assert lines[-1] == f"{len(result.steps)} paired steps (planned about 7) over 31 commits in " \
                        f"{result.elapsed_s / 60:.1f} min"


def test_the_json_says_what_the_terminal_says() -> None:
    result = bisect(COMMITS, planted((8, 0.10), (24, 0.20)), clock=FakeClock())
    doc = json.loads(json.dumps(result_dict(result, "v1", "main", good_sha="aa", bad_sha="bb",
                                            selection=("tests/perf",))))
    assert doc["schema"] == "pytest-tfperf/bisect" and doc["outcome"] == "found"
    assert doc["first_bad"] == {"sha": COMMITS[8].sha, "subject": "commit 9", "author_date": COMMITS[8].author_date}
    assert doc["message"] == f"first bad commit: {COMMITS[8].sha}"
    assert doc["verdict"]["verdict"] == "bad"
    assert doc["verdict"]["tests"][0]["throughput_change"] == pytest.approx(-0.10)
    assert len(doc["steps"]) == len(result.steps) and doc["steps"][0]["commit"] == COMMITS[30].sha
    assert {"step", "commit", "subject", "author_date", "verdict", "elapsed_s", "tests"} <= set(doc["steps"][0])
    assert doc["further"][0]["at_or_before"] == result.further[0].at.sha
    assert doc["planned_steps"] == 7 and doc["commits"] == 31 and doc["elapsed_s"] > 0


GOOD = Commit(sha="ff" * 20, subject="release 1", author_date="2026-10-01T10:00:00+00:00")


def test_the_explained_step_is_in_the_plan_unless_skipped() -> None:
    assert plan_line("v1", "main", 31, 7, explain=True) == (
        "bisecting 31 first-parent commits after v1 up to main: about 7 paired steps, then one explained step (BAD "
        "against GOOD first, the first bad commit's parent judged twice), each one paired measurement of the selected "
        "tests beside GOOD; the explained step measures the first bad commit beside its parent under "
        "--tfperf-explain, the regressed tests only (--no-explain skips it)")
    assert plan_line("v1", "main", 31, 7, 40.0, explain=True) == (
        "bisecting 31 first-parent commits after v1 up to main: about 7 paired steps of about 40 s, then one "
        "explained step (the first took 40 s): about 5.3 min in all")


def test_the_first_bad_commits_parent_is_the_commit_before_it_or_good() -> None:
    found = bisect(COMMITS, planted((3, 0.2)), clock=FakeClock())
    assert parent_of(found, COMMITS, GOOD) == COMMITS[2]
    assert parent_of(bisect(COMMITS, planted((0, 0.2)), clock=FakeClock()), COMMITS, GOOD) == GOOD
    assert parent_of(bisect(COMMITS, planted(), clock=FakeClock()), COMMITS, GOOD) is None  # nothing to bisect
    ambiguous = bisect(COMMITS, planted((5, 0.2), skip=frozenset({3, 4})), clock=FakeClock())
    assert ambiguous.outcome == "ambiguous" and parent_of(ambiguous, COMMITS, GOOD) is None


EXPLAINED = ParentExplanation(
    parent=COMMITS[2], elapsed_s=30.0, rerun="git checkout 0303030303 && pytest ... t.py::test_x",
    tests=(ExplainedTest("t.py::test_x", ("where the time went: +0.60 ms/iteration measured",
                                          "  planted (MatMul family) appeared +0.58 ms ±0.05 ms"),
                         {"causes": [{"key": "layer:planted"}]}),))


def test_the_explanation_is_printed_under_the_first_bad_commit_and_its_time_shown_apart() -> None:
    result = bisect(COMMITS, planted((3, 0.2)), clock=FakeClock(20.0))
    lines = result_lines(result, "g", "b", EXPLAINED)
    assert lines[4:9] == [
        f"  explained against its parent {COMMITS[2].short} ('commit 3'), one session with --tfperf-explain:",
        "    t.py::test_x:",
        "      where the time went: +0.60 ms/iteration measured",
        "        planted (MatMul family) appeared +0.58 ms ±0.05 ms",
        "    (the raw profiles went with the worktrees; to keep them: git checkout 0303030303 && pytest ... "
        "t.py::test_x)"]
    assert lines[9] == ""  # then the table
    search = result.elapsed_s
    assert lines[-1] == (f"{len(result.steps)} paired steps (planned about 7) over 31 commits, then one explained "
                         f"step, in {(search + 30) / 60:.1f} min (search {search / 60:.1f} min, explained step 30 s)")
    doc = json.loads(json.dumps(result_dict(result, "g", "b", explanation=EXPLAINED)))
    assert doc["version"] == 2
    assert doc["explanation"] == {
        "against_parent": {"sha": COMMITS[2].sha, "subject": "commit 3", "author_date": COMMITS[2].author_date},
        "tests": [{"test_id": "t.py::test_x", "lines": list(EXPLAINED.tests[0].lines),
                   "explanation": {"causes": [{"key": "layer:planted"}]}}],
        "reason": "", "rerun": EXPLAINED.rerun, "elapsed_s": 30.0}
    assert doc["elapsed_s"] == pytest.approx(search + 30) and doc["search_elapsed_s"] == pytest.approx(search)


def test_no_explanation_is_one_line_and_the_result_stands() -> None:
    result = bisect(COMMITS, planted((3, 0.2)), clock=FakeClock(20.0))
    failed = ParentExplanation(parent=GOOD, elapsed_s=2.0, reason="the explained session ran past its limit of 300 s "
                                                                  "and was stopped")
    lines = result_lines(result, "g", "b", failed)
    assert lines[:4] == result_lines(result, "g", "b")[:4]
    assert lines[4] == (f"  no explanation against its parent {GOOD.short}: the explained session ran past its "
                        "limit of 300 s and was stopped")
    assert lines[5] == ""
    doc = result_dict(result, "g", "b", explanation=failed)
    assert doc["outcome"] == "found" and doc["explanation"]["reason"].startswith("the explained session ran past")
    assert result_dict(result, "g", "b")["explanation"] is None  # --no-explain


RAW = "  raw profiles: tensorboard --logdir /tmp/tfperf-bisect-x/explain-03/.tfperf/p/partner (baseline), ..."


def test_an_explained_test_is_read_from_the_explained_sessions_results() -> None:
    attribution = {"lines": ["where the time went: +1.1 ms/iteration measured", "  planted (MatMul family) "
                             "appeared +1.0 ms ±0.1 ms", RAW], "causes": [{"key": "layer:planted"}],
                   "base_logdir": "/tmp/tfperf-bisect-x/explain-03/.tfperf/p/partner", "memory": {"logdir": "/x"}}
    results = ResultsDocument(environment=Environment(hard=(("cpu_model", "x"),)), measurements=(),
                              verdicts={"a": verdict("regressed", -0.5), "b": verdict("unchanged", -0.03),
                                        "c": verdict("regressed", -0.5)},
                              compared_with={"a": BESIDE, "b": BESIDE, "c": BESIDE},
                              explanations={"a": attribution,
                                            "c": {"lines": ["no explanation: another profiler session is running"],
                                                  "reason": "another profiler session is running"}})
    a = _explained_test(results, "a")
    # The raw profiles' lines and folders are gone with the worktree; the causes stay.
    assert a.lines == ("where the time went: +1.1 ms/iteration measured", "  planted (MatMul family) appeared "
                                                                          "+1.0 ms ±0.1 ms")
    assert a.detail == {"causes": [{"key": "layer:planted"}], "base_logdir": None, "memory": {"logdir": None}}
    assert _explained_test(results, "b").lines == (
        "no explanation: not slower than its parent beyond the tolerance (throughput -3.0%), verdict unchanged: "
        "the slowdown against GOOD may have come in smaller steps before it",)
    c = _explained_test(results, "c")
    assert c.lines == ("no explanation: another profiler session is running",) and c.detail is None
    assert _explained_test(results, "d").lines == ("no explanation: not measured beside the parent",)


def test_the_rerun_command_carries_the_tfperf_options_and_names_the_tests() -> None:
    assert rerun_command(COMMITS[3], ["t.py::test_x[a b]"], ["-k", "x", "tests/", "--tfperf-budget=1",
                                                             "--tfperf-json=o.json", "--tfperf-tolerance", "20%"]) == (
        f"git checkout {COMMITS[3].short} && pytest --tfperf --tfperf-explain --tfperf-against=HEAD~1 "
        "--tfperf-budget=1 't.py::test_x[a b]'")


def test_next_probe_prefers_the_middle_then_its_nearest_untried_neighbour() -> None:
    assert next_probe(-1, 30, set()) == 14
    assert next_probe(-1, 30, {14}) == 13
    assert next_probe(-1, 30, {14, 13}) == 15
    assert next_probe(3, 4, set()) is None
    assert next_probe(3, 6, {4, 5}) is None


def test_an_empty_range_is_refused() -> None:
    with pytest.raises(ValueError, match="nothing to bisect"):
        bisect([], planted())


def test_the_result_is_frozen() -> None:
    result = bisect(COMMITS[:2], planted((1, 0.2)), clock=FakeClock())
    assert isinstance(result, BisectResult)
    with pytest.raises(AttributeError):
        result.outcome = "nothing"  # type: ignore[misc]


# --- a step's session results read into a judgement (bisect/steps.judgement_from_results) ---


def verdict(status: str, change: float, *, memory_regressed: bool = False, spread: float = 0.01) -> dict[str, object]:
    metrics: list[dict[str, object]] = [{"metric": "throughput", "status": "regressed" if status == "regressed" and
                                         not memory_regressed else "unchanged" if status == "regressed" else status,
                                         "relative_change": change, "ci_low": change - spread,
                                         "ci_high": change + spread, "decision_threshold": -0.05,
                                         "message": f"throughput {change:+.1%}"}]
    if memory_regressed:
        metrics.append({"metric": "peak_tf_allocator[CPU:0]", "status": "regressed", "relative_change": 0.5,
                        "message": "peak TF memory +50%"})
    return {"status": status, "metrics": metrics}


def doc(verdicts: dict[str, dict[str, object]], compared: dict[str, str]) -> ResultsDocument:
    return ResultsDocument(environment=Environment(hard=(("cpu_model", "x"),)), measurements=(), verdicts=verdicts,
                           compared_with=compared)


BESIDE = "measured beside /tmp/tfperf-bisect-x/good"


def test_a_step_is_bad_when_a_selected_test_regressed_beside_good() -> None:
    j = judgement_from_results(doc({"a": verdict("regressed", -0.2), "b": verdict("unchanged", 0.0)},
                                   {"a": BESIDE, "b": BESIDE}), "", None)
    assert j.kind == "bad" and j.worst() is not None and j.worst().test_id == "a"  # type: ignore[union-attr]


def test_a_memory_regression_counts_and_its_message_is_the_one_shown() -> None:
    j = judgement_from_results(doc({"a": verdict("regressed", -0.01, memory_regressed=True)}, {"a": BESIDE}), "", None)
    assert j.kind == "bad" and j.tests[0].message == "peak TF memory +50%" and j.tests[0].change == -0.01


def test_verdicts_not_measured_beside_good_do_not_count() -> None:
    out = "t.py::a: not measured beside /tmp/good: /tmp/good has no test t.py::a; judged as without --tfperf-against"
    j = judgement_from_results(doc({"a": verdict("regressed", -0.2)}, {"a": "stored baseline"}), out, None)
    assert j.kind == "skip"
    assert j.reason == f"not measured beside GOOD: no selected test ({out})"


def test_a_test_bad_was_judged_on_that_is_missing_here_makes_the_step_a_skip() -> None:
    j = judgement_from_results(doc({"b": verdict("unchanged", 0.0)}, {"b": BESIDE}), "", ("a",))
    assert j.kind == "skip" and j.reason.startswith("not measured beside GOOD: a (")
    # Tests that did not regress at BAD do not decide later steps.
    j = judgement_from_results(doc({"a": verdict("unchanged", 0.0), "b": verdict("regressed", -0.3)},
                                   {"a": BESIDE, "b": BESIDE}), "", ("a",))
    assert j.kind == "good" and [t.test_id for t in j.tests] == ["a"]


def test_a_noisy_verdict_is_a_skip_not_a_guess_unless_its_interval_rules_out_a_slowdown() -> None:
    j = judgement_from_results(doc({"a": verdict("noisy", -0.01, spread=0.06)}, {"a": BESIDE}), "", ("a",))
    assert j.kind == "skip" and j.undecided and j.reason == "too noisy to decide: throughput -1.0%"
    # The comparison could not catch the full tolerance, but its 99% interval (-3% to +5%) lies above -5%.
    j = judgement_from_results(doc({"a": verdict("noisy", 0.01, spread=0.04)}, {"a": BESIDE}), "", ("a",))
    assert j.kind == "good"


class FakeWorktrees:
    def __init__(self, root: Path) -> None:
        self.root, self.added, self.removed = root, [], []  # type: ignore[var-annotated]

    def add(self, sha: str, name: str) -> Path:
        self.added.append(sha)
        return self.root / name

    def remove(self, path: Path) -> None:
        self.removed.append(path)


@pytest.mark.parametrize("second,kind,reason", [
    (Judgement("good"), "good", ""),
    (Judgement("skip", reason="too noisy to decide: x", undecided=True), "skip", "measured twice, too noisy to decide: x"),
])
def test_a_step_too_noisy_to_decide_is_measured_once_more_in_the_same_worktree(
        tmp_path: Path, second: Judgement, kind: str, reason: str) -> None:
    answers = [Judgement("skip", reason="too noisy to decide: x", undecided=True), second]
    worktrees = FakeWorktrees(tmp_path)
    runner = StepRunner(repo=tmp_path, worktrees=worktrees, good_tree=tmp_path / "good", pytest_args=(),  # type: ignore[arg-type]
                        invocation_dir=tmp_path)
    builds: list[bool] = []

    def judge(tree: Path, *, build: bool) -> Judgement:
        builds.append(build)
        return answers.pop(0)
    runner._judge = judge  # type: ignore[method-assign]
    got = runner(COMMITS[3])
    assert got.kind == kind and got.measurements == 2 and got.reason == reason
    assert builds == [True, False] and worktrees.added == [COMMITS[3].sha] and len(worktrees.removed) == 1
    step = Step(number=2, commit=COMMITS[3], position=3, judgement=got, elapsed_s=50.0)
    result = BisectResult(outcome="nothing", commits=31, planned_steps=7, steps=(step,), elapsed_s=50.0)
    assert result_lines(result, "g", "b")[-1] == "1 paired step, 2 paired measurements (planned about 7) over 31 " \
                                                  "commits in 50 s"
    assert result_dict(result, "g", "b")["paired_measurements"] == 2


def test_why_nothing_was_collected_is_the_telling_line_of_pytests_output() -> None:
    assert why_not_collected("collecting ...\nE   ModuleNotFoundError: No module named 'x'\n1 error") == \
        "ModuleNotFoundError: No module named 'x'"
    assert why_not_collected("ERROR: file or directory not found: t.py\n\nno tests ran") == \
        "ERROR: file or directory not found: t.py"
    assert why_not_collected("") == "no output"


def test_a_search_step_runs_with_explanations_off_the_explained_step_with_them_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_tfperf.bisect import steps as bisect_steps

    commands: list[list[str]] = []

    def run(cmd: list[str], **kw: object) -> tuple[int, str]:
        commands.append(cmd)
        return 5, "no tests ran"  # nothing collected: the step is skipped, the command is what counts
    monkeypatch.setattr(bisect_steps, "_run", run)
    (tmp_path / "wt").mkdir()
    runner = StepRunner(repo=tmp_path, worktrees=FakeWorktrees(tmp_path / "wt"),  # type: ignore[arg-type]
                        good_tree=tmp_path / "good", pytest_args=(), invocation_dir=tmp_path)
    assert runner._judge(tmp_path / "wt" / "step", build=False).kind == "skip"
    (cmd,) = commands
    # explanations are on by default: a search step, which needs only the verdict, turns them off (in the ini
    # form every version of the plugin reads)
    assert cmd[cmd.index("-o") + 1] == "tfperf_explain=false" and "--tfperf-explain" not in cmd

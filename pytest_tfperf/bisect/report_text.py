"""What ``tfperf-bisect`` says: the plan up front, one line per step, the table and the result; and its JSON.

Pure formatting of ``bisect.search`` results (returns lines and dicts, never prints).
"""

from __future__ import annotations

from typing import Any

from pytest_tfperf.bisect.search import BisectResult, Commit, Judgement, PairedChange, ParentExplanation, Step

JSON_SCHEMA = "pytest-tfperf/bisect"
# 2 - "explanation" (the first bad commit explained against its parent, or null), "search_elapsed_s";
#     "elapsed_s" is the whole run's, the explained step included
JSON_VERSION = 2
NOTHING = "BAD is not slower than GOOD: nothing to bisect"


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


EXPLAINED_STEP = ", then one explained step"


def plan_line(good: str, bad: str, commits: int, steps: int, step_s: float | None = None, *,
              explain: bool = False) -> str:
    """The whole search stated before it runs: commits, steps, and (once one step is measured) their cost."""
    what = f"bisecting {commits} first-parent commit{'s' if commits != 1 else ''} after {good} up to {bad}: " \
           f"about {steps} paired step{'s' if steps != 1 else ''}"
    if step_s is None:
        explained = ("; the explained step measures the first bad commit beside its parent under --tfperf-explain, "
                     "the regressed tests only (--no-explain skips it)") if explain else ""
        return f"{what}{EXPLAINED_STEP if explain else ''} (BAD against GOOD first, the first bad commit's parent " \
               f"judged twice), each one paired measurement of the selected tests beside GOOD{explained}"
    # The explained step measures the regressed tests once more and profiles both sides: about one step more.
    total = duration((steps + 1) * step_s) if explain else duration(steps * step_s)
    return f"{what} of about {step_s:.0f} s{EXPLAINED_STEP if explain else ''} (the first took {step_s:.0f} s): " \
           f"about {total} in all"


def _pct(value: float | None) -> str:
    return "?" if value is None else f"{value * 100:+.1f}%"


def change_text(test: PairedChange | None) -> str:
    if test is None or test.change is None:
        return "-"
    interval = f" (99% bounds {_pct(test.ci_low)} to {_pct(test.ci_high)})" if test.ci_low is not None else ""
    return f"{_pct(test.change)}{interval}"


def _verdict_word(judgement: Judgement, again: bool = False) -> str:
    word = {"bad": "BAD (regressed)", "good": "good", "skip": "skipped"}[judgement.kind]
    return f"{word}, judged again" if again else word


def commit_text(commit: Commit) -> str:
    return f"{commit.short} {commit.subject!r} ({commit.author_date})"


def step_line(step: Step) -> str:
    """One line as a step finishes."""
    j = step.judgement
    worst = j.worst()
    tail = f": {j.reason}" if j.kind == "skip" and j.reason else \
        f", throughput {change_text(worst)} against GOOD" if worst is not None and worst.change is not None else ""
    twice = " (measured twice: the first was too noisy to decide)" if j.measurements > 1 and j.kind != "skip" else ""
    return f"step {step.number}: {commit_text(step.commit)}: {_verdict_word(j, step.again)}{twice}{tail} " \
           f"[{duration(step.elapsed_s)}]"


def table_lines(steps: tuple[Step, ...]) -> list[str]:
    lines = ["| step | commit | subject | verdict against GOOD | throughput change (99% bounds) | time |",
             "|---|---|---|---|---|---|"]
    for s in steps:
        j = s.judgement
        worst = j.worst()
        verdict = _verdict_word(j, s.again) + (f": {j.reason}" if j.kind == "skip" and j.reason else "") + \
            (" (measured twice)" if j.measurements > 1 and j.kind != "skip" else "")
        subject = s.commit.subject.replace("|", "\\|")
        lines.append(f"| {s.number} | {s.commit.short} | {subject} | {verdict} | {change_text(worst)} | "
                     f"{duration(s.elapsed_s)} |")
    return lines


def explanation_lines(explanation: ParentExplanation) -> list[str]:
    """The explained step under the first bad commit: each regressed test's lines, or one line saying why none."""
    parent = explanation.parent
    if explanation.reason:
        return [f"  no explanation against its parent {parent.short}: {explanation.reason}"]
    lines = [f"  explained against its parent {parent.short} ({parent.subject!r}), one session with --tfperf-explain:"]
    for test in explanation.tests:
        lines.append(f"    {test.test_id}:")
        lines.extend(f"      {line}" for line in test.lines)
    if explanation.rerun:
        lines.append(f"    (the raw profiles went with the worktrees; to keep them: {explanation.rerun})")
    return lines


def result_lines(result: BisectResult, good: str, bad: str,
                 explanation: ParentExplanation | None = None) -> list[str]:
    """The result in words (with the explanation under the first bad commit), then the step table, then the cost."""
    lines: list[str] = []
    if result.outcome == "nothing":
        worst = result.steps[0].judgement.worst() if result.steps else None
        lines.append(f"{NOTHING} (no selected test regressed beyond its tolerance; "
                     f"throughput {change_text(worst)})")
    elif result.outcome == "untestable":
        lines.append(f"cannot bisect: BAD ({bad}) could not be judged against GOOD ({good}): {result.reason}")
    elif result.outcome == "ambiguous":
        names = ", ".join(c.short for c in result.candidates)
        lines.append(f"the first bad commit is one of {names}: the commits before the last of them were skipped "
                     "and could not be judged")
    else:
        assert result.first_bad is not None and result.verdict is not None
        lines.append(f"first bad commit: {result.first_bad.sha}")
        lines.append(f"  {result.first_bad.subject}")
        lines.append(f"  author date {result.first_bad.author_date}")
    if result.verdict is not None and result.outcome in ("found", "ambiguous"):
        for test in result.verdict.tests:
            if test.status == "regressed":
                lines.append(f"  {test.test_id}: throughput {change_text(test)} against GOOD, paired verdict "
                             f"REGRESSED: {test.message}")
    if explanation is not None and result.outcome == "found":
        lines.extend(explanation_lines(explanation))
    for f in result.further:
        lines.append(f"another regression was seen: {f.test_id} measured {_pct(f.change)} at {f.at.short} against "
                     f"{_pct(f.first_change)} at the first bad commit, so a further slowdown lies after "
                     f"{f.after.short} and at or before {f.at.short} (bisect again: tfperf-bisect {f.after.short} "
                     f"{f.at.short})")
    lines.extend(result.notes)
    if result.steps:
        lines.append("")
        lines.extend(table_lines(result.steps))
        lines.append("")
    measured = sum(s.judgement.measurements for s in result.steps)
    extra = f", {measured} paired measurements" if measured != len(result.steps) else ""
    counted = f"{len(result.steps)} paired step{'s' if len(result.steps) != 1 else ''}{extra} " \
              f"(planned about {result.planned_steps}) over {result.commits} commits"
    if explanation is None:
        lines.append(f"{counted} in {duration(result.elapsed_s)}")
    else:
        lines.append(f"{counted}, then one explained step, in {duration(result.elapsed_s + explanation.elapsed_s)} "
                     f"(search {duration(result.elapsed_s)}, explained step {duration(explanation.elapsed_s)})")
    return lines


def result_dict(result: BisectResult, good: str, bad: str, *, good_sha: str = "", bad_sha: str = "",
                selection: tuple[str, ...] = (), explanation: ParentExplanation | None = None) -> dict[str, Any]:
    """The JSON document: what the terminal says, as data."""
    def commit(c: Commit | None) -> dict[str, str] | None:
        return None if c is None else {"sha": c.sha, "subject": c.subject, "author_date": c.author_date}

    return {
        "schema": JSON_SCHEMA,
        "version": JSON_VERSION,
        "good": {"rev": good, "sha": good_sha},
        "bad": {"rev": bad, "sha": bad_sha},
        "selection": list(selection),
        "outcome": result.outcome,
        "message": result_lines(result, good, bad)[0],
        "first_bad": commit(result.first_bad),
        "verdict": None if result.verdict is None else result.verdict.to_dict(),
        "explanation": None if explanation is None else explanation.to_dict(),
        "candidates": [commit(c) for c in result.candidates],
        "further": [f.to_dict() for f in result.further],
        "reason": result.reason,
        "notes": list(result.notes),
        "commits": result.commits,
        "planned_steps": result.planned_steps,
        "steps": [s.to_dict() for s in result.steps],
        "paired_measurements": sum(s.judgement.measurements for s in result.steps),
        "search_elapsed_s": round(result.elapsed_s, 3),
        "elapsed_s": round(result.elapsed_s + (explanation.elapsed_s if explanation is not None else 0.0), 3),
    }

"""The bisect search (``tfperf-bisect``): which first-parent commit between GOOD and BAD made the tests slower.

Pure: the commits come in as data, each commit's judgement comes from an
injected ``judge`` (in use, one ``--tfperf-against`` session of that commit
measured beside GOOD: ``bisect/steps.py``), and time from an injected
clock. No git, no processes, no pytest, no TensorFlow.

The search
----------
``commits`` are the first-parent commits after GOOD up to BAD, oldest first;
GOOD is good by definition. BAD is judged first: when it did not regress
against GOOD there is nothing to bisect, and nothing more is measured. Then a
binary search keeps ``good`` (the newest commit known good, GOOD itself at
the start) and ``bad`` (the oldest known bad) and judges the commit halfway
between them until they are neighbours: ``bad`` is the first bad commit. Every
step is judged against GOOD, not against the neighbouring step's commit: one
fixed reference keeps each verdict the gate's own (a regression beyond the
tolerance, confirmed beside a fresh process), and a slowdown spread over
several small commits still crosses the tolerance somewhere.

When the halving ends, the last commit judged good (the first bad commit's
parent, unless that is GOOD) is judged once more. A step's verdict errs
rarely, but a search believes every one: a 10% slowdown judged "good" once
sends the search past it, and the first bad commit it then reports has a
parent that is in truth slow. The second look catches that (the parent is
then bad, and the search goes on below it, from the newest good commit
under it); it costs one step, which a range of 2**k - 1 commits has to spare
within the k + 2 steps it is stated at.

The first bad commit is judged again too, but only when its verdict was weak:
its 99% interval reaches above the decision threshold (a change that would
not be a regression is inside it), the gate's own sign of borderline
evidence. A false alarm on a loaded machine looks like that (-5.9% against a
5% threshold), a 20% slowdown does not. Judged good the second time, it is
dropped and the search goes on above it. BAD itself is not judged again: its
verdict is the one the search set out from.

A commit that cannot be judged (its tests are missing, do not import, or it
does not build) is *skipped*, as ``git bisect skip`` does: the search judges
the untried commit nearest the middle instead. When every commit between
``good`` and ``bad`` is skipped, the first bad commit is one of them and
``bad``: the result says which (``ambiguous``).

Other regressions
-----------------
The search reports the first commit that crosses the tolerance. A later step
may still have measured a clearly larger slowdown than the first bad commit
brought (its interval wholly beyond the first bad commit's): a second
regression lies between them, and the result names that range (``further``).

The explained step
------------------
After the search, the first bad commit is explained against its parent
(``parent_of``: the commit before it in the range, or GOOD) by one more
session (``bisect/steps.py``); ``ParentExplanation`` carries what it
said, or why it said nothing, for the report.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["bad", "good", "skip"]
Outcome = Literal["found", "nothing", "ambiguous", "untestable"]


@dataclass(frozen=True, slots=True)
class Commit:
    sha: str
    subject: str
    author_date: str  # ISO 8601, as git prints it (%aI)

    @property
    def short(self) -> str:
        return self.sha[:10]


@dataclass(frozen=True, slots=True)
class PairedChange:
    """One selected test's paired verdict at one commit, against GOOD (a throughput change < 0 is slower)."""

    test_id: str
    status: str  # the verdict's status: regressed, unchanged, improved, noisy, ...
    change: float | None = None  # throughput current / GOOD - 1
    ci_low: float | None = None
    ci_high: float | None = None
    message: str = ""  # the regressed metric's message, else the throughput metric's
    threshold: float | None = None  # the throughput decision threshold, as a change (-0.05 at a 10% tolerance)

    def to_dict(self) -> dict[str, Any]:
        return {"test_id": self.test_id, "status": self.status, "throughput_change": self.change,
                "ci_low": self.ci_low, "ci_high": self.ci_high, "message": self.message}


@dataclass(frozen=True, slots=True)
class Judgement:
    """One commit judged against GOOD: bad, good, or skipped (with why)."""

    kind: Kind
    reason: str = ""  # why skipped; for bad/good a short summary may be given
    tests: tuple[PairedChange, ...] = ()
    undecided: bool = False  # a skip that another measurement may decide (too noisy), not a broken commit
    measurements: int = 1  # paired sessions it took (2: measured again after an undecided first one)

    def worst(self) -> PairedChange | None:
        """The regressed test with the largest slowdown, else the test with the lowest throughput change."""
        pool = [t for t in self.tests if t.status == "regressed"] or list(self.tests)
        with_change = [t for t in pool if t.change is not None]
        if with_change:
            return min(with_change, key=lambda t: t.change if t.change is not None else 0.0)
        return pool[0] if pool else None

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.kind, "reason": self.reason, "measurements": self.measurements,
                "tests": [t.to_dict() for t in self.tests]}


@dataclass(frozen=True, slots=True)
class Step:
    number: int  # 1-based
    commit: Commit
    position: int  # index in the range (0 = the first commit after GOOD)
    judgement: Judgement
    elapsed_s: float
    again: bool = False  # the first bad commit's parent, judged a second time

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.number, "commit": self.commit.sha, "subject": self.commit.subject,
                "author_date": self.commit.author_date, "position": self.position, "again": self.again,
                "elapsed_s": round(self.elapsed_s, 3), **self.judgement.to_dict()}


@dataclass(frozen=True, slots=True)
class Further:
    """A second regression seen: ``test_id`` measured ``change`` at ``at`` (beyond the first bad commit's interval),
    so another slowdown lies after ``after`` and at or before ``at``."""

    test_id: str
    after: Commit
    at: Commit
    change: float
    first_change: float

    def to_dict(self) -> dict[str, Any]:
        return {"test_id": self.test_id, "after": self.after.sha, "at_or_before": self.at.sha,
                "throughput_change": self.change, "first_bad_throughput_change": self.first_change}


@dataclass(frozen=True, slots=True)
class BisectResult:
    outcome: Outcome
    commits: int  # commits in the range after GOOD, BAD included
    planned_steps: int
    steps: tuple[Step, ...]
    elapsed_s: float
    first_bad: Commit | None = None
    verdict: Judgement | None = None  # the first bad commit's judgement against GOOD
    candidates: tuple[Commit, ...] = ()  # ambiguous: the first bad commit is one of these
    further: tuple[Further, ...] = ()
    reason: str = ""  # untestable: why BAD could not be judged
    notes: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class ExplainedTest:
    """Where one regressed test's time (and memory) went at the first bad commit, against its parent."""

    test_id: str
    lines: tuple[str, ...]  # as the explained session printed them, or one line saying why there are none
    detail: dict[str, Any] | None = None  # the results JSON's explanation object (causes, ms per iteration)

    def to_dict(self) -> dict[str, Any]:
        return {"test_id": self.test_id, "lines": list(self.lines), "explanation": self.detail}


@dataclass(frozen=True, slots=True)
class ParentExplanation:
    """The explained step: the first bad commit measured beside its parent under ``--tfperf-explain``.

    ``reason`` says why there is no explanation at all (the step failed,
    timed out, wrote nothing); the bisect result stands either way.
    """

    parent: Commit  # the first bad commit's first parent (GOOD itself, or a commit of the range)
    elapsed_s: float
    tests: tuple[ExplainedTest, ...] = ()
    reason: str = ""
    rerun: str = ""  # the command that runs it again by hand (and keeps the raw profiles)

    def to_dict(self) -> dict[str, Any]:
        return {"against_parent": {"sha": self.parent.sha, "subject": self.parent.subject,
                                   "author_date": self.parent.author_date},
                "tests": [t.to_dict() for t in self.tests], "reason": self.reason, "rerun": self.rerun,
                "elapsed_s": round(self.elapsed_s, 3)}


def parent_of(result: BisectResult, commits: Sequence[Commit], good: Commit) -> Commit | None:
    """The first bad commit's first parent, when the search found one: the commit before it in the range, or GOOD."""
    if result.outcome != "found" or result.first_bad is None:
        return None
    position = next((i for i, c in enumerate(commits) if c.sha == result.first_bad.sha), None)
    if position is None:
        return None
    return commits[position - 1] if position > 0 else good


def planned_steps(commits: int) -> int:
    """Steps of a search without skips: BAD against GOOD, halvings until one candidate is left, the parent again."""
    if commits <= 0:
        return 0
    return 1 + (math.ceil(math.log2(commits)) + 1 if commits > 1 else 0)


def next_probe(good: int, bad: int, skipped: set[int]) -> int | None:
    """The untried index strictly between ``good`` and ``bad`` nearest their middle (the lower one on a tie)."""
    middle = (good + bad) // 2
    candidates = [i for i in range(good + 1, bad) if i not in skipped]
    if not candidates:
        return None
    return min(candidates, key=lambda i: (abs(i - middle), i))


def bisect(commits: Sequence[Commit], judge: Callable[[Commit], Judgement], *,
           on_step: Callable[[Step], None] | None = None,
           clock: Callable[[], float] = time.monotonic) -> BisectResult:
    """Search ``commits`` (after GOOD up to BAD, oldest first) for the first one ``judge`` calls bad."""
    if not commits:
        raise ValueError("no commits between GOOD and BAD: nothing to bisect")
    start = clock()
    planned = planned_steps(len(commits))
    steps: list[Step] = []

    def run(position: int, again: bool = False) -> Judgement:
        began = clock()
        judgement = judge(commits[position])
        step = Step(number=len(steps) + 1, commit=commits[position], position=position, judgement=judgement,
                    elapsed_s=clock() - began, again=again)
        steps.append(step)
        if on_step is not None:
            on_step(step)
        return judgement

    def result(outcome: Outcome, *, first_bad: Commit | None = None, verdict: Judgement | None = None,
               candidates: tuple[Commit, ...] = (), further: tuple[Further, ...] = (), reason: str = "",
               notes: tuple[str, ...] = ()) -> BisectResult:
        return BisectResult(outcome=outcome, commits=len(commits), planned_steps=planned, steps=tuple(steps),
                            elapsed_s=clock() - start, first_bad=first_bad, verdict=verdict, candidates=candidates,
                            further=further, reason=reason, notes=notes)

    last = len(commits) - 1
    first = run(last)
    if first.kind == "skip":
        return result("untestable", reason=first.reason)
    if first.kind == "good":
        return result("nothing")
    judgements = {last: first}
    good, bad = -1, last
    skipped: set[int] = set()
    goods: set[int] = {-1}
    rechecked: set[int] = set()
    notes: list[str] = []
    while True:
        while bad - good > 1:
            probe = next_probe(good, bad, skipped)
            if probe is None:
                break
            judgement = run(probe)
            if judgement.kind == "skip":
                skipped.add(probe)
            elif judgement.kind == "bad":
                judgements[probe] = judgement
                bad = probe
            else:
                goods.add(probe)
                good = probe
        if bad - good > 1:
            break  # skips hide the boundary: nothing to judge again
        if bad != last and bad not in rechecked and _weak(judgements[bad]):
            rechecked.add(bad)
            second = run(bad, again=True)
            if second.kind == "good":  # a false alarm: the search goes on above it
                del judgements[bad]
                goods.add(bad)
                good, bad = bad, min(p for p in judgements if p > bad)
                continue
            if second.kind == "bad":
                judgements[bad] = second
            else:
                notes.append(f"the first bad commit {commits[bad].short} was judged bad on weak evidence, then could "
                             f"not be judged a second time ({second.reason})")
        if good < 0:
            break  # the parent is GOOD itself
        again = run(good, again=True)
        if again.kind == "good":
            break
        if again.kind == "skip":
            notes.append(f"the first bad commit's parent {commits[good].short} was judged good, then could not be "
                         f"judged a second time ({again.reason})")
            break
        # The parent is slow after all: the first "good" was wrong, and the search goes on below it.
        judgements[good] = again
        goods.discard(good)
        bad = good
        good = max(g for g in goods if g < bad)
    further = tuple(_further(commits, bad, judgements))
    if bad - good > 1:  # every commit between them was skipped
        return result("ambiguous", first_bad=None, verdict=judgements[bad],
                      candidates=tuple(commits[good + 1:bad + 1]), further=further, notes=tuple(notes))
    return result("found", first_bad=commits[bad], verdict=judgements[bad], further=further, notes=tuple(notes))


def _weak(judgement: Judgement) -> bool:
    """A bad verdict whose regressed tests' 99% intervals all reach above the decision threshold."""
    regressed = [t for t in judgement.tests if t.status == "regressed"]
    return bool(regressed) and all(t.ci_high is not None and t.threshold is not None and t.ci_high > t.threshold
                                   for t in regressed)


def _further(commits: Sequence[Commit], first: int, judgements: dict[int, Judgement]) -> list[Further]:
    """Later bad steps whose slowdown lies wholly beyond the first bad commit's interval, one per test."""
    found = []
    base = {t.test_id: t for t in judgements[first].tests}
    for test_id, ref in base.items():
        if ref.change is None or ref.ci_low is None:
            continue
        after = first
        for position in sorted(p for p in judgements if p > first):
            later = next((t for t in judgements[position].tests if t.test_id == test_id), None)
            if later is None or later.change is None or later.ci_high is None:
                continue
            if later.ci_high < ref.ci_low:  # slower than anything the first bad commit's interval allows
                found.append(Further(test_id=test_id, after=commits[after], at=commits[position],
                                     change=later.change, first_change=ref.change))
                break
            after = position
    return found

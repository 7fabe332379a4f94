"""The --tfperf-against gate's measuring plan: looks, and the confirmation by two fresh pairs of processes.

Why this plan (docs/explanation/gates.md): on a shared runner only the two versions
taking turns see a 10% change, but two live processes keep some of their
speed for as long as they live, so that evidence from one pair of processes,
however many rounds, is evidence about that pair. The plan:

1. First look: this process and the partner, 20 rounds each, in turns (ABBA),
   each side stopped while the other is timed (``against.freeze``); after
   10 rounds a side the rounds end when the change is already surely within
   the threshold (``gates.paired.clearly_within``, a futility look).
2. Second look, only when the first is borderline: 20 more rounds beside the
   same partner process, judged pooled.
3. A throughput regression from either look fails the test only when two
   fresh pairs of processes, one process of each tree in each, taking turns
   with as many rounds, read it slower too, one pair after the other
   (``gates.paired.PAIRS_TO_FAIL``), and the mean of the three pairs'
   estimates lies beyond the decision threshold; an improvement is said the same
   way (two fresh pairs read it faster, the mean beyond the tolerance). A false alarm then needs three independent
   pairs of processes to err the same way. Each look's test is one-sided at
   a nominal 1%; on rounds that move in spells one look alone errs 1.4-10% of
   the time (``benchmarks/paired_calibration.py``), and two pairs erred
   together about once in 440 A/A verdicts, so the fresh pairs are
   load-bearing.
   When the fresh pair's evidence is borderline (too few rounds worth of
   independent evidence to tell, as when its rounds move together in
   spells), the same fresh pair measures as many rounds again and the pooled
   rounds decide: a pair that cannot tell is not a pair that disagrees.
4. An unchanged or noisy verdict whose rounds' mean time per item reads slower
   (a cost on a few iterations, which the median does not see) gets a notice
   when two fresh pairs read it slower too (``against.periodic``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pytest_tfperf.config import MarkerOptions, SessionConfig
from pytest_tfperf.measuring.workload import RunSettings
from pytest_tfperf.model import Measurement
from pytest_tfperf.session.outcome import Outcome, borderline

if TYPE_CHECKING:  # annotations only: the partner is started, and the verdict's module loaded, on first use
    from pytest_tfperf.gates.verdict import MetricVerdict, Tolerances
    from pytest_tfperf.against.paired_run import PairedRun
    from pytest_tfperf.against.partner import Partner

# The session's measurement with a partner's pace hook and a log of this side's throughput per round.
Measure = Callable[[Callable[[str, int], bool | None] | None, list[float] | None], dict[str, Measurement]]
# A measurement beside the partner: (ours, theirs, a notice): see measure_beside.
Beside = tuple[dict[str, Measurement] | None, Measurement | None, str | None]


class TfPerfSession(Protocol):
    """What this plan needs of the session (``session.session.TfPerfSession``, which imports this module)."""

    config: SessionConfig
    rootdir: str
    invocation: tuple[str, list[str]]
    _own_partner: Partner | None  # this tree's fresh process, started on the first confirmation

    def partner(self) -> Partner: ...  # the baseline tree's

    def _evaluate_against(self, m: Measurement, theirs: Measurement, options: MarkerOptions) -> Outcome: ...

    def _measure_beside_partner(self, test_id: str, settings: RunSettings, measure_once: Measure, *,
                                fallback: str, tolerances: Tolerances | None = None) -> Beside: ...

    def _tolerances(self, options: MarkerOptions) -> Tolerances: ...

    def _confirm_against(self, test_id: str, settings: RunSettings, fresh: bool = True
                         ) -> tuple[tuple[Measurement, Measurement] | None, str | None]: ...


def _metric(o: Outcome) -> MetricVerdict | None:
    """The outcome's throughput verdict, if it has one."""
    return o.verdict.metric("throughput") if o.verdict is not None else None


def _throughput(o: Outcome) -> tuple[str, str] | None:
    """The throughput verdict's status and message, if the outcome has one."""
    metric = _metric(o)
    return None if metric is None else (str(metric.status), metric.message)


def throughput_regressed(o: Outcome) -> bool:
    return (_throughput(o) or ("", ""))[0] == "regressed"


def throughput_improved(o: Outcome) -> bool:
    return (_throughput(o) or ("", ""))[0] == "improved"


def _said(o: Outcome, otherwise: str) -> str:
    """What the throughput verdict said, for a notice that quotes it."""
    return (_throughput(o) or ("", otherwise))[1]


def judge(session: TfPerfSession, test_id: str, measured: dict[str, Measurement], name: str, theirs: Measurement,
          options: MarkerOptions, settings: RunSettings, measure_once: Measure) -> Outcome:
    """The paired verdict against the partner's figures, in up to two looks, confirmed before it fails a test.

    Borderline evidence is measured once more beside the same partner
    process and the pooled rounds decide (a second look, no new process).
    A throughput regression must then be seen again by two fresh pairs of
    processes, each pair, one of each tree, taking turns (``confirm``):
    a process keeps some of its speed for as long as it lives (thread
    placement, memory layout, the buffer sizes tf.data's autotuner chose),
    so a pair of processes can read a few percent apart on unchanged code
    in every round, and pooling more rounds of the same pair only makes
    that surer. Replacing both processes, twice, makes a false alarm need
    three independent pairs to err the same way (``PAIRS_TO_FAIL``). Each
    fresh pair need only read the change as slower, surely; how much slower
    is decided on the mean of all pairs' estimates (``_together``).
    """
    from pytest_tfperf.against.periodic import periodic_notice
    from pytest_tfperf.gates.pooling import pool

    outcome = session._evaluate_against(measured[name], theirs, options)
    if borderline(outcome) and not throughput_regressed(outcome):
        ours, theirs_again, note = session._measure_beside_partner(
            test_id, settings, measure_once, fallback="the first measurement decided",
            tolerances=session._tolerances(options))
        if ours is None or theirs_again is None:
            outcome.notices.append(f"{note} (a second look because the first verdict was borderline)")
            return outcome
        measured[name] = pool(measured[name], ours[name])
        theirs = pool(theirs, theirs_again)
        outcome = session._evaluate_against(measured[name], theirs, options)
        outcome.notices.append(
            f"{test_id}: measured a second time beside the same partner because the first verdict was "
            f"borderline; judged on both measurements pooled ({len(measured[name].timings.round_sizes)} "
            "rounds a side)")
    rounds = len(measured[name].timings.round_sizes)
    confirm_settings = dataclasses.replace(settings, rounds=rounds, min_rounds=rounds)  # fresh pairs: as many
    if not throughput_regressed(outcome) and not throughput_improved(outcome):  # beside "unchanged" or "noisy"
        return periodic_notice(test_id, measured[name], theirs, outcome, session._tolerances(options),
                               lambda: session._confirm_against(test_id, confirm_settings))
    if throughput_improved(outcome):
        outcome = _confirm_improvement(session, test_id, measured, name, outcome, options, confirm_settings)
    if not throughput_regressed(outcome):
        return outcome
    return _fresh_pairs(session, test_id, measured, name, outcome, options, confirm_settings, faster=False)


def _together(outcome: Outcome, changes: list[float], tolerances: Tolerances, test_id: str, *,
              faster: bool = False) -> Outcome:
    """How much slower (or faster) is decided on the pairs together: one pair's offset moves its own estimate by
    a few percent, so each fresh pair only has to read the change the same way, surely, and the mean of all
    pairs' estimates must lie beyond the decision threshold for the test to fail, or beyond the tolerance for
    an improvement to be said (``gates.paired.against_detectable_slowdown`` states the limit of this whole
    procedure)."""
    from pytest_tfperf.gates.paired import mean_change, within_threshold_together

    if len(changes) < 2:
        return outcome
    together = mean_change(changes)
    bound, what = ((tolerances.throughput, "tolerance") if faster
                   else (tolerances.throughput_decision_threshold, "decision threshold"))
    if (together if faster else -together) > bound:
        outcome.notices.append(f"{test_id}: the {_count(len(changes))} pairs of processes together: {together:+.1%} "
                               f"(the mean of their estimates), beyond the {bound:.1%} {what}")
        return outcome
    assert outcome.verdict is not None
    outcome.verdict = within_threshold_together(outcome.verdict, changes, tolerances, faster=faster)
    outcome.notices.append(f"{test_id}: {'not said to be faster' if faster else 'not failed'}: every pair of "
                           f"processes read it {'faster' if faster else 'slower'}, but by {abs(together):.1%} "
                           f"together, within the {bound:.1%} {what}")
    return outcome


def _change(o: Outcome) -> float:
    metric = _metric(o)
    return 0.0 if metric is None or metric.relative_change is None else metric.relative_change


def _slower(o: Outcome, tolerances: Tolerances) -> bool:
    """A fresh pair confirms a regression when it reads the change as slower, sure at the confidence level."""
    from pytest_tfperf.gates.paired import slower_with_confidence

    metric = _metric(o)
    return (metric is not None and metric.ci_high is not None and metric.p_value is not None
            and slower_with_confidence(metric.ci_high, metric.p_value, tolerances))


_COUNTS = {1: "one", 2: "two", 3: "three"}


def _count(n: int) -> str:
    return _COUNTS.get(n, str(n))


def _fresh(pair: int) -> str:
    """The processes of the ``pair``-th fresh pair, as a notice names them."""
    return "two fresh processes" if pair == 1 else "another two fresh processes"


def _fresh_pair_verdict(session: TfPerfSession, test_id: str, confirmation: tuple[Measurement, Measurement],
                        options: MarkerOptions, settings: RunSettings
                        ) -> tuple[Outcome, tuple[Measurement, Measurement], str]:
    """A fresh pair's verdict; when it is borderline (its bounds straddle the threshold), as many rounds again
    beside the same two fresh processes, pooled: not asking would let a pair that saw too little clear a
    regression. Returns the verdict, the (pooled) measurements and how the notice says it looked."""
    from pytest_tfperf.gates.pooling import pool

    again = session._evaluate_against(confirmation[0], confirmation[1], options)
    if _slower(again, session._tolerances(options)) or not borderline(again):
        return again, confirmation, ""
    more, _ = session._confirm_against(test_id, settings, False)
    if more is None:
        return again, confirmation, ""
    confirmation = (pool(confirmation[0], more[0]), pool(confirmation[1], more[1]))
    again = session._evaluate_against(confirmation[0], confirmation[1], options)
    return again, confirmation, (f" (measured twice, {len(confirmation[0].timings.round_sizes)} rounds a side "
                                 "pooled, because its first verdict was borderline)")


def _confirm_improvement(session: TfPerfSession, test_id: str, measured: dict[str, Measurement], name: str,
                         outcome: Outcome, options: MarkerOptions, settings: RunSettings) -> Outcome:
    """An improvement is said as a regression fails: two fresh pairs of processes, one of each tree in each, one
    pair after the other, must each read it faster, surely, and the three pairs together (the mean of their
    estimates) must lie beyond the tolerance.

    One pair of processes errs either way alike (a planted 10% slowdown read "improved" once on a loaded
    machine; with one fresh pair, unchanged code read "improved" 4 times in 1,014 verdicts), and a wrong
    "faster" invites a refresh that hides the next slowdown. Not confirmed, the fresh pair's figures are
    reported; should they read a regression, it is confirmed like any other (``judge``).
    """
    return _fresh_pairs(session, test_id, measured, name, outcome, options, settings, faster=True)


def _fresh_pairs(session: TfPerfSession, test_id: str, measured: dict[str, Measurement], name: str,
                 outcome: Outcome, options: MarkerOptions, settings: RunSettings, *, faster: bool) -> Outcome:
    """The first look's regression (``faster``: improvement) seen again by each fresh pair, one after the
    other, then judged on all pairs together (``_together``); the first pair that does not read it the same
    way ends the search, and its figures are reported. A regression's fresh pair that could not tell (its
    evidence borderline) looks again beside the same two processes (``_fresh_pair_verdict``): a pair that
    saw too little must not clear a regression; an improvement is not looked at twice."""
    from pytest_tfperf.gates.paired import PAIRS_TO_FAIL, faster_with_confidence

    tolerances = session._tolerances(options)
    what, way = ("improvement", "faster") if faster else ("regression", "slower")
    said_first = "improvement confirmed" if faster else "confirmed"
    first = _said(outcome, f"an {what}" if faster else f"a {what}")  # what this process read
    changes = [_change(outcome)]
    for pair in range(1, PAIRS_TO_FAIL):
        confirmation, why = session._confirm_against(test_id, settings)
        if confirmation is None:
            decided = "the first measurement decided" if pair == 1 else f"the first {_count(pair)} pairs decided"
            outcome.notices.append(f"{test_id}: the {what} could not be measured again in {_fresh(pair)} "
                                   f"({why}); {decided}")
            return _together(outcome, changes, tolerances, test_id, faster=faster)
        if faster:
            again, looked = session._evaluate_against(confirmation[0], confirmation[1], options), ""
            metric = _metric(again)
            same_way = metric is not None and metric.ci_low is not None and faster_with_confidence(metric.ci_low)
        else:
            again, confirmation, looked = _fresh_pair_verdict(session, test_id, confirmation, options, settings)
            same_way = _slower(again, tolerances)
        said = _said(again, "no throughput verdict")
        if same_way:
            changes.append(_change(again))
            outcome.notices.append(f"{test_id}: {said_first} {'in' if pair == 1 else 'again in'} {_fresh(pair)}, "
                                   f"one of each version, taking turns{looked}: {said}")
            continue
        again.notices[:0] = outcome.notices  # what led here (a second look, an earlier pair) stays said
        seen = "" if pair == 1 else f" and {_count(pair - 1)} fresh pair{'s' * (pair > 2)} confirmed it"
        again.notices.append(f"{test_id}: {'improvement ' if faster else ''}not confirmed: this process read "
                             f"{first}{seen}; {_fresh(pair)}, one of each version, taking turns{looked}, did not "
                             f"read it {way} ({said}); the fresh pair's figures are reported")
        measured[name] = confirmation[0]
        return again
    return _together(outcome, changes, tolerances, test_id, faster=faster)


def confirm(session: TfPerfSession, test_id: str, settings: RunSettings, fresh: bool = True
            ) -> tuple[tuple[Measurement, Measurement] | None, str | None]:
    """Measure the test in a fresh process of this tree beside a fresh partner, rounds in turns (ABBA):
    ((ours, theirs), None), or (None, why not). ``fresh=False``: beside the same two processes as the last
    confirmation (its second look)."""
    from pytest_tfperf.against.partner_tree import PartnerError

    base = session.partner()
    if not fresh and session._own_partner is None:
        return None, "no fresh pair to look at again"
    if fresh:
        base.restart()
    if session._own_partner is None:
        own_partner(session)
    elif fresh:
        session._own_partner.restart()
    assert session._own_partner is not None
    # Both processes start at once: their imports and collections overlap instead of following each other.
    session._own_partner.prestart()
    try:  # both set up and warm up at once; nothing is timed before both are ready
        # Under explanations both keep the workload after their result: should the test fail, this pair is
        # profiled as it is (``profile_fresh_pairs``), with no process started for it.
        theirs_run = base.begin(test_id, settings.rounds, settings.budget_s, explain=session.config.explain,
                                wait=False)
        ours_run = session._own_partner.begin(test_id, settings.rounds, settings.budget_s,
                                              explain=session.config.explain, wait=False)
    except PartnerError as exc:
        return None, str(exc)
    why = ours_run.await_ready() or theirs_run.await_ready()
    if why is not None:
        for run in (ours_run, theirs_run):
            try:
                run.finish(False)
            except PartnerError:
                pass
        return None, why
    for index in range(settings.rounds):
        if base.duet_cpu is not None:  # the duet design: both at once, each on its own core
            ours_run.start_round(index)
            theirs_run.start_round(index)
            ours_run.end_round(index)
            theirs_run.end_round(index)
            continue
        for run in ((ours_run, theirs_run) if index % 2 == 0 else (theirs_run, ours_run)):
            run.partner_round(index)
    try:
        ours = ours_run.finish(True)
        theirs = theirs_run.finish(True)
    except PartnerError as exc:
        return None, str(exc)
    return (ours, theirs), None


def own_partner(session: TfPerfSession) -> Partner:
    """This tree's own partner process (a fresh process of the tree under test), started on first use."""
    from pytest_tfperf.against.partner import Partner

    if session._own_partner is None:
        invocation_dir, args = session.invocation
        root = Path(session.rootdir)
        session._own_partner = Partner(str(root), current_root=root, invocation_dir=Path(invocation_dir),
                                       test_args=args, timeout_s=session.config.stall_ceiling_s + 60.0, duet_role=0)
    return session._own_partner


# Pairs of processes, one of each version in each, whose profiles a red --tfperf-against verdict compares
# (``profiling.attribution``'s ``replicates``): the explanation's own pair and ``config.explain_pairs - 1``
# more (5 by default: each group's between-process spread gets four degrees of freedom of its own,
# ``noise.replicate_tests``).
# A pair started only to be profiled measures this many rounds first (the partner protocol's result, which
# then holds the workload for the profiled pass): warmed up as any measurement, nothing judged.
WARM_ROUNDS = 2

RawProfiles = list[tuple[dict[str, Any], dict[str, Any]]]


def profile_fresh_pairs(session: TfPerfSession, test_id: str, settings: RunSettings, iterations: int,
                        timeout_s: float) -> tuple[RawProfiles, list[str]]:
    """Profiles of both versions in ``config.explain_pairs - 1`` more pairs of processes, none of them a process the
    explanation's own pair used (this process and the partner it profiled), so that each pair is an
    independent draw of how two processes differ: [(the baseline's compact profile, this version's)], and a
    line for each pair that could not be had. Every process is started fresh and both of a pair go through the
    same steps. Called only for a red verdict, after the explanation's own pair was profiled."""
    from pytest_tfperf.against.partner_tree import PartnerError

    rootdir = os.path.abspath(session.rootdir)
    base, own = session.partner(), own_partner(session)
    out: RawProfiles = []
    notes: list[str] = []
    for pair in range(2, session.config.explain_pairs + 1):
        # Both processes fresh, started together; each sets up and warms up once both have imported and collected,
        # one after the other, and is then profiled with the other stopped (``Partner.frozen``): the one set up
        # first is stopped from the moment it holds the test through the other's set-up, rounds and pass, and is
        # profiled second. Which version goes first alternates from pair to pair, so that what this order does
        # to a pass (a process stopped for seconds, a pass right after another's) falls on each version alike
        # and reads as spread across the pairs, not as a change. (Always this tree's version first, nothing
        # stopped and the last confirmation's process reused: a default-option pipeline's map stage read faster
        # in this tree's process in 7 of 8 A/A pairs; the same order with the first one stopped: a text
        # pipeline's small stages read 2-5x slower in it, its groups 70 times slower against 35 faster:
        # benchmarks/explain_pair_order_offline.py.)
        first, second = (own, base) if pair % 2 == 0 else (base, own)
        side = {id(own): f"this-{pair}", id(base): f"partner-{pair}"}
        try:
            own.restart()  # never a process profiled already: its pair would not be independent
            own.prestart()
            base.restart()
            base.prestart()
            own.await_started()
            base.await_started()
            held_first = _held(first, test_id, settings)
        except PartnerError as exc:
            notes.append(_not_started(pair, exc))
            break
        with first.frozen():
            try:
                held_second = _held(second, test_id, settings)
            except PartnerError as exc:
                notes.append(_not_started(pair, exc))
                break
            raw_second, why = held_second.profile(rootdir=rootdir, test_id=test_id, side=side[id(second)],
                                                  iterations=iterations, timeout_s=timeout_s)
        raw_first, why_first = None, None
        if raw_second is not None:
            with second.frozen():
                raw_first, why_first = held_first.profile(rootdir=rootdir, test_id=test_id, side=side[id(first)],
                                                          iterations=iterations, timeout_s=timeout_s)
        raw_ours, raw_theirs = (raw_first, raw_second) if first is own else (raw_second, raw_first)
        if raw_theirs is None or raw_ours is None:
            notes.append(f"pair {pair} of processes could not be profiled ({why or why_first}); the groups were "
                         f"tested across {pair - 1}")
            break
        out.append((raw_theirs, raw_ours))
    own.release_held()
    return out, notes


def _not_started(pair: int, why: Exception) -> str:
    return f"pair {pair} of processes could not be started for the profile ({why}); the groups were tested across " \
           f"{pair - 1}"


def _held(partner: Partner, test_id: str, settings: RunSettings) -> PairedRun:
    """``partner`` ready with ``test_id`` and holding it for a profiled pass: WARM_ROUNDS rounds of the usual
    length measured (its warm-up is the measurement's), the result read and dropped."""
    rounds = max(1, min(WARM_ROUNDS, settings.rounds))
    run = partner.begin(test_id, rounds, settings.budget_s * rounds / max(1, settings.rounds), explain=True)
    for index in range(rounds):
        run.partner_round(index)
    run.finish(True)
    return run


def measure_beside(session: TfPerfSession, test_id: str, settings: RunSettings, measure_once: Measure, *,
                   fallback: str, tolerances: Tolerances | None = None) -> Beside:
    """Measure with the partner taking turns: (ours, theirs, None), or what could be had and why not.

    Ours is None when the partner could not even be asked (measure alone
    then); theirs is None when the partner's figures were lost, or when it
    could not measure the test at all (ours were then measured alone). The
    partner sets up and warms up while this session does (``wait=False``).
    """
    from pytest_tfperf.against.partner_tree import PartnerError

    against = session.config.against
    try:
        run = session.partner().begin(test_id, settings.rounds, settings.budget_s, explain=session.config.explain,
                                      wait=False)
    except PartnerError as exc:
        return None, None, f"{test_id}: not measured beside {against}: {exc}; {fallback}"
    completed = False
    theirs: Measurement | None
    try:
        ours_per_s: list[float] = []
        if tolerances is not None:  # the first look may end the rounds early
            run.look(ours_per_s, tolerances)
        ours = measure_once(run.pace, ours_per_s)
        completed = True
    finally:
        try:
            theirs, why = run.finish(completed), None
        except PartnerError as exc:
            theirs, why = None, str(exc)
    if theirs is None and run.never_started:
        return ours, None, f"{test_id}: not measured beside {against}: {why}; {fallback}"
    if theirs is None:
        return ours, None, f"{test_id}: measured beside {against} but its figures were lost ({why}); {fallback}"
    if run.stopped_at is not None:
        return ours, theirs, (f"{test_id}: {run.stopped_at} rounds a side sufficed: the first look already put the "
                              "change within the decision threshold")
    return ours, theirs, None

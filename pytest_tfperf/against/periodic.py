"""The --tfperf-against gate's notice of a cost paid on a few iterations only, confirmed by fresh pairs.

A cost every eighth call, or at an epoch's end, leaves the median iteration
where it was, so the verdict (which compares medians) reads "unchanged", or
"noisy" where such pulls make a pipeline's iteration times vary; each
round's mean time per item sees it (``gates.paired.periodic_cost``). Within
one pair of processes that reading is not enough: two processes of the same
code differ in how often and how long their rare slow iterations are for as
long as they live, and unchanged code read the mean slower 4 times in 360
verdicts (all on a cached pipeline whose epoch ends every eighth batch). So
the notice is given as a regression fails: the first pair reads the mean
slower at ``PERIODIC_ALPHA``, two fresh pairs of processes, one of each tree
in each, read it slower too at the confidence level, and the mean of the
three pairs' estimates lies beyond the decision threshold. The verdict stays
the median's; the fresh pairs are measured only when the first pair reads it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from pytest_tfperf.model import Measurement
from pytest_tfperf.session.outcome import Outcome

if TYPE_CHECKING:
    from pytest_tfperf.gates.verdict import Tolerances

# A fresh pair of processes measured as the first pair was: ((ours, theirs), None), or (None, why not).
Confirm = Callable[[], tuple[tuple[Measurement, Measurement] | None, str | None]]


def periodic_notice(test_id: str, ours: Measurement, theirs: Measurement, outcome: Outcome, tolerances: Tolerances,
                    confirm: Confirm) -> Outcome:
    """``outcome`` with the notice appended to its unchanged throughput verdict when every pair of processes read
    the mean time per item slower (see the module's doc); unchanged otherwise, with a line saying why no notice
    was given once fresh processes were started for it."""
    from pytest_tfperf.gates.paired import (
        PAIRS_TO_FAIL, PERIODIC_ALPHA, mean_change, mean_slower, mean_time_estimate, periodic_note,
    )
    from pytest_tfperf.gates.verdict import Status

    if outcome.verdict is None:
        return outcome
    metric = outcome.verdict.metric("throughput")
    # Beside "noisy" too: a cost on a few pulls of a pipeline makes its pull times vary so much that the median's
    # verdict cannot decide (held-out pipeline set 6: a sequential map after a parallel one, 27% slower at the
    # mean, 9% at the median), and the fresh pairs keep unchanged code from hearing it.
    if metric is None or metric.status not in (Status.UNCHANGED, Status.NOISY):
        return outcome
    first = mean_time_estimate(ours.timings, theirs.timings, PERIODIC_ALPHA)
    if first is None or not mean_slower(first, PERIODIC_ALPHA, tolerances):
        return outcome
    read = f"{test_id}: this pair of processes read the mean time per item {-first.change:.1%} slower"
    changes = [first.change]
    for pair in range(1, PAIRS_TO_FAIL):
        confirmation, why = confirm()
        if confirmation is None:
            outcome.notices.append(f"{read}, but it could not be measured again in fresh processes ({why}); "
                                   "nothing said of it")
            return outcome
        again = mean_time_estimate(confirmation[0].timings, confirmation[1].timings, 1.0 - tolerances.confidence)
        if not mean_slower(again, 1.0 - tolerances.confidence, None):
            seen = "a fresh pair" if pair == 1 else "the second fresh pair"
            reading = ("too few rounds" if again is None
                       else f"mean time per item {-again.change:+.1%}, p = {again.p_slower:.2g}")
            outcome.notices.append(f"{read}; {seen} of processes, one of each version, did not ({reading}): "
                                   "a difference between processes, not a cost on a few iterations; nothing said")
            return outcome
        changes.append(again.change)
    together = mean_change(changes)
    evidence = (f"the mean of {len(changes)} pairs of processes, each read it slower; this pair "
                f"{-first.change:.1%}, p = {first.p_slower:.2g}")
    note = periodic_note(-together, evidence)
    metrics = tuple(dataclasses.replace(m, message=m.message + note) if m is metric else m
                    for m in outcome.verdict.metrics)
    outcome.verdict = dataclasses.replace(outcome.verdict, metrics=metrics)
    return outcome

"""The paired rule: two measurements whose rounds were interleaved in one job (``judge_paired``).

Used for a ``tfperf.compare(..., reference=...)`` variant against its
reference, and for a test against the same test of the other version of the
code (``--tfperf-against``). Pure: no pytest, no TensorFlow, no I/O.

Paired measurements (``judge_paired``)
--------------------------------------
When both sides were measured in one job with their rounds interleaved
(``tfperf.compare`` variants, or this test and its partner session's under
``--tfperf-against``: round ``i`` of each ran side by side), the
machine's state is shared round by round and cancels in the per-round ratio.
``judge_paired`` decides on those ratios with one procedure
(``paired_estimate``): the Hodges-Lehmann estimate of the per-round log
throughput ratios, its robust standard error counted over the rounds' worth
in independent pairs (fewer when rounds move together in spells), and
Student's t bounds and p-values from it. **Regressed** when the one-sided
upper bound lies below zero and the estimated slowdown exceeds ``d``;
improved, noisy (minimum detectable change above the tolerance) and the
re-measure flag as in ``verdict.within_run_throughput``. At least 7 pairs
are needed for any verdict. The two-sample rank test of ``judge``
would throw the pairing away: a drift that moves both sides alike between
rounds hides a slowdown from it. Memory and traces are judged as by
``judge``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_tfperf import stats
from pytest_tfperf.gates.memory import judge_memory
from pytest_tfperf.gates.traces import judge_traces
from pytest_tfperf.gates.verdict import (
    MetricVerdict,
    Status,
    Tolerances,
    Verdict,
    clock_too_coarse,
    detectable_slowdown,
    overall_status,
    percent,
    signed_percent,
    within_run_throughput,
)
from pytest_tfperf.model import Measurement, Timings, format_value, same_environment


def judge_paired(current: Measurement, baseline: Measurement, tolerances: Tolerances, *,
                 against: bool = False) -> Verdict:
    """Compare two measurements whose rounds were interleaved in one job (see "Paired measurements").

    ``current`` and ``baseline`` may be different variants of one test (their
    ids are not compared); they need the same number of rounds, round ``i``
    of one measured next to round ``i`` of the other. ``against``: the
    verdict of a ``--tfperf-against`` look, whose stated limit counts the
    whole procedure (``against_detectable_slowdown``).
    """
    if not same_environment(current.environment_id, baseline.environment_id):
        raise ValueError(
            f"{current.test_id}: refusing to compare measurements from different environments "
            f"(current {current.environment_id}, baseline {baseline.environment_id})"
        )
    n_cur, n_base = len(current.timings.round_sizes), len(baseline.timings.round_sizes)
    if n_cur != n_base:
        raise ValueError(
            f"judge_paired() needs rounds measured side by side, got {n_cur} rounds of {current.test_id!r} and "
            f"{n_base} of {baseline.test_id!r}; measure both in one tfperf.compare() call, or use judge()"
        )
    throughput, borderline = _judge_throughput_paired(current.timings, baseline.timings, tolerances, against)
    metrics = [throughput]
    metrics += judge_memory(current.memory, baseline.memory, tolerances)
    metrics.append(judge_traces(current, baseline, tolerances))
    return Verdict(test_id=current.test_id, metrics=tuple(metrics), status=overall_status(metrics),
                   needs_remeasure=borderline)


def _judge_throughput_paired(current: Timings, baseline: Timings, tol: Tolerances,
                             against: bool) -> tuple[MetricVerdict, bool]:
    pairs = [(stats.median(b), stats.median(c)) for b, c in zip(baseline.rounds, current.rounds) if b and c]
    if any(b <= 0 or c <= 0 for b, c in pairs):
        return clock_too_coarse(), False
    # log(current throughput / baseline throughput), round by round
    logs = [math.log(current.items_per_iteration * b / (baseline.items_per_iteration * c)) for b, c in pairs]
    verdict, borderline = _judge_paired_log_ratios(logs, baseline.throughput_per_s, current.throughput_per_s, tol,
                                                   pairs_are="interleaved rounds", more="measure with more rounds",
                                                   against=against)
    if not against and verdict.status is Status.UNCHANGED:
        note = periodic_cost(current, baseline, tol)
        if note:
            verdict = dataclasses.replace(verdict, message=verdict.message + note)
    return verdict, borderline


# A cost paid on fewer than half of the iterations (every eighth call, an epoch's end) leaves the median iteration,
# which the verdict compares, where it was. Each round's mean time per item sees it; told at this level (one test,
# one-sided), so that unchanged code, whose rare slow iterations fall on both sides alike, hears it at most this
# often. A notice only: the verdict and its error rates stay those of the median (measured, docs/evidence).
# In-test pairs, whose sides share one process, are told at once. Under --tfperf-against two processes differ in
# how often and how long their rare slow iterations are for as long as they live (the rounds cannot show it):
# unchanged code read the mean slower 4 times in 360 verdicts, all on a cached pipeline whose epoch ends every
# eighth batch (benchmarks/results/paired_pipelines_aa_20261128c.md); there the notice waits for two fresh pairs
# of processes to read it too (``against.periodic``), as a regression does.
# Beside an "unchanged" verdict only, the blind spot it is for (the median sure of itself while the mean moved):
# beside "noisy" the rounds already vary too much to decide, and in-test pairs of identical shuffled pipelines got
# a false notice there once in 168 verdicts (benchmarks/results/intest_aa.md; a rule set after that run).
PERIODIC_ALPHA = 0.001


def mean_time_estimate(current: Timings, baseline: Timings, alpha: float) -> PairedEstimate | None:
    """The paired procedure on each round's mean time per item (``periodic_cost``); None with fewer than
    ``MIN_PAIRS`` rounds, or a round whose clock read nothing."""
    means = [(stats.mean(b), stats.mean(c)) for b, c in zip(baseline.rounds, current.rounds) if b and c]
    if len(means) < MIN_PAIRS or any(b <= 0 or c <= 0 for b, c in means):
        return None
    logs = [math.log(current.items_per_iteration * b / (baseline.items_per_iteration * c)) for b, c in means]
    return paired_estimate(logs, alpha)


def mean_slower(e: PairedEstimate | None, alpha: float, tol: Tolerances | None) -> bool:
    """The rounds' mean time per item slower: sure at ``alpha`` and, given ``tol``, beyond its decision threshold
    (a fresh pair that confirms the notice need only read it slower, as for a regression: ``mean_change``)."""
    return (e is not None and e.p_slower <= alpha and e.high < 0.0
            and (tol is None or -e.change > tol.throughput_decision_threshold))


def periodic_note(slower: float, evidence: str) -> str:
    """The words of the notice, appended to an unchanged throughput verdict's message."""
    return (f"; but the mean time per item is {slower:.1%} slower ({evidence}): a cost on a few iterations only "
            "(every few calls, an epoch's end), which the median iteration this verdict compares does not see; "
            "not judged: make one iteration cover the cost's period (items=) to judge it")


def periodic_cost(current: Timings, baseline: Timings, tol: Tolerances) -> str:
    """A notice when each round's mean time per item is slower beyond chance and beyond the decision threshold
    though the verdict (the median iteration) read unchanged; "" otherwise."""
    e = mean_time_estimate(current, baseline, PERIODIC_ALPHA)
    if e is None or not mean_slower(e, PERIODIC_ALPHA, tol):
        return ""
    n = sum(1 for b, c in zip(baseline.rounds, current.rounds) if b and c)  # the rounds the estimate used
    return periodic_note(-e.change, f"{n} interleaved rounds, p = {e.p_slower:.2g}")


def _judge_paired_log_ratios(logs: Sequence[float], base_value: float, cur_value: float, tol: Tolerances, *,
                             pairs_are: str, more: str, against: bool = False) -> tuple[MetricVerdict, bool]:
    """The paired rule on log(current / baseline) throughput ratios, one per pair (rounds or sessions)."""
    e = paired_estimate(logs, 1.0 - tol.confidence)
    n = len(logs)
    limit = against_detectable_slowdown if against else detectable_slowdown
    mde = math.inf if n < MIN_PAIRS else limit(e.standard_error, e.df, tol)
    spells = (f", which move together in spells and weigh as {e.weight:.0f} (lag-1 correlation {e.rho:.2f})"
              if e.weight < n - 0.5 else "")

    def noisy() -> str:
        if n < MIN_PAIRS:
            return f"too noisy to decide: a verdict needs at least {MIN_PAIRS} {pairs_are}, got {n}; {more}"
        moved = (f" (they move together in spells and weigh as {e.weight:.0f} independent pairs, lag-1 correlation "
                 f"{e.rho:.2f})" if spells else "")
        return (f"too noisy to decide: the per-pair ratios vary so much{moved} that only slowdowns of {mde:.1%} "
                f"or more are caught {percent(tol.power)} of the time, more than the {percent(tol.throughput)} "
                f"tolerance; {more}")

    p_slower, p_faster = (e.p_slower, e.p_faster) if n >= MIN_PAIRS else (1.0, 1.0)
    return within_run_throughput(base_value, cur_value, e.change, (e.low, e.high), p_slower, p_faster, mde, tol,
                                 test=f"one-sided test over {n} {pairs_are}{spells}", noisy=noisy,
                                 over=f" over {n} {pairs_are}")


# A verdict needs this many pairs: with fewer, a robust spread and a correlation between neighbours are both
# too unsure to state a detection limit.
MIN_PAIRS = 7
# The lag-1 correlation is estimated from 10-40 pairs; it is used only where it is positive, and capped.
MAX_RHO = 0.8


@dataclass(frozen=True)
class PairedEstimate:
    """One estimate, its standard error, the one-sided bounds and p-values that come from them."""

    change: float  # Hodges-Lehmann estimate of the per-pair log ratio, as a relative change
    low: float  # one-sided lower bound at the level asked, as a relative change
    high: float
    p_slower: float
    p_faster: float
    standard_error: float  # of the log-ratio estimate
    df: float
    rho: float  # the pairs' lag-1 rank correlation, clipped to [0, MAX_RHO]
    weight: float  # independent pairs they are worth: n (1 - rho) / (1 + rho)


def paired_estimate(logs: Sequence[float], alpha: float) -> PairedEstimate:
    """The paired procedure on per-pair log ratios.

    Estimate: the Hodges-Lehmann estimate (median of the Walsh averages), robust to the one-sided slow spells
    a shared machine deals out. Its standard error: a robust spread (1.4826 x MAD) times sqrt(pi / 3n), the
    Hodges-Lehmann estimate's efficiency, with n replaced by the pairs' worth when rounds move together:
    measured here, a loaded machine's spells last several rounds (tf.data's autotuner and the scheduler change
    state for seconds), and an exact rank test that takes 20 such rounds as 20 independent ones says 99% sure
    of a change that is not there. Bounds and p-values: Student's t with weight - 1 degrees of freedom, so
    that an upper bound below zero and ``p_slower <= alpha`` are the same statement.
    """
    n = len(logs)
    walsh = sorted((logs[i] + logs[j]) / 2.0 for i in range(n) for j in range(i, n))
    hl = stats.median(walsh) if walsh else 0.0
    rho = min(MAX_RHO, max(0.0, _lag1_rank_correlation(logs)))
    weight = n * (1.0 - rho) / (1.0 + rho)
    spread = 1.4826 * stats.mad(logs) if n else 0.0
    if spread == 0.0 and n > 1:
        spread = stats.stdev(logs)  # more than half the pairs alike: the spread of the rest
    se = spread * math.sqrt(math.pi / 3.0 / max(weight, 1.0))
    df = max(weight - 1.0, 1.0)
    if se == 0.0:
        p_slower = 0.0 if hl < 0 else 1.0
        return PairedEstimate(math.expm1(hl), math.expm1(hl), math.expm1(hl), p_slower, 1.0 - p_slower if hl > 0
                              else 1.0, 0.0, df, rho, weight)
    t = stats.t_quantile(1.0 - alpha, df)
    p_slower = stats.t_cdf(hl / se, df)
    return PairedEstimate(math.expm1(hl), math.expm1(hl - t * se), math.expm1(hl + t * se), p_slower,
                          1.0 - p_slower, se, df, rho, weight)


def _lag1_rank_correlation(values: Sequence[float]) -> float:
    """Spearman's correlation of each value with the next (0 for fewer than 4, or all alike): ranks, so that
    one slow round does not make a spell; tied values share their mean rank."""
    n = len(values)
    if n < 4:
        return 0.0
    order = sorted(range(n), key=lambda i: values[i])
    ranks = [0.0] * n
    i = 0
    while i < n:
        j = i
        while j + 1 < n and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0
        i = j + 1
    x, y = ranks[:-1], ranks[1:]
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else 0.0


# A ``--tfperf-against`` regression fails only when this many independent pairs of processes read it: the
# first pair and two fresh ones (``against.plan``). One look at the nominal one-sided 1% says "slower" on
# unchanged code 1.4% to 9.7% of the time when its rounds move in spells (benchmarks/paired_calibration.py),
# and a pair of processes can sit a few percent apart for its whole life; with two pairs a false alarm was
# measured at about 1 in 440 A/A verdicts. Three pairs take the product of the looks' rates to the gate's
# 1 in 1,000 even at the worst rate simulated (9.7% cubed: 9 in 10,000). Always three: a look's own estimate
# of its spells cannot pick out the risky looks (the same benchmark: those that estimate none err most).
PAIRS_TO_FAIL = 3


# A pair of processes errs beyond its rounds' own error: two processes of the same code keep part of their
# speed for as long as they live (thread placement, memory layout, the buffer sizes tf.data's autotuner
# chose), so every round of one pair shares an offset that no count of rounds averages away. Measured on the
# 2-core VM (benchmarks/paired_between_pairs.py, on the first fresh pairs of 40 planted --tfperf-against
# verdicts): their estimates scatter around the planted change 1.5 times as far as their own standard errors
# say, and adding 0.02 (log scale, about 2%) to each pair's error in quadrature explains the scatter.
BETWEEN_PAIRS = 0.02


def against_detectable_slowdown(standard_error: float, df: float, tol: Tolerances) -> float:
    """The slowdown (fraction of throughput lost) that ``--tfperf-against``'s whole procedure catches
    ``tol.power`` of the time (``against.plan``):

    - the first pair reads a regression: sure at the confidence level and beyond the decision threshold;
    - each of the ``PAIRS_TO_FAIL - 1`` fresh pairs reads it slower, sure at the confidence level;
    - the mean of the ``PAIRS_TO_FAIL`` pairs' estimates lies beyond the decision threshold.

    Every pair is taken to have this verdict's standard error (its rounds' own) plus ``BETWEEN_PAIRS`` (the
    pair's own offset); the looks are taken as independent, which errs on the safe side (the first pair's
    reading and the mean move together). Normal theory; Student's t for the significance part.
    """
    if math.isinf(standard_error) or math.isnan(standard_error):
        return math.inf
    alpha = 1.0 - tol.confidence
    threshold = -math.log1p(-tol.throughput_decision_threshold)
    critical = stats.t_quantile(1.0 - alpha, df) * standard_error
    spread = math.hypot(standard_error, BETWEEN_PAIRS)

    def caught(slowdown: float) -> float:  # probability that all looks read it, at this log slowdown
        first = 1.0 - stats.normal_sf((slowdown - max(threshold, critical)) / spread)
        fresh = (1.0 - stats.normal_sf((slowdown - critical) / spread)) ** (PAIRS_TO_FAIL - 1)
        together = 1.0 - stats.normal_sf((slowdown - threshold) / (spread / math.sqrt(PAIRS_TO_FAIL)))
        return first * fresh * together

    low, high = 0.0, max(threshold, critical) + 10.0 * spread
    for _ in range(60):  # bisection: the probability rises with the slowdown
        mid = (low + high) / 2.0
        low, high = (mid, high) if caught(mid) < tol.power else (low, mid)
    return -math.expm1(-high)


def slower_with_confidence(change_high: float, p_slower: float, tol: Tolerances) -> bool:
    """A fresh pair's reading that confirms a regression: its upper bound below zero, at the confidence level.
    How much slower is decided on all pairs together (``mean_change``), not by each pair alone: one pair's
    offset can move its estimate by a few percent either way."""
    return change_high < 0.0 and p_slower <= 1.0 - tol.confidence


def faster_with_confidence(change_low: float) -> bool:
    """A fresh pair's reading that confirms an improvement: its lower bound above zero (the bound is one-sided
    at the confidence level, so the test agrees). How much faster is decided on all pairs together."""
    return change_low > 0.0


def mean_change(changes: Sequence[float]) -> float:
    """The pairs' estimates together: the mean of their log changes, as a relative change. Unweighted: each
    pair's own offset, not its rounds' count, dominates its error."""
    return math.expm1(sum(math.log1p(c) for c in changes) / len(changes))


def within_threshold_together(verdict: Verdict, changes: Sequence[float], tol: Tolerances, *,
                              faster: bool = False) -> Verdict:
    """A ``--tfperf-against`` regression (``faster``: improvement) that every pair of processes read slower
    (faster), but whose pairs together (``mean_change``) lie within the decision threshold (the tolerance):
    the verdict with its throughput unchanged, saying so. The together figure has no interval of its own (each
    pair's offset dominates it), so none is given."""
    together = mean_change(changes)
    each = ", ".join(signed_percent(c) for c in changes)
    bound, what = (tol.throughput, "tolerance") if faster else (tol.throughput_decision_threshold, "decision threshold")
    tolerance = "" if faster else f" (tolerance {percent(tol.throughput)})"
    metrics = []
    for m in verdict.metrics:
        if m.metric == "throughput" and m.baseline_value is not None:
            now = m.baseline_value * (1.0 + together)
            m = dataclasses.replace(
                m, status=Status.UNCHANGED, relative_change=together, ci_low=None, ci_high=None, current_value=now,
                p_value=None,
                message=(f"throughput: {format_value(m.baseline_value, m.unit)} -> {format_value(now, m.unit)} "
                         f"({signed_percent(together)}, the mean of {len(changes)} pairs of processes): each pair read "
                         f"it {'faster' if faster else 'slower'} ({each}), but together they lie within the "
                         f"{bound:.1%} {what}{tolerance}"))
        metrics.append(m)
    return dataclasses.replace(verdict, metrics=tuple(metrics), status=overall_status(metrics))


# The first look of a paired verdict (``against.plan``): rounds end early when the change is already
# surely smaller than the decision threshold, either way.
FIRST_LOOK_ROUNDS = 10


def clearly_within(current_per_s: Sequence[float], baseline_per_s: Sequence[float], tol: Tolerances) -> bool:
    """True when the rounds so far (each side's throughput per round, round ``i`` beside round ``i``) already
    put the change above the decision threshold (no regression) and below the tolerance (no improvement), at
    the confidence level.

    Stopping then can only turn a regressed verdict into an unchanged one, never the reverse, so it adds no
    false alarm; it loses a slowdown of the tolerance or more only when that slowdown's lower bound came out
    above the threshold, which a one-sided bound at 99% does at most 1% of the time. (A group-sequential
    design with a futility look; no error is spent on it.)
    """
    logs = [math.log(c / b) for c, b in zip(current_per_s, baseline_per_s) if c > 0 and b > 0]
    if len(logs) < FIRST_LOOK_ROUNDS:
        return False
    e = paired_estimate(logs, 1.0 - tol.confidence)
    # The verdict it ends with must still state a smallest catchable change within the tolerance.
    mde = against_detectable_slowdown(e.standard_error, e.df, tol)
    d = tol.throughput_decision_threshold
    return -d < e.low and e.high < tol.throughput and mde <= tol.throughput  # no regression nor improvement to come

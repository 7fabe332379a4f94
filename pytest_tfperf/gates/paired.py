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
``judge_paired`` decides on those ratios: the estimate is the Hodges-Lehmann
estimate of the per-round log throughput ratios; **regressed** when Wilcoxon's
one-sided signed-rank test on them says slower at the confidence level **and**
the estimated slowdown exceeds ``d``; improved, noisy (minimum detectable
change above the tolerance) and the re-measure flag as above, the interval
being the signed-rank (Walsh average) interval. A rank test, because the
host's half-speed spells last a second or so and hit one side's round and not
the other's: a t-test's spread would swell with them. At least 7 rounds are
needed at 99% (the smallest possible p is 2**-rounds). The two-sample rank
test of ``judge`` would throw the pairing away: a drift that moves both sides
alike between rounds hides a slowdown from it. Memory and traces are judged
as by ``judge``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pytest_tfperf import rank_tests, stats
from pytest_tfperf.gates.memory import judge_memory
from pytest_tfperf.gates.traces import judge_traces
from pytest_tfperf.gates.verdict import (
    MetricVerdict,
    Tolerances,
    Verdict,
    clock_too_coarse,
    detectable_slowdown,
    overall_status,
    percent,
    within_run_throughput,
)
from pytest_tfperf.model import Measurement, Timings, same_environment


def judge_paired(current: Measurement, baseline: Measurement, tolerances: Tolerances) -> Verdict:
    """Compare two measurements whose rounds were interleaved in one job (see "Paired measurements").

    ``current`` and ``baseline`` may be different variants of one test (their
    ids are not compared); they need the same number of rounds, round ``i``
    of one measured next to round ``i`` of the other.
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
    throughput, borderline = _judge_throughput_paired(current.timings, baseline.timings, tolerances)
    metrics = [throughput]
    metrics += judge_memory(current.memory, baseline.memory, tolerances)
    metrics.append(judge_traces(current, baseline, tolerances))
    return Verdict(test_id=current.test_id, metrics=tuple(metrics), status=overall_status(metrics),
                   needs_remeasure=borderline)


def _judge_throughput_paired(current: Timings, baseline: Timings, tol: Tolerances) -> tuple[MetricVerdict, bool]:
    pairs = [(stats.median(b), stats.median(c)) for b, c in zip(baseline.rounds, current.rounds) if b and c]
    if any(b <= 0 or c <= 0 for b, c in pairs):
        return clock_too_coarse(), False
    # log(current throughput / baseline throughput), round by round
    logs = [math.log(current.items_per_iteration * b / (baseline.items_per_iteration * c)) for b, c in pairs]
    return _judge_paired_log_ratios(logs, baseline.throughput_per_s, current.throughput_per_s, tol,
                                    pairs_are="interleaved rounds", more="measure with more rounds")


def _judge_paired_log_ratios(logs: Sequence[float], base_value: float, cur_value: float, tol: Tolerances, *,
                             pairs_are: str, more: str) -> tuple[MetricVerdict, bool]:
    """The paired rule on log(current / baseline) throughput ratios, one per pair (rounds or sessions)."""
    n = len(logs)
    alpha = 1.0 - tol.confidence
    walsh = sorted((logs[i] + logs[j]) / 2.0 for i in range(n) for j in range(i, n))
    change = math.expm1(stats.median(walsh))  # Hodges-Lehmann estimate of the per-pair log ratio
    counts = rank_tests.signed_rank_null_counts(n)
    p_slower = rank_tests.signed_rank_p(logs, counts)
    p_faster = rank_tests.signed_rank_p([-v for v in logs], counts)
    # Bounds: the Walsh averages at the one-sided test's critical ranks, so that an upper bound below zero and
    # p_slower <= alpha are the same statement (within_run_throughput).
    k = rank_tests.signed_rank_critical(counts, alpha)
    ci_low, ci_high = math.expm1(walsh[k]), math.expm1(walsh[len(walsh) - 1 - k])
    if rank_tests.signed_rank_smallest_p(n) > alpha:
        mde = math.inf
    else:
        # Normal theory with a robust spread; the signed-rank test's efficiency is 3/pi of the t-test's.
        mde = detectable_slowdown(stats.mad(logs) * 1.4826 * math.sqrt(math.pi / 3.0 / n), float(n - 1), tol)

    def noisy() -> str:
        if math.isinf(mde):
            return (f"too noisy to decide: with {n} {pairs_are} no signed-rank test can reach "
                    f"{percent(tol.confidence)} confidence (smallest possible p = "
                    f"{rank_tests.signed_rank_smallest_p(n):.2g}); measure at least "
                    f"{rank_tests.fewest_samples(alpha, rank_tests.signed_rank_smallest_p)} {pairs_are}")
        return (f"too noisy to decide: the per-pair ratios vary so much that only slowdowns of {mde:.1%} or more "
                f"are caught {percent(tol.power)} of the time, more than the {percent(tol.throughput)} tolerance; "
                f"{more}")

    return within_run_throughput(base_value, cur_value, change, (ci_low, ci_high), p_slower, p_faster, mde, tol,
                                 test=f"one-sided signed-rank test over {n} {pairs_are}", noisy=noisy,
                                 over=f" over {n} {pairs_are}")


# The first look of a paired verdict (``session.against``): rounds end early when the change is already
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
    n = len(logs)
    alpha = 1.0 - tol.confidence
    if n < FIRST_LOOK_ROUNDS or rank_tests.signed_rank_smallest_p(n) > alpha:
        return False
    walsh = sorted((logs[i] + logs[j]) / 2.0 for i in range(n) for j in range(i, n))
    k = rank_tests.signed_rank_critical(rank_tests.signed_rank_null_counts(n), alpha)
    low, high = math.expm1(walsh[k]), math.expm1(walsh[len(walsh) - 1 - k])
    d = tol.throughput_decision_threshold
    # The verdict it ends with must still state a smallest catchable change within the tolerance.
    mde = detectable_slowdown(stats.mad(logs) * 1.4826 * math.sqrt(math.pi / 3.0 / n), float(n - 1), tol)
    return -d < low and high < tol.throughput and mde <= tol.throughput

"""The regression decision: one measurement against its stored baseline, metric by metric.

Pure: no pytest, no TensorFlow, no I/O. ``judge`` (and ``judge_paired``) return a frozen ``Verdict``;
formatting returns strings and never prints.

Throughput (the noisy metric)
-----------------------------
``tolerance`` (``Tolerances.throughput``, default 10%) is the slowdown the gate
is built to catch. A rule that fails exactly at the tolerance would catch a
slowdown of exactly the tolerance only about half of the time, so the gate
decides at the *decision threshold* ``d = tolerance / 2`` (5% by default: the
midpoint between "no change" and "a change of the full tolerance", which
balances false alarms against misses):

* The point estimate is the ratio of throughputs computed from the medians of
  all iterations of each side (the figure the report shows).
* **regressed** when the current rounds are slower than the baseline rounds at
  the confidence level (default 99%: one-sided Mann-Whitney U test on the
  per-round median throughputs, p <= 0.01) **and** the estimated slowdown exceeds
  ``d``.
* **improved** when the current rounds are faster at the confidence level and
  the estimated speed-up exceeds the full tolerance (a notice to refresh the
  baseline, never a failure).
* **noisy** otherwise, when the rounds vary so much that this comparison could
  miss a slowdown of the full tolerance: its minimum detectable change (the
  slowdown caught with probability ``Tolerances.power``, default 95%, by this
  rule) exceeds the tolerance. The verdict reports that figure instead of
  passing silently.
* **unchanged** otherwise.
* ``needs_remeasure`` is set when the confidence interval of the change
  (block bootstrap over rounds, at the confidence level) straddles ``d``: the
  evidence is borderline either way. The caller then measures once more, pools
  the two measurements (``pool``) and judges the pooled one; that second
  verdict is final.

Why rounds, not iterations: iterations of one round share the same slow or fast
episode (TensorFlow's thread-pool stalls last longer than an iteration), so a
test over thousands of iterations treats correlated values as independent and
alarms on between-run differences. The rank test works on one value per round,
is exact for the usual handful of rounds, and is unmoved by a single half-speed
round. With few rounds it cannot reach the confidence level at all (5 rounds
per side are needed at 99%); the verdict then says so and reports "noisy".

What a stored baseline cannot see: the rank test knows the variation between
rounds of each run, not between runs. On this project's shared 2-core VMs a
2-thread workload's speed moves between runs far beyond the threshold, with no
other process running (spells in which the host lets the VM have about one
core's worth halve it for seconds; unchanged code judged against its stored
baseline measured -27% to +67%, 5th to 95th percentile), so a run compared
with one stored run alarms whenever the two caught different states of the
machine. ``benchmarks/validation_study.py`` measures this; see
``benchmarks/results/validation.md``. The plugin's answer is to measure the
other version of the code beside this one (``--tfperf-against``, module
``partner``) and judge the pair with ``judge_paired``.

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

Memory and traces (near-deterministic metrics)
----------------------------------------------
* Peak memory regresses when ``current - baseline`` exceeds the allowed band
  ``max(relative * baseline, floor, spread)``. ``spread`` is 1.5 times the
  larger round-to-round range of the per-round peaks of either side, after
  removing a linear trend: interleaved tf.data and Keras threads move the TF
  allocator's peak by a few MiB, the range of 5 rounds covers about two thirds
  of such jitter's full span (hence 1.5), and a steady leak is a trend, which
  must not widen the band meant to catch it.
  Defaults: TF allocator 2% with a 1 MiB floor; RSS and NVML 10% with a 16 MiB
  floor. A decrease beyond the band is "improved". When the spread alone makes
  the band wider than ``noisy_cap`` (10%) of the baseline, an unchanged result
  is reported "noisy".
* Steady-state ``tf.function`` traces: when the baseline had none, an exact
  count (any trace is a regression). Otherwise a count in the unit the harness
  saw (``_judge_traces``): it may grow with the rounds or the iterations, so the
  baseline's count is scaled to this run by the larger ratio of the two, and
  the stored gate confirms a regression in a fresh process, as for throughput.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from pytest_tfperf import stats, stored_rule
from pytest_tfperf.config import DEFAULT_RUNS
from pytest_tfperf.runs import BaselineRuns, summarize
from pytest_tfperf.model import TRACE_COUNTING_UNITS, Direction, Measurement, MemoryPeak, MemorySource, Timings
from pytest_tfperf.verdict import (  # noqa: F401 - re-exported: compare is where callers find the verdict types
    MIB,
    MetricVerdict,
    Status,
    Tolerances,
    Verdict,
    _fmt,
    _overall,
    _pct,
    _share,
    _signed_mib,
    _unavailable,
    slowdown_text,
    slowdowns_caught,
)

# ---------------------------------------------------------------------------
# judge


def judge(current: Measurement, baseline: Measurement, tolerances: Tolerances, *,
          runs: BaselineRuns | None = None, confirmation: Measurement | None = None) -> Verdict:
    """The stored-baseline gate: ``current`` against ``baseline`` and its runs, metric by metric.

    ``runs`` are the baseline's runs (each from its own process) and recorded
    history; without them ``baseline`` counts as a single run, which is too
    few to judge throughput (see ``stored_rule``). ``confirmation`` is the
    same test measured in a fresh process after a first verdict with
    ``needs_confirmation``: a throughput or memory regression stands only if
    both processes show it.
    """
    _check_same_test(current, baseline)
    if confirmation is not None:
        _check_same_test(confirmation, baseline)
    if runs is None or not runs.runs:
        runs = BaselineRuns(runs=(summarize(baseline, run_id="baseline", recorded_at=""),))
    metrics = [_judge_stored_throughput(current, confirmation, runs, tolerances)]
    metrics += _judge_memory(current.memory, baseline.memory, tolerances, runs=runs,
                             confirmation=None if confirmation is None else confirmation.memory)
    metrics.append(_judge_traces(current, baseline, tolerances, confirmation=confirmation))
    confirmable = [m for m in metrics if m.status is Status.REGRESSED and needs_confirmation(m)]
    return Verdict(
        test_id=current.test_id,
        metrics=tuple(metrics),
        status=_overall(metrics),
        needs_remeasure=False,
        needs_confirmation=confirmation is None and bool(confirmable),
        confirmed=confirmation is not None,
    )


def needs_confirmation(m: MetricVerdict) -> bool:
    """Whether a stored-gate regression of this metric must show in a fresh process too before it fails.

    Throughput and memory move between processes; so does a trace count that is a rate (a baseline
    that retraced in its steady state too). An exact count of 0 does not: any new trace fails at once.
    """
    if m.metric == "traces_steady":
        return (m.baseline_value or 0.0) > 0
    return True


def judge_rounds(current: Measurement, baseline: Measurement, tolerances: Tolerances, *, seed: int = 0) -> Verdict:
    """Two single runs compared on their rounds (``tfperf-compare OLD NEW``): the within-run rule.

    It knows how much rounds vary inside each run, not how much whole
    processes differ, so on a noisy machine it alarms on unchanged code
    (``benchmarks/results/validation.md``); the gate uses ``judge`` with a
    baseline's runs instead.
    """
    _check_same_test(current, baseline)
    throughput, borderline = _judge_throughput(current.timings, baseline.timings, tolerances, seed)
    metrics = [throughput]
    metrics += _judge_memory(current.memory, baseline.memory, tolerances)
    metrics.append(_judge_traces(current, baseline, tolerances))
    return Verdict(
        test_id=current.test_id,
        metrics=tuple(metrics),
        status=_overall(metrics),
        needs_remeasure=borderline,
    )


def _check_same_test(current: Measurement, baseline: Measurement) -> None:
    if current.test_id != baseline.test_id:
        raise ValueError(
            f"judge() compares a test with its own baseline, got current {current.test_id!r} "
            f"and baseline {baseline.test_id!r}"
        )
    if current.environment_id and baseline.environment_id and current.environment_id != baseline.environment_id:
        raise ValueError(
            f"{current.test_id}: refusing to compare measurements from different environments "
            f"(current {current.environment_id}, baseline {baseline.environment_id}); "
            "look up the baseline recorded for the current environment fingerprint instead"
        )


def judge_paired(current: Measurement, baseline: Measurement, tolerances: Tolerances) -> Verdict:
    """Compare two measurements whose rounds were interleaved in one job (see "Paired measurements").

    ``current`` and ``baseline`` may be different variants of one test (their
    ids are not compared); they need the same number of rounds, round ``i``
    of one measured next to round ``i`` of the other.
    """
    if current.environment_id and baseline.environment_id and current.environment_id != baseline.environment_id:
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
    metrics += _judge_memory(current.memory, baseline.memory, tolerances)
    metrics.append(_judge_traces(current, baseline, tolerances))
    return Verdict(test_id=current.test_id, metrics=tuple(metrics), status=_overall(metrics),
                   needs_remeasure=borderline)



# -- throughput -------------------------------------------------------------


def _throughput_status(p_slower: float, p_faster: float, change: float, ci: tuple[float, float], mde: float,
                       tol: Tolerances) -> tuple[Status, bool]:
    """The rule both gates share: significant and past half the tolerance; borderline when the CI straddles it."""
    alpha = 1.0 - tol.confidence
    d = tol.throughput_decision_threshold
    if p_slower <= alpha and -change > d:
        status = Status.REGRESSED
    elif p_faster <= alpha and change > tol.throughput:
        status = Status.IMPROVED
    elif mde > tol.throughput:
        status = Status.NOISY
    else:
        status = Status.UNCHANGED
    return status, -ci[1] < d < -ci[0]


def _throughput_verdict(base_value: float, cur_value: float, change: float, ci: tuple[float, float],
                        status: Status, mde: float, message: str, tol: Tolerances,
                        p_slower: float) -> MetricVerdict:
    """The throughput verdict of either gate (stored or paired): same fields, same threshold."""
    return MetricVerdict(
        metric="throughput",
        unit="items/s",
        direction=Direction.HIGHER_IS_BETTER,
        baseline_value=base_value,
        current_value=cur_value,
        relative_change=change,
        ci_low=ci[0],
        ci_high=ci[1],
        status=status,
        minimum_detectable_change=mde,
        message=message,
        confidence=tol.confidence,
        p_value=p_slower,
        decision_threshold=-tol.throughput_decision_threshold,
    )


def _judge_throughput(current: Timings, baseline: Timings, tol: Tolerances, seed: int) -> tuple[MetricVerdict, bool]:
    name, unit = "throughput", "items/s"
    base_rounds = [r for r in baseline.rounds if r]
    cur_rounds = [r for r in current.rounds if r]
    base_medians = [stats.median(r) for r in base_rounds]
    cur_medians = [stats.median(r) for r in cur_rounds]
    if min(base_medians + cur_medians) <= 0:
        msg = (f"{name}: not compared: a round's median iteration time is 0 ns, so the clock is too coarse "
               "for this workload; give each iteration more work")
        return _unavailable(name, unit, Direction.HIGHER_IS_BETTER, msg), False

    base_value = baseline.throughput_per_s
    cur_value = current.throughput_per_s
    items_ratio = current.items_per_iteration / baseline.items_per_iteration
    interval = stats.bootstrap_median_ratio(
        base_rounds, cur_rounds, confidence=tol.confidence, resamples=tol.bootstrap_resamples, seed=seed
    )
    ratio = items_ratio * interval.estimate  # current throughput / baseline throughput
    change = ratio - 1.0
    ci_low = items_ratio * interval.low - 1.0
    ci_high = items_ratio * interval.high - 1.0

    base_log = [math.log(baseline.items_per_iteration * 1e9 / m) for m in base_medians]
    cur_log = [math.log(current.items_per_iteration * 1e9 / m) for m in cur_medians]
    slower = stats.mann_whitney_greater(base_log, cur_log)
    faster = stats.mann_whitney_greater(cur_log, base_log)
    alpha = 1.0 - tol.confidence
    d = tol.throughput_decision_threshold

    se, df = stats.welch_standard_error(stats.stdev(base_log), len(base_log), stats.stdev(cur_log), len(cur_log))
    if slower.min_p_value > alpha:
        mde = math.inf
    else:
        mde_log = stats.minimum_detectable_effect(se, alpha=alpha, power=tol.power, df=df, threshold=-math.log1p(-d))
        mde = -math.expm1(-mde_log)  # as a fraction of throughput lost

    status, borderline = _throughput_status(slower.p_value, faster.p_value, change, (ci_low, ci_high), mde, tol)

    conf = _share(tol.confidence)
    head = (f"{name}: {_fmt(base_value, unit)} -> {_fmt(cur_value, unit)} ({_pct(change)}, "
            f"{conf} CI {_pct(ci_low)} to {_pct(ci_high)})")
    test = (f"one-sided rank test over {len(base_log)} baseline vs {len(cur_log)} current rounds")
    noisy = ("too noisy to decide: " + _noise_reason(slower, alpha, mde, base_log, cur_log, tol)
             if status is Status.NOISY else "")
    body = _throughput_sentence(status, change, mde, tol, test, slower.p_value, faster.p_value, noisy)
    verdict = _throughput_verdict(base_value, cur_value, change, (ci_low, ci_high), status, mde,
                                  f"{head}: {body}", tol, slower.p_value)
    return verdict, borderline


def _throughput_sentence(status: Status, change: float, mde: float, tol: Tolerances, test: str,
                         p_slower: float, p_faster: float, noisy: str) -> str:
    """The verdict's sentence, worded alike for the stored and the paired rule; ``noisy`` is the rule's own."""
    d, conf, tolerance = tol.throughput_decision_threshold, _share(tol.confidence), _share(tol.throughput)
    if status is Status.REGRESSED:
        return (f"slower than the baseline by {-change:.1%}, beyond the {d:.1%} decision threshold "
                f"(tolerance {tolerance}), with {conf} confidence ({test}: p = {p_slower:.2g})")
    if status is Status.IMPROVED:
        return (f"faster than the baseline by {change:.1%}, beyond the {tolerance} tolerance, "
                f"with {conf} confidence ({test}: p = {p_faster:.2g})")
    if status is Status.NOISY:
        return noisy
    return (f"unchanged within the {d:.1%} decision threshold (tolerance {tolerance}; "
            f"{test}: p = {p_slower:.2g}); this comparison catches slowdowns of {mde:.1%} or more")


def _judge_stored_throughput(current: Measurement, confirmation: Measurement | None, runs: BaselineRuns,
                             tol: Tolerances) -> MetricVerdict:
    """Throughput against the prediction bound of the baseline's runs (``stored_rule``)."""
    name, unit = "throughput", "items/s"
    values = [current.throughput_per_s] + ([] if confirmation is None else [confirmation.throughput_per_s])
    base = runs.throughputs()
    if not base or min(values) <= 0 or not all(math.isfinite(v) for v in values):
        return _unavailable(name, unit, Direction.HIGHER_IS_BETTER,
                            f"{name}: not compared: the baseline or this run has no positive throughput")
    own, spread = stored_rule.applied_spread(base, runs.history_throughputs(), runs.machine)
    d = tol.throughput_decision_threshold
    confidence = tol.stored_throughput_confidence
    call = stored_rule.judge_throughput(spread, values, confidence=confidence, threshold=d,
                                        tolerance=tol.throughput)
    base_value = math.exp(spread.level)
    cur_value = math.exp(math.fsum(math.log(v) for v in values) / len(values))
    n, k = spread.n_runs, spread.n_history
    behind = f"{n} baseline run{'s' if n != 1 else ''}" + (f" and {k} recorded run{'s' if k != 1 else ''}" if k else "")
    common = dict(metric=name, unit=unit, direction=Direction.HIGHER_IS_BETTER, baseline_value=base_value,
                  current_value=cur_value, relative_change=call.change, confidence=confidence,
                  decision_threshold=-d, baseline_runs=n, history_runs=k)
    if call.status == "unknown":
        message = (f"{name}: {_fmt(base_value, unit)} -> {_fmt(cur_value, unit)} ({_pct(call.change)}): not judged: "
                   f"the baseline has {behind} of this environment, and the gate needs at least "
                   f"{stored_rule.MIN_RUNS} runs, each in its own process, to learn how far this machine's speed "
                   f"moves between processes (one process cannot tell a slow process from a slowdown); refresh "
                   f"it with `pytest --tfperf --tfperf-update` (it measures {DEFAULT_RUNS} runs) or "
                   "record runs on the main branch with --tfperf-record")
        return MetricVerdict(**common, ci_low=None, ci_high=None, status=Status.NOISY,  # type: ignore[arg-type]
                             minimum_detectable_change=math.inf, message=message)
    conf = _share(confidence)
    per_run = [math.expm1(math.log(v) - spread.level) for v in values]
    head = (f"{name}: {_fmt(base_value, unit)} -> {_fmt(cur_value, unit)} ({_pct(call.change)}, "
            f"{conf} CI {_pct(call.ci_low)} to {_pct(call.ci_high)})")
    if spread.sd > own.sd:
        whose = ("its calibration workload" if runs.machine.source == "calibration" else "this suite's tests typically")
        varies = (f"the baseline's runs vary by {math.expm1(own.sd):.1%} between processes ({behind}); this "
                  f"machine's by {math.expm1(spread.sd):.1%} ({whose}, {spread.df:.0f} degrees of freedom), the "
                  "spread assumed")
    else:
        varies = f"the baseline's runs vary by {math.expm1(spread.sd):.1%} between processes ({behind})"
    spread_text = f"{varies}, so its {conf} prediction bound for a new run lies {call.bound_change:.1%} below its level"
    limit_text = f"against this baseline, {slowdowns_caught(call.detection_limit)} are caught here"
    if call.detection_limit > tol.throughput:
        limit_text += (f", wider than the {_share(tol.throughput)} tolerance: for finer changes on this machine, "
                       "measure the other version beside this one with --tfperf-against=origin/main")
    if call.status == "regressed":
        status = Status.REGRESSED
        if confirmation is None:
            seen = f"this process ran {-per_run[0]:.1%} slower than the baseline, below its bound"
        else:
            seen = (f"this process ran {-per_run[0]:.1%} and a fresh process {-per_run[1]:.1%} slower than the "
                    "baseline, both below its bound")
        body = (f"slower than the baseline: {seen}; {spread_text} (p = {call.p_value:.2g}), and the change is beyond "
                f"the {d:.1%} decision threshold; {limit_text}")
    elif call.status == "improved":
        status = Status.IMPROVED
        body = (f"faster than the baseline by {call.change:.1%}, above its {conf} prediction bound and beyond the "
                f"{_share(tol.throughput)} tolerance; {spread_text}")
    else:
        status = Status.UNCHANGED
        if confirmation is not None and len(per_run) == 2:
            body = (f"not confirmed: this process ran {_pct(per_run[0])} against the baseline, but a fresh process "
                    f"ran {_pct(per_run[1])}; {spread_text}; {limit_text}")
        else:
            body = f"unchanged: within the bound; {spread_text}; {limit_text}"
    return MetricVerdict(**common, ci_low=call.ci_low, ci_high=call.ci_high, status=status,  # type: ignore[arg-type]
                         minimum_detectable_change=call.detection_limit, message=f"{head}: {body}",
                         p_value=call.p_value)


def _judge_throughput_paired(current: Timings, baseline: Timings, tol: Tolerances) -> tuple[MetricVerdict, bool]:
    name, unit = "throughput", "items/s"
    pairs = [(stats.median(b), stats.median(c)) for b, c in zip(baseline.rounds, current.rounds) if b and c]
    if any(b <= 0 or c <= 0 for b, c in pairs):
        msg = (f"{name}: not compared: a round's median iteration time is 0 ns, so the clock is too coarse "
               "for this workload; give each iteration more work")
        return _unavailable(name, unit, Direction.HIGHER_IS_BETTER, msg), False
    # log(current throughput / baseline throughput), round by round
    logs = [math.log(current.items_per_iteration * b / (baseline.items_per_iteration * c)) for b, c in pairs]
    return _judge_paired_log_ratios(logs, baseline.throughput_per_s, current.throughput_per_s, tol,
                                    pairs_are="interleaved rounds", more="measure with more rounds")


def _judge_paired_log_ratios(logs: Sequence[float], base_value: float, cur_value: float, tol: Tolerances, *,
                             pairs_are: str, more: str) -> tuple[MetricVerdict, bool]:
    """The paired rule on log(current / baseline) throughput ratios, one per pair (rounds or sessions)."""
    name, unit = "throughput", "items/s"
    n = len(logs)
    alpha = 1.0 - tol.confidence
    d = tol.throughput_decision_threshold
    walsh = sorted((logs[i] + logs[j]) / 2.0 for i in range(n) for j in range(i, n))
    change = math.expm1(stats.median(walsh))  # Hodges-Lehmann estimate of the per-pair log ratio
    counts = _signed_rank_null_counts(n)
    p_slower = _signed_rank_p(logs, counts)
    p_faster = _signed_rank_p([-v for v in logs], counts)
    # Interval: Walsh averages between the signed-rank test's critical ranks.
    k = _signed_rank_critical(counts, (1.0 - tol.confidence) / 2.0)
    ci_low, ci_high = math.expm1(walsh[k]), math.expm1(walsh[len(walsh) - 1 - k])
    if 1.0 / 2**n > alpha:
        mde = math.inf
    else:
        # Normal theory with a robust spread; the signed-rank test's efficiency is 3/pi of the t-test's.
        se = stats.mad(logs) * 1.4826 * math.sqrt(math.pi / 3.0 / n)
        mde_log = stats.minimum_detectable_effect(se, alpha=alpha, power=tol.power, df=float(n - 1),
                                                  threshold=-math.log1p(-d))
        mde = -math.expm1(-mde_log)

    status, borderline = _throughput_status(p_slower, p_faster, change, (ci_low, ci_high), mde, tol)

    conf = _share(tol.confidence)
    head = (f"{name}: {_fmt(base_value, unit)} -> {_fmt(cur_value, unit)} ({_pct(change)} over {n} {pairs_are}, "
            f"{conf} CI {_pct(ci_low)} to {_pct(ci_high)})")
    test = f"one-sided signed-rank test over {n} {pairs_are}"
    if status is Status.NOISY and math.isinf(mde):
        noisy = (f"too noisy to decide: with {n} {pairs_are} no signed-rank test can reach {conf} "
                 f"confidence (smallest possible p = {1.0 / 2**n:.2g}); measure at least "
                 f"{_paired_rounds_needed(alpha)} {pairs_are}")
    else:
        noisy = (f"too noisy to decide: the per-pair ratios vary so much that only slowdowns of {mde:.1%} or more "
                 f"are caught {_share(tol.power)} of the time, more than the {_share(tol.throughput)} tolerance; "
                 f"{more}")
    body = _throughput_sentence(status, change, mde, tol, test, p_slower, p_faster, noisy)
    verdict = _throughput_verdict(base_value, cur_value, change, (ci_low, ci_high), status, mde,
                                  f"{head}: {body}", tol, p_slower)
    return verdict, borderline


def _signed_rank_null_counts(n: int) -> list[int]:
    """Number of sign patterns of ranks 1..n whose positive ranks sum to 0, 1, ..., n(n+1)/2."""
    counts = [1] + [0] * (n * (n + 1) // 2)
    for rank in range(1, n + 1):
        for total in range(len(counts) - 1, rank - 1, -1):
            counts[total] += counts[total - rank]
    return counts


def _signed_rank_p(values: Sequence[float], counts: Sequence[int]) -> float:
    """Exact one-sided p of Wilcoxon's signed-rank test, alternative: the values tend to be negative.

    Ties in absolute value get their average rank (the p-value is then
    approximate); exact zeros count half on each side.
    """
    n = len(values)
    order = sorted(range(n), key=lambda i: abs(values[i]))
    ranks = [0.0] * n
    i = 0
    while i < n:
        j = i
        while j + 1 < n and abs(values[order[j + 1]]) == abs(values[order[i]]):
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    positive = sum(r for r, v in zip(ranks, values) if v > 0) + sum(r / 2.0 for r, v in zip(ranks, values) if v == 0)
    at_most = math.floor(positive + 1e-9)
    return sum(counts[: at_most + 1]) / 2**n


def _signed_rank_critical(counts: Sequence[int], tail: float) -> int:
    """Largest k with P(W < k) <= tail: the 0-based index of the interval's lower Walsh average."""
    total = sum(counts)
    k, below = 0, 0
    while k < len(counts) and (below + counts[k]) / total <= tail:
        below += counts[k]
        k += 1
    return k


def _paired_rounds_needed(alpha: float) -> int:
    n = 1
    while 1.0 / 2**n > alpha:
        n += 1
    return n


def _noise_reason(slower: stats.RankTest, alpha: float, mde: float, base_log: Sequence[float],
                  cur_log: Sequence[float], tol: Tolerances) -> str:
    if slower.min_p_value > alpha:
        needed = _rounds_needed(alpha)
        return (f"with {slower.n_x} baseline and {slower.n_y} current rounds no rank test can reach "
                f"{_share(tol.confidence)} confidence (smallest possible p = {slower.min_p_value:.2g}); "
                f"measure at least {needed} rounds on each side")
    base_cv = _log_spread(base_log)
    cur_cv = _log_spread(cur_log)
    return (f"the rounds vary by {base_cv:.1%} (baseline) and {cur_cv:.1%} (current), so only slowdowns of "
            f"{mde:.1%} or more are caught {_share(tol.power)} of the time, more than the {_share(tol.throughput)} "
            "tolerance; measure on a quieter machine, with longer rounds, or with more rounds")


def _rounds_needed(alpha: float) -> int:
    n = 1
    while 1.0 / math.comb(2 * n, n) > alpha:
        n += 1
    return n


def _log_spread(values: Sequence[float]) -> float:
    return math.expm1(stats.stdev(values)) if len(values) > 1 else math.nan


# -- memory -----------------------------------------------------------------


def _judge_memory(current: Sequence[MemoryPeak], baseline: Sequence[MemoryPeak],
                  tol: Tolerances, *, runs: BaselineRuns | None = None,
                  confirmation: Sequence[MemoryPeak] | None = None) -> list[MetricVerdict]:
    out: list[MetricVerdict] = []
    keys: list[tuple[MemorySource, str]] = []
    for peak in list(baseline) + list(current):
        if (peak.source, peak.device) not in keys:
            keys.append((peak.source, peak.device))
    for source, device in keys:
        base = _find(baseline, source, device)
        cur = _find(current, source, device)
        name = (base or cur).metric_name  # type: ignore[union-attr]
        if base is None or cur is None:
            side = "baseline" if base is None else "current measurement"
            msg = f"{name}: not compared: the {side} has no {source.value} figure for {device}"
            out.append(_unavailable(name, "bytes", Direction.LOWER_IS_BETTER, msg))
        elif base.peak_bytes is None or cur.peak_bytes is None:
            why = base.unavailable if base.peak_bytes is None else cur.unavailable
            side = "baseline" if base.peak_bytes is None else "current measurement"
            msg = f"{name}: not compared: unavailable in the {side} ({why})"
            out.append(_unavailable(name, "bytes", Direction.LOWER_IS_BETTER, msg))
        else:
            again = None if confirmation is None else _find(confirmation, source, device)
            out.append(_judge_one_memory(name, base, cur, tol, runs=runs,
                                         confirmation=again if again is not None and again.available else None))
    return out


def _find(peaks: Sequence[MemoryPeak], source: MemorySource, device: str) -> MemoryPeak | None:
    for p in peaks:
        if p.source is source and p.device == device:
            return p
    return None


# The range of n uniform draws covers (n - 1) / (n + 1) of their span: 2/3 for 5 rounds.
_SPREAD_MARGIN = 1.5


def _judge_one_memory(name: str, base: MemoryPeak, cur: MemoryPeak, tol: Tolerances, *,
                      runs: BaselineRuns | None = None, confirmation: MemoryPeak | None = None) -> MetricVerdict:
    assert base.peak_bytes is not None and cur.peak_bytes is not None
    rel, floor = tol.memory_band(base.source)
    # The workload's own peak: what each round added above the memory in use
    # when it began, so leftovers of earlier tests or of an interleaved
    # variant do not move it.
    stored = runs.memory(name) if runs is not None else []
    between_runs, base_band = _memory_band(name, runs, tol, fallback=float(base.added_bytes or 0))
    base_b = base_band.level
    cur_b = float(cur.added_bytes or 0)
    configured, between = base_band.configured, base_band.between
    spread = _SPREAD_MARGIN * max(round_spread_bytes(base.per_round_added_bytes),
                                  round_spread_bytes(cur.per_round_added_bytes))
    allowed = max(base_band.half, spread)
    delta = cur_b - base_b
    again = None if confirmation is None else float(confirmation.added_bytes or 0) - base_b
    change = delta / base_b if base_b > 0 else None
    mdc = allowed / base_b if base_b > 0 else None
    noise_limited = base_b > 0 and max(spread, between) > configured and max(spread, between) > tol.noisy_cap * base_b
    if delta > allowed and (again is None or again > allowed):
        status = Status.REGRESSED
    elif -delta > allowed:
        status = Status.IMPROVED
    elif noise_limited:
        status = Status.NOISY
    else:
        status = Status.UNCHANGED

    pct = f"{_pct(change)}, " if change is not None else ""
    head = f"{name}: {_fmt(base_b, 'bytes')} -> {_fmt(cur_b, 'bytes')} ({pct}{_signed_mib(delta)})"
    if between_runs.known:
        runs_part = (f", {_share(tol.confidence)} bound over {between_runs.n_runs} runs in separate processes = "
                     f"{_fmt(between, 'bytes')}")
    elif stored:
        runs_part = f"; between-process spread unknown: {len(stored)} run(s), {stored_rule.MIN_RUNS} needed"
    else:
        runs_part = ""
    band = (f"allowed {_signed_mib(allowed)} = max({_share(rel)} of baseline, floor {_fmt(floor, 'bytes')}, "
            f"1.5 x round-to-round spread = {_fmt(spread, 'bytes')}{runs_part})")
    if status is Status.REGRESSED:
        seen = "" if again is None else f" (a fresh process added {_signed_mib(again)}: confirmed)"
        body = f"more memory than the baseline beyond the band{seen}: {band}; peaks are measured, not estimated"
    elif status is Status.IMPROVED:
        body = f"less memory than the baseline beyond the band: {band}"
    elif status is Status.NOISY:
        body = (f"too noisy to decide: the per-round peaks vary so much that only changes "
                f"beyond {_signed_mib(allowed)} are caught; {band}")
    elif again is not None and delta > allowed:
        body = f"not confirmed: a fresh process added {_signed_mib(again)}, within the band: {band}"
    else:
        body = f"unchanged: {band}"
    return MetricVerdict(
        baseline_runs=len(stored) or None,
        metric=name,
        unit="bytes",
        direction=Direction.LOWER_IS_BETTER,
        baseline_value=base_b,
        current_value=cur_b,
        relative_change=change,
        ci_low=None,
        ci_high=None,
        status=status,
        minimum_detectable_change=mdc,
        message=f"{head}: {body}",
        decision_threshold=mdc,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class BaselineBand:
    """Where the stored gate lets a new run of unchanged code land for one metric, from the baseline alone:
    ``level +/- half``. Memory's gate also widens the band by the rounds' spread of the run it judges."""

    level: float
    half: float
    configured: float = 0.0  # memory: the configured tolerance's part (relative, floor)
    between: float = 0.0  # memory: the bound over the baseline's runs

    @property
    def low(self) -> float:
        return self.level - self.half

    @property
    def high(self) -> float:
        return self.level + self.half


def _memory_band(name: str, runs: BaselineRuns | None, tol: Tolerances, *,
                 fallback: float = 0.0) -> tuple[stored_rule.RunSpread, BaselineBand]:
    stored = runs.memory(name) if runs is not None else []
    between_runs = stored_rule.run_spread([float(v) for v in stored],
                                          [float(v) for v in runs.history_memory(name)] if runs is not None else [])
    level = between_runs.level if stored else fallback
    source = next((s for s in MemorySource if name.startswith(f"peak_{s.value}[")), MemorySource.RSS_HWM)
    rel, floor = tol.memory_band(source)
    configured = max(rel * level, float(floor))
    # Processes differ more than one process's rounds do (the executor's op order, allocator state): the
    # prediction bound over the baseline's runs, when there are enough of them to estimate it.
    between = between_runs.prediction_half_width(tol.confidence) if between_runs.known else 0.0
    return between_runs, BaselineBand(level, max(configured, between), configured, between)


def baseline_bands(runs: BaselineRuns, tol: Tolerances) -> dict[str, tuple[float, float, float]]:
    """(low, level, high) per metric as history.csv names it (``throughput_per_s``, ``added_peak_...``): the
    bound the stored gate applies to a new run, from the same functions ``judge`` uses, so the HTML report
    draws the bound that judged (throughput in items/s, memory in bytes)."""
    out: dict[str, tuple[float, float, float]] = {}
    band = stored_rule.throughput_band(runs.throughputs(), runs.history_throughputs(), runs.machine,
                                       confidence=tol.stored_throughput_confidence)
    if band is not None:
        out["throughput_per_s"] = band
    names = dict.fromkeys(name for r in runs.runs for name, _ in r.memory_added_bytes)
    for name in names:
        between, memory = _memory_band(name, runs, tol)
        if between.known:
            out[f"added_{name}"] = (memory.low, memory.level, memory.high)
    return out


def round_spread_bytes(per_round: Sequence[int]) -> float:
    """Range of per-round peaks after removing a least-squares linear trend.

    The trend is removed because a leak makes later rounds peak higher: that is
    the signal, not noise, and must not widen the band that should catch it.
    """
    k = len(per_round)
    if k < 2:
        return 0.0
    if k == 2:
        return float(abs(per_round[1] - per_round[0]))
    fit = stats.linear_fit(list(range(k)), [float(v) for v in per_round])
    residuals = [v - fit.predict(i) for i, v in enumerate(per_round)]
    return max(residuals) - min(residuals)


# -- traces -----------------------------------------------------------------


def trace_scale(baseline: Measurement, current: Measurement) -> tuple[float, float]:
    """(lowest, highest) factor by which ``current``'s steady trace count may differ from ``baseline``'s unchanged.

    What a count grows with depends on the workload and on how the harness counted it
    (``model.TRACE_COUNTING_UNITS``): per process, per round or per iteration, or a mix of them.
    Any mix of those, with any weights, scales by a factor between the smallest and the largest of the
    units' own ratios, so a change of budget or rounds alone never leaves that range.
    """
    ratios = {"process": 1.0}
    base_rounds, cur_rounds = len(baseline.timings.round_sizes), len(current.timings.round_sizes)
    if base_rounds > 0:
        ratios["round"] = cur_rounds / base_rounds
    base_iterations = baseline.timings.iterations_measured
    if base_iterations > 0:
        ratios["iteration"] = current.timings.iterations_measured / base_iterations
    units = set(TRACE_COUNTING_UNITS.get(baseline.trace_counting, ("process",)))
    units |= set(TRACE_COUNTING_UNITS.get(current.trace_counting, ("process",)))
    factors = [ratios[u] for u in units if u in ratios]
    return min(factors), max(factors)


def _counted_over(m: Measurement) -> str:
    rounds, iterations = len(m.timings.round_sizes), m.timings.iterations_measured
    return (f"{m.traces_steady} in {rounds} round{'s' if rounds != 1 else ''} of "
            f"{iterations} iteration{'s' if iterations != 1 else ''}")


def _judge_traces(current: Measurement, baseline: Measurement, tol: Tolerances, *,
                  confirmation: Measurement | None = None) -> MetricVerdict:
    """Steady-state traces: an exact count when the baseline had none, else a count in the unit the harness saw.

    The harness finds tf.functions between rounds (``model.TRACES_BETWEEN_ROUNDS``), so a workload that
    retraces in its steady state counts once a round (a model recompiled on every call), once an
    iteration (a function retraced on new Python values) or a fixed number of times, and a run that
    measures other rounds or iterations than the baseline's counts differently with unchanged code. The
    baseline's count is scaled to this run by the largest ratio of those units (``trace_scale``): more
    than that is more retracing whatever the unit. Such a rate, like throughput, moves between processes,
    so ``confirmation`` (the same test in a fresh process) must exceed its own expectation too.
    """
    name, unit = "traces_steady", "traces"
    cur, base = current.traces_steady, baseline.traces_steady
    if cur is None or base is None:
        side = "baseline" if base is None else "current measurement"
        msg = f"{name}: not compared: the {side} has no tf.function trace count"
        return _unavailable(name, unit, Direction.LOWER_IS_BETTER, msg)
    if base == 0:
        # An exact count: any trace after warm-up is new retracing, whatever the budget.
        delta = cur - tol.traces_steady_increase
        head = f"{name}: 0 -> {cur} tf.function traces after warm-up"
        if delta > 0:
            status = Status.REGRESSED
            body = ("more retracing than the baseline (exact count; "
                    + ("any increase fails" if tol.traces_steady_increase == 0
                       else f"allowed increase {tol.traces_steady_increase}")
                    + "): a tf.function is traced again in the steady state, usually because of Python scalars "
                      "or changing shapes in its arguments")
        else:
            status, body = Status.UNCHANGED, "unchanged"
        return _trace_verdict(status, 0.0, float(cur), None, f"{head}: {body}")

    def expected(run: Measurement) -> tuple[float, float, float]:
        low, high = trace_scale(baseline, run)
        # Rounding slack of 1% of the rate, and the configured allowance.
        return base * low, base * high, tol.traces_steady_increase + 0.01 * base * high

    low, high, slack = expected(current)
    countings = sorted({baseline.trace_counting, current.trace_counting})
    grows = [f"the {u}s" for u in ("round", "iteration")
             if any(u in TRACE_COUNTING_UNITS.get(c, ()) for c in countings)]
    how = (f"counted {' and '.join(c.replace('_', ' ') for c in countings)}, a count grows with "
           f"{' or '.join(grows) or 'nothing'}")
    head = (f"{name}: {base} -> {cur} tf.function traces after warm-up (baseline {_counted_over(baseline)}, "
            f"this run {_counted_over(current)}; {how}, so unchanged code counts {_count_range(low, high)} here)")
    again = ""
    more = cur - high > slack
    if more and confirmation is not None and confirmation.traces_steady is not None:
        c_low, c_high, c_slack = expected(confirmation)
        confirmed = confirmation.traces_steady - c_high > c_slack
        again = (f"a fresh process counted {_counted_over(confirmation)}, where unchanged code counts "
                 f"{_count_range(c_low, c_high)}")
        more = confirmed
        if not confirmed:
            return _trace_verdict(Status.UNCHANGED, high, float(cur), (cur - high) / high,
                                  f"{head}: not confirmed: {again}")
    if more:
        seen = f" ({again}: confirmed)" if again else ""
        status, body = Status.REGRESSED, (
            f"more retracing than the baseline, per round and per iteration alike{seen}: a tf.function is traced "
            "again more often in the steady state, usually because of Python scalars or changing shapes in its "
            "arguments, or a model compiled again")
    elif low - cur > tol.traces_steady_increase + 0.01 * base * low:
        status, body = Status.IMPROVED, "fewer traces than the baseline, per round and per iteration alike"
    else:
        status, body = Status.UNCHANGED, "unchanged"
    return _trace_verdict(status, high, float(cur), (cur - high) / high, f"{head}: {body}")


def _count_range(low: float, high: float) -> str:
    return f"{high:.1f}" if math.isclose(low, high) else f"{low:.1f} to {high:.1f}"


def _trace_verdict(status: Status, expected: float, current: float, change: float | None,
                   message: str) -> MetricVerdict:
    return MetricVerdict(
        metric="traces_steady",
        unit="traces",
        direction=Direction.LOWER_IS_BETTER,
        baseline_value=expected,  # the most this run may count with unchanged code (0: an exact count)
        current_value=current,
        relative_change=change,
        ci_low=None,
        ci_high=None,
        status=status,
        minimum_detectable_change=None,
        message=message,
    )


# ---------------------------------------------------------------------------
# pool


def pool(a: Measurement, b: Measurement) -> Measurement:
    """Merge two measurements of the same test (the confirmation re-measure) by concatenating rounds.

    Timings: rounds of ``a`` then ``b``; the first call is ``a``'s (the cold
    one). Memory: per (source, device) the larger peak and both rounds' peaks;
    a figure missing on one side is taken from the other. Traces: the larger
    steady-state counts added up, as the rounds and iterations are (a count that grows with either stays
    in proportion; a retrace in either is a retrace). Diagnoses: ``a``'s,
    then ``b``'s new ones. Extra metrics: ``a``'s, then names only ``b`` has.
    """
    if a.test_id != b.test_id:
        raise ValueError(f"pool() merges two measurements of one test, got {a.test_id!r} and {b.test_id!r}")
    if a.mode != b.mode:
        raise ValueError(f"{a.test_id}: cannot pool a {a.mode!r} measurement with a {b.mode!r} one")
    if a.timings.items_per_iteration != b.timings.items_per_iteration:
        raise ValueError(
            f"{a.test_id}: cannot pool measurements with {a.timings.items_per_iteration} and "
            f"{b.timings.items_per_iteration} items per iteration"
        )
    if a.environment_id and b.environment_id and a.environment_id != b.environment_id:
        raise ValueError(f"{a.test_id}: cannot pool measurements from different environments")
    timings = Timings(
        samples_ns=a.timings.samples_ns + b.timings.samples_ns,
        round_sizes=a.timings.round_sizes + b.timings.round_sizes,
        items_per_iteration=a.timings.items_per_iteration,
        first_call_ns=a.timings.first_call_ns,
        measured_iterations=(a.timings.iterations_measured + b.timings.iterations_measured
                             if a.timings.measured_iterations or b.timings.measured_iterations else 0),
    )
    if a.trace_counting != b.trace_counting:
        raise ValueError(f"{a.test_id}: cannot pool traces counted {a.trace_counting!r} and {b.trace_counting!r}")
    memory: list[MemoryPeak] = []
    for peak in a.memory:
        memory.append(_pool_peak(peak, _find(b.memory, peak.source, peak.device)))
    for peak in b.memory:
        if _find(a.memory, peak.source, peak.device) is None:
            memory.append(peak)
    # Diagnoses and derived metrics describe a whole measurement: the later one
    # stands for the pair (its figures are the freshest), the earlier fills gaps.
    from pytest_tfperf import gpu_busy

    later_kinds = {d.kind for d in b.diagnoses}
    later_extras = {name for name, _ in b.extra_metrics}
    return Measurement(
        test_id=a.test_id,
        mode=a.mode,
        timings=timings,
        memory=tuple(memory),
        traces_first_call=a.traces_first_call if a.traces_first_call is not None else b.traces_first_call,
        traces_steady=_sum_optional(a.traces_steady, b.traces_steady),
        diagnoses=b.diagnoses + tuple(d for d in a.diagnoses if d.kind not in later_kinds),
        extra_metrics=b.extra_metrics + tuple((k, v) for k, v in a.extra_metrics if k not in later_extras),
        environment_id=a.environment_id or b.environment_id,
        gpu_busy=gpu_busy.pool(a.gpu_busy, b.gpu_busy),
        trace_counting=a.trace_counting,
    )


def _pool_peak(a: MemoryPeak, b: MemoryPeak | None) -> MemoryPeak:
    if b is None or b.peak_bytes is None:
        return a
    if a.peak_bytes is None:
        return b
    return MemoryPeak(
        source=a.source,
        device=a.device,
        peak_bytes=max(a.peak_bytes, b.peak_bytes),
        baseline_bytes=a.baseline_bytes,
        per_round_peak_bytes=a.per_round_peak_bytes + b.per_round_peak_bytes,
        per_round_start_bytes=(a.per_round_start_bytes + b.per_round_start_bytes
                               if a.per_round_start_bytes and b.per_round_start_bytes else ()),
        scope=a.scope if a.scope == b.scope else "", detail=a.detail,
    )


def _sum_optional(x: int | None, y: int | None) -> int | None:
    if x is None:
        return y
    if y is None:
        return x
    return x + y

"""The within-run rule: two single runs compared on their rounds (``judge_rounds``, for ``tfperf-compare``).

Pure: no pytest, no TensorFlow, no I/O; returns a frozen ``Verdict``. Memory
and traces are judged as by every gate (``memory``, ``traces``).

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
    check_same_test,
    clock_too_coarse,
    detectable_slowdown,
    overall_status,
    percent,
    within_run_throughput,
)
from pytest_tfperf.model import Measurement, Timings


def judge_rounds(current: Measurement, baseline: Measurement, tolerances: Tolerances, *, seed: int = 0) -> Verdict:
    """Two single runs compared on their rounds (``tfperf-compare OLD NEW``): the within-run rule.

    It knows how much rounds vary inside each run, not how much whole
    processes differ, so on a noisy machine it alarms on unchanged code
    (``benchmarks/results/validation.md``); the gate uses ``judge`` with a
    baseline's runs instead.
    """
    check_same_test(current, baseline)
    throughput, borderline = _judge_throughput(current.timings, baseline.timings, tolerances, seed)
    metrics = [throughput]
    metrics += judge_memory(current.memory, baseline.memory, tolerances)
    metrics.append(judge_traces(current, baseline, tolerances))
    return Verdict(
        test_id=current.test_id,
        metrics=tuple(metrics),
        status=overall_status(metrics),
        needs_remeasure=borderline,
    )


def _judge_throughput(current: Timings, baseline: Timings, tol: Tolerances, seed: int) -> tuple[MetricVerdict, bool]:
    base_rounds = [r for r in baseline.rounds if r]
    cur_rounds = [r for r in current.rounds if r]
    base_medians = [stats.median(r) for r in base_rounds]
    cur_medians = [stats.median(r) for r in cur_rounds]
    if min(base_medians + cur_medians) <= 0:
        return clock_too_coarse(), False

    base_value = baseline.throughput_per_s
    cur_value = current.throughput_per_s
    items_ratio = current.items_per_iteration / baseline.items_per_iteration
    interval = stats.bootstrap_median_ratio(
        base_rounds, cur_rounds, confidence=2.0 * tol.confidence - 1.0, resamples=tol.bootstrap_resamples, seed=seed
    )
    ratio = items_ratio * interval.estimate  # current throughput / baseline throughput
    change = ratio - 1.0
    ci_low = items_ratio * interval.low - 1.0
    ci_high = items_ratio * interval.high - 1.0

    base_log = [math.log(baseline.items_per_iteration * 1e9 / m) for m in base_medians]
    cur_log = [math.log(current.items_per_iteration * 1e9 / m) for m in cur_medians]
    slower = rank_tests.mann_whitney_greater(base_log, cur_log)
    faster = rank_tests.mann_whitney_greater(cur_log, base_log)
    alpha = 1.0 - tol.confidence

    se, df = stats.welch_standard_error(stats.stdev(base_log), len(base_log), stats.stdev(cur_log), len(cur_log))
    mde = math.inf if slower.min_p_value > alpha else detectable_slowdown(se, df, tol)
    return within_run_throughput(
        base_value, cur_value, change, (ci_low, ci_high), slower.p_value, faster.p_value, mde, tol,
        test=f"one-sided rank test over {len(base_log)} baseline vs {len(cur_log)} current rounds",
        noisy=lambda: "too noisy to decide: " + _noise_reason(slower, alpha, mde, base_log, cur_log, tol))


def _noise_reason(slower: rank_tests.RankTest, alpha: float, mde: float, base_log: Sequence[float],
                  cur_log: Sequence[float], tol: Tolerances) -> str:
    if slower.min_p_value > alpha:
        needed = rank_tests.fewest_samples(alpha, rank_tests.rank_sum_smallest_p)
        return (f"with {slower.n_x} baseline and {slower.n_y} current rounds no rank test can reach "
                f"{percent(tol.confidence)} confidence (smallest possible p = {slower.min_p_value:.2g}); "
                f"measure at least {needed} rounds on each side")
    base_cv = _variation(base_log)
    cur_cv = _variation(cur_log)
    return (f"the rounds vary by {base_cv:.1%} (baseline) and {cur_cv:.1%} (current), so only slowdowns of "
            f"{mde:.1%} or more are caught {percent(tol.power)} of the time, more than the {percent(tol.throughput)} "
            "tolerance; measure on a quieter machine, with longer rounds, or with more rounds")


def _variation(logs: Sequence[float]) -> float:
    """How much values vary, as a fraction, from the standard deviation of their logs (nan: fewer than 2)."""
    return math.expm1(stats.stdev(logs)) if len(logs) > 1 else math.nan

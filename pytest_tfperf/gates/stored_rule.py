"""The stored-baseline rule: is this run outside what the baseline's runs predict for a new process?

Pure: no pytest, no TensorFlow, no I/O. ``gates.stored.judge`` calls it for
throughput and for memory when the baseline holds several runs.

Why a prediction bound over runs
--------------------------------
What varies between a stored baseline and a CI run is the *process*: on the
project's 2-core VM whole processes ran up to 1.35x slower than others
started seconds apart (``benchmarks/process_noise.py``), and a Keras step's
TF-allocator peak moved ~10% between processes, while the rounds inside one
process agreed within a few percent. A rule fed one process's rounds cannot
see that spread, which is why comparing against one stored run alarmed in 22%
of unchanged runs here (``benchmarks/results/validation.md``). So a baseline
holds ``n`` runs, each from its own process, and the rule asks whether a new
run falls outside the interval in which a new process's figure is expected:

* Throughput is compared in logs, ``y = ln(items/s of a run's median
  iteration)``: speed changes multiply, and a half-speed process is as far
  below as a double-speed one is above.
* Level: the mean of the baseline's ``n`` runs. Spread ``s``: pooled from the
  baseline runs' deviations from their mean (``n - 1`` degrees of freedom) and,
  when CI on the main branch records runs (``--tfperf-record``), from the
  successive differences of the newest recorded runs (von Neumann's mean
  square successive difference: a level shift between two recorded runs, an
  accepted change, inflates one difference instead of every deviation from a
  mean; its efficiency is ``2 (k-1) / (3k-4)`` of a plain variance, and the
  degrees of freedom are counted at that rate).
* One-sided 99% prediction bound for one new run (Student t, as Bencher's
  t-test limit): ``level - t(0.99, df) * s * sqrt(1 + 1/n)``.
* **Regressed** when the run lies below the bound *and* is slower than the
  decision threshold (half the tolerance: 5% by default) - and then only
  once a second run, in a fresh process, lies below the bound too
  (``needs_confirmation``; the session measures it). One process can be slow
  for its whole life; two independent ones rarely are: if each crosses with
  probability 1%, both do with 0.01%, and a 25-test suite stays green by
  chance in 99.75% of CI runs rather than 78%. A real slowdown beyond the
  detection limit crosses in both.
* **Improved** when the run lies above the mirrored bound and is faster than
  the tolerance (a notice to refresh, never a failure).
* Every verdict states its **detection limit**: the slowdown caught with 95%
  probability by this two-process rule, ``1 - exp(-(b + t(q, df) * s *
  sqrt(1 + 1/n)))`` where ``b`` is the larger of the bound's half-width and the
  decision threshold and ``q = sqrt(0.95)`` (each of the two runs must cross).
  On a quiet GPU machine (6 processes within 1.3%) that is a few percent; on a
  noisy shared CPU runner it can be 30% or more, and the verdict says so and
  points to ``--tfperf-against``, which measures the other version beside this
  one instead. A slowdown beyond the limit still fails.
* Fewer than 3 runs (2 degrees of freedom) cannot estimate a spread (``t`` at
  1 degree of freedom is 31.8): the verdict says how many runs there are and
  judges no throughput change rather than guess. A version-1 baseline file
  has one run.

How many runs
-------------
A refresh measures ``DEFAULT_RUNS`` = 7 processes. Fewer runs mean fewer degrees of freedom: a wider
``t`` (3.75 at 4, 3.14 at 6) and a spread estimate that more often happens to come out small. On the
2-core validation VM, the same 52 processes judged with 5-run baselines gave 1 false alarm in 1,150
A/A verdicts, a median stated limit of 4.1x and 2x caught 13 of 46; with 7-run baselines, 0 in 1,100,
3.3x and 23 of 44 (``benchmarks/stored_gate_study.py --baseline-runs``). 50 processes collected after
that choice agreed: 0 false alarms in 1,050 with 7 runs, 3x caught 120 of 126 (94 of 132 with 5).
A refresh takes ``runs`` times one run; a CI run that does not regress costs the same whatever
``runs`` is.

Memory uses the same bound on bytes (peaks are not multiplicative): the band
is the largest of the configured tolerance (2% / 1 MiB for the TF allocator,
10% / 16 MiB for RSS and NVML), 1.5 times the round-to-round spread, and the
bound's half-width over the baseline's runs; a regression, too, must be seen
again in the fresh process. Traces stay exact counts.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_tfperf import stats

MIN_RUNS = 3  # runs (or degrees of freedom + 1) below which no spread is estimated
HISTORY_WINDOW = 30  # newest recorded runs used for the spread
MACHINE_QUANTILE = 0.75  # of the suite's per-test spreads: the floor of every test's spread
MIN_TESTS_FOR_MACHINE = 5  # tests with enough runs before the suite says anything about the machine
CONFIRM_POWER = math.sqrt(0.95)  # each of two runs must cross for the rule to catch a change 95% of the time


def log_spread(throughputs: Sequence[float]) -> float:
    """One test's between-process spread: the standard deviation of its runs' log throughputs (nan: < 3 runs)."""
    logs = [math.log(v) for v in throughputs if v > 0]
    return stats.stdev(logs) if len(logs) >= MIN_RUNS else math.nan


@functools.lru_cache(maxsize=512)
def _t(p: float, df: float) -> float:
    # Student t quantiles by series are the costly part of a verdict; a suite asks for few distinct ones.
    return stats.t_quantile(p, df)


@dataclass(frozen=True, slots=True)
class RunSpread:
    """A figure's level over the baseline runs and how much single runs scatter around it."""

    level: float
    n_runs: int  # baseline runs behind the level
    n_history: int  # recorded runs that sharpened the spread
    sd: float  # nan when it cannot be estimated
    df: float  # degrees of freedom of sd (0: none)

    @property
    def known(self) -> bool:
        return self.df >= MIN_RUNS - 1 and math.isfinite(self.sd)

    def prediction_half_width(self, confidence: float) -> float:
        """How far below (or above) the level a new run may land at ``confidence``, one-sided."""
        if not self.known:
            return math.inf
        return _t(confidence, self.df) * self.sd * math.sqrt(1.0 + 1.0 / self.n_runs)

    def detection_limit(self, confidence: float, threshold: float, power: float = CONFIRM_POWER) -> float:
        """Shift (in the figure's units) that both runs of the confirmed rule cross with probability ``power**2``."""
        if not self.known:
            return math.inf
        se = self.sd * math.sqrt(1.0 + 1.0 / self.n_runs)
        return max(self.prediction_half_width(confidence), threshold) + _t(power, self.df) * se


def run_spread(baseline: Sequence[float], history: Sequence[float] = ()) -> RunSpread:
    """Level of ``baseline`` and the spread of single runs, pooled with ``history``'s successive differences.

    ``history`` is oldest first; only its newest ``HISTORY_WINDOW`` values are used. The caller
    raises the spread to the machine's (``machine_spread``) where that is larger.
    """
    n = len(baseline)
    if n == 0:
        return RunSpread(level=math.nan, n_runs=0, n_history=0, sd=math.nan, df=0.0)
    level = math.fsum(baseline) / n
    ss = math.fsum((v - level) ** 2 for v in baseline)
    dof = float(n - 1)
    expected = float(n - 1)  # E[ss] / sigma^2
    recent = list(history)[-HISTORY_WINDOW:]
    k = len(recent)
    if k >= 2:
        ss += math.fsum((b - a) ** 2 for a, b in zip(recent, recent[1:])) / 2.0
        expected += k - 1
        dof += 2.0 * (k - 1) ** 2 / (3.0 * k - 4.0)
    if expected <= 0:
        return RunSpread(level=level, n_runs=n, n_history=k if k >= 2 else 0, sd=math.nan, df=0.0)
    sd = math.sqrt(ss / expected)
    return RunSpread(level=level, n_runs=n, n_history=k if k >= 2 else 0, sd=sd, df=dof)


def machine_spread(spreads: Sequence[float], *, quantile: float = MACHINE_QUANTILE) -> float:
    """The spread a test on this machine should be assumed to have at least: a high quantile of the
    between-process spreads of every test with enough runs in this environment (0 with fewer than
    ``MIN_TESTS_FOR_MACHINE`` of them).

    A handful of runs estimates one test's spread poorly (7 runs: 6 degrees of freedom): processes
    that happen to agree give a bound a fraction of the width the next slow process needs, and on
    the 2-core validation VM that was most of the false alarms before this floor (then with 5-run
    baselines). What moves a process moves every test in it, so the suite's spreads say more about
    the machine than one test's few runs do.
    """
    finite = sorted(v for v in spreads if math.isfinite(v))
    if len(finite) < MIN_TESTS_FOR_MACHINE:
        return 0.0
    return finite[min(len(finite) - 1, int(round(quantile * (len(finite) - 1))))]


@dataclass(frozen=True, slots=True)
class ThroughputCall:
    """The stored rule's answer for throughput, before wording."""

    status: str  # "regressed", "improved", "unchanged", "unknown"
    change: float  # current / level - 1 over the runs judged (mean of logs)
    ci_low: float
    ci_high: float
    p_value: float  # one-sided, slower than the level
    detection_limit: float  # fraction of throughput lost that is caught (inf: none)
    bound_change: float  # the prediction bound, as a change of one run against the level


def judge_throughput(spread_log: RunSpread, current: Sequence[float], *, confidence: float, threshold: float,
                     tolerance: float) -> ThroughputCall:
    """Throughput runs ``current`` (items/s; the first run, then the confirmation) against a log-scale spread."""
    logs = [math.log(v) for v in current]
    m = len(logs)
    mean_log = math.fsum(logs) / m
    delta = mean_log - spread_log.level
    change = math.expm1(delta)
    if not spread_log.known:
        return ThroughputCall("unknown", change, math.nan, math.nan, math.nan, math.inf, math.nan)
    half = spread_log.prediction_half_width(confidence)
    threshold_log = -math.log1p(-threshold)
    limit = -math.expm1(-spread_log.detection_limit(confidence, threshold_log))
    se_mean = spread_log.sd * math.sqrt(1.0 / m + 1.0 / spread_log.n_runs)
    t_two = _t(0.5 + confidence / 2.0, spread_log.df)
    ci_low, ci_high = math.expm1(delta - t_two * se_mean), math.expm1(delta + t_two * se_mean)
    p_value = stats.t_cdf(delta / se_mean, spread_log.df) if se_mean > 0 else (0.0 if delta < 0 else 1.0)
    bound = spread_log.level - half
    crossed = [v < bound for v in logs]
    if all(crossed) and delta < -threshold_log:
        status = "regressed"
    elif logs[0] > spread_log.level + half and math.log1p(tolerance) < delta:
        status = "improved"
    else:
        status = "unchanged"
    return ThroughputCall(status, change, ci_low, ci_high, p_value, limit, -math.expm1(-half))

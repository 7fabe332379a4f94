"""What a comparison decides: the verdict types every gate returns, and the wording they share.

Pure data and text: no pytest, no TensorFlow. The rules that fill these in
are the other modules of ``gates``: ``stored`` (with ``stored_rule``),
``paired`` and ``rounds`` for throughput, ``memory`` and ``traces`` for the
rest. The throughput decision and sentence that the within-run rules
(``rounds``, ``paired``) share are here, so both decide and say it alike.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pytest_tfperf import stats
from pytest_tfperf.model import Direction, Measurement, MemorySource, format_value, same_environment


MIB = 2**20


class Status(str, enum.Enum):
    """Outcome of one metric (and of the whole verdict). Compares equal to its string value."""

    REGRESSED = "regressed"
    IMPROVED = "improved"
    UNCHANGED = "unchanged"
    NOISY = "noisy"
    UNAVAILABLE = "unavailable"
    # A whole verdict's status only, never a metric's: a regression seen in one process whose confirmation
    # in a fresh process could not be measured. Reported with the reason, and not a failure: one process
    # can be slow for its whole life, which is what the confirmation is there to rule out.
    UNCONFIRMED = "unconfirmed"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class Tolerances:
    """How far each metric may move before the gate reacts. All relative values are fractions.

    ``throughput``: the slowdown the gate is built to catch (0.10 = 10%); the
    gate decides at ``throughput * throughput_decision_fraction`` (see the
    module docstring). ``tf_memory`` / ``rss`` / ``device_memory`` with their
    ``*_floor_bytes``: allowed growth of the TF allocator peak, the process RSS
    high-water mark and NVML device memory. ``traces_steady_increase``: allowed
    extra steady-state traces (0: any increase fails). ``confidence``: of the
    throughput test and of every reported interval. ``power``: the detection
    probability that defines the minimum detectable change. ``noisy_cap``: the
    widest band, as a fraction of the baseline, that round-to-round spread may
    force on a memory metric before it is reported "noisy".
    """

    throughput: float = 0.10
    throughput_decision_fraction: float = 0.5
    tf_memory: float = 0.02
    tf_memory_floor_bytes: int = 1 * MIB
    rss: float = 0.10
    rss_floor_bytes: int = 16 * MIB
    device_memory: float = 0.10
    device_memory_floor_bytes: int = 16 * MIB
    traces_steady_increase: int = 0
    confidence: float = 0.99
    # The stored gate's throughput prediction bound (stored_rule): each of two processes must cross it.
    stored_throughput_confidence: float = 0.99
    power: float = 0.95
    noisy_cap: float = 0.10
    bootstrap_resamples: int = 2000

    def __post_init__(self) -> None:
        for name in ("throughput", "throughput_decision_fraction", "confidence", "stored_throughput_confidence",
                     "power"):
            value = getattr(self, name)
            if not 0.0 < value < 1.0:
                raise ValueError(f"Tolerances.{name} must be a fraction between 0 and 1 (exclusive), got {value!r}")
        for name in ("tf_memory", "rss", "device_memory", "noisy_cap"):
            value = getattr(self, name)
            if not value >= 0.0 or math.isinf(value):
                raise ValueError(f"Tolerances.{name} must be a fraction >= 0 (0.02 means 2%), got {value!r}")
        for name in ("tf_memory_floor_bytes", "rss_floor_bytes", "device_memory_floor_bytes", "traces_steady_increase"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"Tolerances.{name} must be a whole number >= 0, got {value!r}")
        if self.bootstrap_resamples < 100:
            raise ValueError(f"Tolerances.bootstrap_resamples must be at least 100, got {self.bootstrap_resamples}")

    @property
    def throughput_decision_threshold(self) -> float:
        """Estimated slowdown (fraction of throughput lost) beyond which a significant slowdown fails."""
        return self.throughput * self.throughput_decision_fraction

    def memory_band(self, source: MemorySource) -> tuple[float, int]:
        """(relative tolerance, absolute floor in bytes) for a memory source."""
        if source is MemorySource.TF_ALLOCATOR:
            return self.tf_memory, self.tf_memory_floor_bytes
        if source is MemorySource.NVML:
            return self.device_memory, self.device_memory_floor_bytes
        return self.rss, self.rss_floor_bytes


@dataclass(frozen=True, slots=True)
class MetricVerdict:
    """The decision for one metric.

    ``relative_change`` is ``current / baseline - 1`` (negative throughput change
    = slower; positive memory change = hungrier); ``ci_low``/``ci_high`` bound it
    at ``confidence`` where a statistical interval exists (throughput only).
    ``minimum_detectable_change`` is the smallest change in the bad direction,
    relative to the baseline, that this comparison catches (``inf``: none).
    ``decision_threshold`` is the relative change in the bad direction beyond
    which the metric fails (given significance, for throughput).
    """

    metric: str
    unit: str
    direction: Direction
    baseline_value: float | None
    current_value: float | None
    relative_change: float | None
    ci_low: float | None
    ci_high: float | None
    status: Status
    minimum_detectable_change: float | None
    message: str
    confidence: float | None = None
    p_value: float | None = None
    decision_threshold: float | None = None
    # Stored-baseline verdicts: the runs (separate processes) behind the baseline, and recorded runs that
    # sharpened its spread. None for paired verdicts and for rules that do not use runs.
    baseline_runs: int | None = None
    history_runs: int | None = None

    @property
    def detection_limit(self) -> float | None:
        """The smallest change in the bad direction this comparison catches here (a fraction; inf: none)."""
        return self.minimum_detectable_change


_PRIORITY = (Status.REGRESSED, Status.NOISY, Status.IMPROVED, Status.UNCHANGED)


@dataclass(frozen=True, slots=True)
class Verdict:
    """All metric decisions for one test. ``status`` is the worst of them: regressed, then
    noisy, then improved, then unchanged; "unavailable" only if no metric could be compared."""

    test_id: str
    metrics: tuple[MetricVerdict, ...]
    status: Status
    needs_remeasure: bool
    # A stored-baseline regression seen in one process: the session measures a fresh process before failing.
    needs_confirmation: bool = False
    confirmed: bool = False  # the verdict includes a fresh process's run
    unconfirmed_reason: str = ""  # why the confirmation could not be measured (status "unconfirmed")

    @property
    def failed(self) -> bool:
        return self.status is Status.REGRESSED

    def unconfirmed(self, reason: str) -> Verdict:
        """This regression, reported as unconfirmed: its fresh-process confirmation could not be measured.

        The metrics keep what this process measured (the regressed ones say so);
        the verdict, no longer a failure, carries the reason.
        """
        if self.status is not Status.REGRESSED:
            raise ValueError(f"{self.test_id}: only a regression can be unconfirmed, this verdict is {self.status}")
        return dataclasses.replace(self, status=Status.UNCONFIRMED, unconfirmed_reason=reason)

    def metric(self, name: str) -> MetricVerdict | None:
        for m in self.metrics:
            if m.metric == name:
                return m
        return None

    def with_status(self, status: Status) -> tuple[MetricVerdict, ...]:
        return tuple(m for m in self.metrics if m.status is status)

    def summary(self) -> str:
        """Short text of what moved (for notices and tables); 'unchanged' when nothing did."""
        moved = [m for m in self.metrics if m.status in (Status.REGRESSED, Status.IMPROVED, Status.NOISY)]
        if not moved:
            return "unchanged against its baseline"
        return "; ".join(_short(m) for m in moved)

    def failure_message(self, baseline_fingerprint: str, refresh_hint: str, *, paired_with: str | None = None,
                        partner: bool = False) -> str:
        """Why the test failed: which metric moved, from what to what, how sure, against which baseline, how to refresh.

        ``paired_with`` names the reference variant of a paired verdict, which
        has no stored baseline to refresh; with ``partner`` it names the other
        version of the code (``--tfperf-against``).
        """
        regressed = self.with_status(Status.REGRESSED)
        if paired_with is None:
            lines = [f"{self.test_id}: performance regressed against its baseline"]
        elif partner:
            lines = [f"{self.test_id}: performance regressed against {paired_with}, "
                     "the same test measured beside it in a partner session"]
        else:
            lines = [f"{self.test_id}: performance regressed against variant '{paired_with}', measured beside it"]
        lines += [f"  {m.message}" for m in regressed]
        for m in self.with_status(Status.NOISY):
            lines.append(f"  (also) {m.message}")
        if paired_with is None:
            lines.append(f"  compared against the baseline recorded for environment fingerprint {baseline_fingerprint}")
            lines.append(f"  if this change is intended, refresh the baseline: {refresh_hint}")
        elif partner:
            lines.append(f"  compared round by round, the two versions taking turns on this machine (environment "
                         f"{baseline_fingerprint}); no stored baseline is involved")
        else:
            lines.append(f"  compared round by round with '{paired_with}' in this run (environment "
                         f"{baseline_fingerprint}); no stored baseline is involved")
        return "\n".join(lines)

    def improvement_message(self, refresh_hint: str) -> str | None:
        """A notice for metrics that improved beyond their tolerance, or ``None``."""
        improved = self.with_status(Status.IMPROVED)
        if not improved:
            return None
        what = "; ".join(_short(m) for m in improved)
        return f"{self.test_id}: {what}: refresh the baseline to lock in the gain: {refresh_hint}"


def overall_status(metrics: Sequence[MetricVerdict]) -> Status:
    for status in _PRIORITY:
        if any(m.status is status for m in metrics):
            return status
    return Status.UNAVAILABLE


def unavailable(name: str, unit: str, direction: Direction, message: str) -> MetricVerdict:
    return MetricVerdict(
        metric=name,
        unit=unit,
        direction=direction,
        baseline_value=None,
        current_value=None,
        relative_change=None,
        ci_low=None,
        ci_high=None,
        status=Status.UNAVAILABLE,
        minimum_detectable_change=None,
        message=message,
    )


def check_same_test(current: Measurement, baseline: Measurement) -> None:
    """Refuse to judge a test against another test's baseline, or across environments."""
    if current.test_id != baseline.test_id:
        raise ValueError(
            f"judge() compares a test with its own baseline, got current {current.test_id!r} "
            f"and baseline {baseline.test_id!r}"
        )
    if not same_environment(current.environment_id, baseline.environment_id):
        raise ValueError(
            f"{current.test_id}: refusing to compare measurements from different environments "
            f"(current {current.environment_id}, baseline {baseline.environment_id}); "
            "look up the baseline recorded for the current environment fingerprint instead"
        )


def clock_too_coarse() -> MetricVerdict:
    """The throughput verdict when a round's median iteration took 0 ns: nothing to divide by."""
    return unavailable("throughput", "items/s", Direction.HIGHER_IS_BETTER,
                       "throughput: not compared: a round's median iteration time is 0 ns, so the clock is too "
                       "coarse for this workload; give each iteration more work")


# ---------------------------------------------------------------------------
# throughput: what the within-run rules (rounds, paired) decide and say alike


def within_run_throughput(base_value: float, cur_value: float, change: float, ci: tuple[float, float],
                          p_slower: float, p_faster: float, mde: float, tol: Tolerances, *, test: str,
                          noisy: Callable[[], str], over: str = "") -> tuple[MetricVerdict, bool]:
    """The throughput verdict of a within-run rule, and whether its evidence is borderline.

    One estimate, one interval, one test: ``ci`` holds the rule's two
    one-sided bounds at the confidence level around the estimate ``change``
    (for 99%: the 1st and 99th percentile points, a 98% two-sided interval),
    and the tests are one-sided at the same level, so that ``p_slower`` of at
    most ``1 - confidence`` and an upper bound below zero say the same thing.
    Regressed when the upper bound lies below zero, the test agrees and the
    estimated slowdown exceeds the decision threshold (half the tolerance);
    improved when the lower bound lies above zero, the test agrees and the
    estimate is faster beyond the full tolerance; noisy when the detectable
    slowdown ``mde`` exceeds the tolerance (``noisy()`` says why, in the
    rule's own words); borderline when the bounds straddle the threshold. The
    printed current rate is the baseline's times the estimated change, so the
    two rates and the change never disagree (each side's own rate is in its
    measurement). ``test`` names the test in the sentence, ``over`` what the
    estimate is taken over (" over 20 rounds").
    """
    alpha = 1.0 - tol.confidence
    d = tol.throughput_decision_threshold
    if ci[1] < 0.0 and p_slower <= alpha and -change > d:
        status = Status.REGRESSED
    elif ci[0] > 0.0 and p_faster <= alpha and change > tol.throughput:
        status = Status.IMPROVED
    elif mde > tol.throughput:
        status = Status.NOISY
    else:
        status = Status.UNCHANGED
    conf, tolerance = percent(tol.confidence), percent(tol.throughput)
    if status is Status.REGRESSED:
        body = (f"slower than the baseline by {-change:.1%}, beyond the {d:.1%} decision threshold "
                f"(tolerance {tolerance}), with {conf} confidence ({test}: p = {p_slower:.2g})")
    elif status is Status.IMPROVED:
        body = (f"faster than the baseline by {change:.1%}, beyond the {tolerance} tolerance, "
                f"with {conf} confidence ({test}: p = {p_faster:.2g})")
    elif status is Status.NOISY:
        body = noisy()
    else:
        body = (f"unchanged within the {d:.1%} decision threshold (tolerance {tolerance}; "
                f"{test}: p = {p_slower:.2g}); this comparison catches slowdowns of {mde:.1%} or more")
    unit = "items/s"
    head = (f"throughput: {format_value(base_value, unit)} -> {format_value(base_value * (1.0 + change), unit)} "
            f"({signed_percent(change)}{over}, {conf} bounds {signed_percent(ci[0])} to {signed_percent(ci[1])})")
    verdict = MetricVerdict(
        metric="throughput",
        unit=unit,
        direction=Direction.HIGHER_IS_BETTER,
        baseline_value=base_value,
        current_value=cur_value,
        relative_change=change,
        ci_low=ci[0],
        ci_high=ci[1],
        status=status,
        minimum_detectable_change=mde,
        message=f"{head}: {body}",
        confidence=tol.confidence,
        p_value=p_slower,
        decision_threshold=-d,
    )
    return verdict, -ci[1] < d < -ci[0]


def detectable_slowdown(standard_error: float, df: float, tol: Tolerances) -> float:
    """The slowdown (fraction of throughput lost) a rule with this log-scale standard error catches ``tol.power``
    of the time at the decision threshold (``stats.minimum_detectable_effect``)."""
    threshold = -math.log1p(-tol.throughput_decision_threshold)
    mde_log = stats.minimum_detectable_effect(standard_error, alpha=1.0 - tol.confidence, power=tol.power,
                                              df=df, threshold=threshold)
    return -math.expm1(-mde_log)


# ---------------------------------------------------------------------------
# formatting


# Beyond this loss (a slowdown to 200x the time) one decimal of a factor means nothing: say "at least 200x".
_LARGEST_SAID = 0.995


def slowdown_text(fraction_lost: float) -> str:
    """A slowdown (fraction of throughput lost) as people say it: '38%' up to a half, then '3.0x' (time taken).

    A limit past 200x reads 'at least 200x' (a bare '200x' would claim that figure); none at all, 'none'.
    """
    if not math.isfinite(fraction_lost) or fraction_lost >= _LARGEST_SAID:
        if math.isinf(fraction_lost) or fraction_lost != fraction_lost:
            return "none"
        return f"at least {1.0 / (1.0 - _LARGEST_SAID):.0f}x"
    if fraction_lost < 0.5:
        return f"{fraction_lost:.0%}"
    return f"{1.0 / (1.0 - fraction_lost):.1f}x"


def slowdowns_caught(fraction_lost: float) -> str:
    """'slowdowns of 38% or more', or 'slowdowns of at least 200x' (never 'at least 200x or more')."""
    text = slowdown_text(fraction_lost)
    return f"slowdowns of {text}" + ("" if text.startswith("at least") else " or more")


def signed_percent(fraction: float | None) -> str:
    if fraction is None:
        return "n/a"
    return f"{fraction * 100:+.1f}%"


def percent(fraction: float) -> str:
    """A fraction as a percentage without noise digits: 0.1 -> '10%', 0.075 -> '7.5%', 0.995 -> '99.5%'."""
    text = f"{fraction * 100:.2f}".rstrip("0").rstrip(".")
    return f"{text}%"


def signed_mib(delta_bytes: float) -> str:
    return f"{delta_bytes / MIB:+,.1f} MiB"


def _short(m: MetricVerdict) -> str:
    if m.status is Status.NOISY:
        mdc = m.minimum_detectable_change
        what = "any change" if mdc is None or math.isinf(mdc) else f"changes below {mdc:.0%}"
        return f"{m.metric} too noisy to decide ({what} could go unseen)"
    if m.relative_change is None:
        return f"{m.metric} {m.status.value} ({_fmt_opt(m.baseline_value, m.unit)} -> {_fmt_opt(m.current_value, m.unit)})"
    if m.direction is Direction.HIGHER_IS_BETTER:
        word = "faster" if m.relative_change > 0 else "slower"
    else:
        word = "more" if m.relative_change > 0 else "less"
    text = f"{m.metric} {word} than baseline by {abs(m.relative_change):.0%}"
    if m.ci_low is not None and m.ci_high is not None:
        text += f" ({percent(m.confidence or 0.0)} CI {signed_percent(m.ci_low)} to {signed_percent(m.ci_high)})"
    return text


def _fmt_opt(value: float | None, unit: str) -> str:
    return "n/a" if value is None else format_value(value, unit)

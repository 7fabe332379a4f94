"""Peak-memory verdicts, the same in every gate: the workload's added peak against an allowed band.

Peak memory is near-deterministic, and judged against a band, not by a test:

* it regresses when ``current - baseline`` exceeds the allowed band
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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_tfperf import stats
from pytest_tfperf.gates import stored_rule
from pytest_tfperf.gates.verdict import (
    MetricVerdict,
    Status,
    Tolerances,
    format_value,
    percent,
    signed_mib,
    signed_percent,
    unavailable,
)
from pytest_tfperf.model import Direction, MemoryPeak, MemorySource
from pytest_tfperf.gates.baseline_runs import BaselineRuns


def judge_memory(current: Sequence[MemoryPeak], baseline: Sequence[MemoryPeak],
                 tol: Tolerances, *, runs: BaselineRuns | None = None,
                 confirmation: Sequence[MemoryPeak] | None = None) -> list[MetricVerdict]:
    """One verdict per (source, device) that either side measured; what only one side has is "unavailable"."""
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
            out.append(unavailable(name, "bytes", Direction.LOWER_IS_BETTER, msg))
        elif base.peak_bytes is None or cur.peak_bytes is None:
            why = base.unavailable if base.peak_bytes is None else cur.unavailable
            side = "baseline" if base.peak_bytes is None else "current measurement"
            msg = f"{name}: not compared: unavailable in the {side} ({why})"
            out.append(unavailable(name, "bytes", Direction.LOWER_IS_BETTER, msg))
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
    between_runs, base_band = memory_band(name, runs, tol, fallback=float(base.added_bytes or 0))
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

    pct = f"{signed_percent(change)}, " if change is not None else ""
    head = f"{name}: {format_value(base_b, 'bytes')} -> {format_value(cur_b, 'bytes')} ({pct}{signed_mib(delta)})"
    if between_runs.known:
        runs_part = (f", {percent(tol.confidence)} bound over {between_runs.n_runs} runs in separate processes = "
                     f"{format_value(between, 'bytes')}")
    elif stored:
        runs_part = f"; between-process spread unknown: {len(stored)} run(s), {stored_rule.MIN_RUNS} needed"
    else:
        runs_part = ""
    band = (f"allowed {signed_mib(allowed)} = max({percent(rel)} of baseline, floor {format_value(floor, 'bytes')}, "
            f"1.5 x round-to-round spread = {format_value(spread, 'bytes')}{runs_part})")
    if status is Status.REGRESSED:
        seen = "" if again is None else f" (a fresh process added {signed_mib(again)}: confirmed)"
        body = f"more memory than the baseline beyond the band{seen}: {band}; peaks are measured, not estimated"
    elif status is Status.IMPROVED:
        body = f"less memory than the baseline beyond the band: {band}"
    elif status is Status.NOISY:
        body = (f"too noisy to decide: the per-round peaks vary so much that only changes "
                f"beyond {signed_mib(allowed)} are caught; {band}")
    elif again is not None and delta > allowed:
        body = f"not confirmed: a fresh process added {signed_mib(again)}, within the band: {band}"
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


@dataclass(frozen=True, slots=True)
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


def memory_band(name: str, runs: BaselineRuns | None, tol: Tolerances, *,
                fallback: float = 0.0) -> tuple[stored_rule.RunSpread, BaselineBand]:
    """The stored gate's band for one memory metric from the baseline alone (``level`` is ``fallback``
    without stored runs), and the spread over the baseline's runs behind it."""
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

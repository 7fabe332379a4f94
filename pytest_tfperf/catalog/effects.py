"""How much a fix beats its anti-pattern, on the scenario's metric, and whether that clears the gate.

Pure: the inputs are plain numbers (per-round throughputs, per-round peaks,
trace counts, observations), taken from ``Measurement``s by
``effects_from_measurements`` or from a quick direct run. Each effect carries
its verdict: for most metrics the fix must beat the anti-pattern by at least
``min_effect``; for a loss going NaN, the anti-pattern must go non-finite
within ``min_effect`` iterations and the fix never.

Throughput uses the best round of each variant. On 2 cores TensorFlow has slow
episodes (tf.data rounds at half speed with a core idle) that hit whichever
variant is running; the best round is what the code can do, and the ratio of
best rounds was stable across processes (4.6% CV) where the ratio of medians
swung from 0.85 to 2.3. The per-round ratios are kept as the spread.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pytest_tfperf.catalog.scenario import Comparison, Metric, Scenario
from pytest_tfperf.model import Measurement, MemorySource
from pytest_tfperf.stats import median, t_cdf, t_quantile

_MIB = 2**20


@dataclass(frozen=True, slots=True)
class Effect:
    """The fix's advantage over the anti-pattern on one comparison."""

    scenario: str
    anti: str
    fix: str
    metric: Metric
    value: float | None  # None: not measurable in this run (e.g. a smoke run of one call)
    spread: tuple[float, float] | None  # lowest and highest per-round value, where rounds are paired
    min_effect: float
    gated: bool
    detail: str  # the figures behind the value, in words
    measured_here: str = ""
    passed: bool = False

    @property
    def measured(self) -> bool:
        return self.value is not None

    def headline(self) -> str:
        if self.value is None:
            return "not measured"
        if self.metric in (Metric.THROUGHPUT, Metric.TF_PEAK, Metric.DEVICE_RESERVED):
            return "inf" if math.isinf(self.value) else f"{self.value:.3g}x"
        if self.metric is Metric.FIRST_NON_FINITE:
            return "loss stayed finite" if math.isinf(self.value) else f"NaN/Inf at iteration {self.value:g}"
        return f"{self.value:.3g}"

    def message(self) -> str:
        verdict = "beats" if self.passed else "does NOT beat"
        need = _GATE_WORDS[self.metric].format(min=self.min_effect)
        return (f"{self.scenario}: '{self.fix}' {verdict} '{self.anti}' on {self.metric.value}: "
                f"{self.headline()} (needs {need}). {self.detail}"
                + (f" Measured on the reference machine: {self.measured_here}." if self.measured_here else ""))

    def to_dict(self) -> dict[str, object]:
        return {
            "scenario": self.scenario, "anti": self.anti, "fix": self.fix, "metric": self.metric.value,
            "value": self.value, "spread": list(self.spread) if self.spread else None,
            "min_effect": self.min_effect, "gated": self.gated, "passed": self.passed, "detail": self.detail,
            "measured_here": self.measured_here,
        }


_GATE_WORDS = {
    Metric.THROUGHPUT: "fix/anti best-round throughput >= {min:g}x",
    Metric.TF_PEAK: "anti/fix transient peak >= {min:g}x",
    Metric.GROWTH: "anti growth - fix growth >= {min:g} of one iteration's output per iteration",
    Metric.TRACES: "anti traces per call - fix traces per call >= {min:g}",
    Metric.FIRST_NON_FINITE: "the anti-pattern's loss non-finite by iteration {min:g}, the fix's never",
    Metric.DEVICE_RESERVED: "anti/fix device memory held >= {min:g}x",
}


def _judged(scenario: str, c: Comparison, metric: Metric, value: float | None,
            spread: tuple[float, float] | None, detail: str) -> Effect:
    passed = value is not None and value >= c.min_effect
    return Effect(scenario, c.anti, c.fix, metric, value, spread, c.min_effect, c.gated, detail, c.measured_here,
                  passed)


def _ratio(a: float, b: float) -> float:
    if b == 0:
        return math.inf if a > 0 else 1.0
    return a / b


def _paired_spread(top: Sequence[float], bottom: Sequence[float]) -> tuple[float, float] | None:
    pairs = [_ratio(t, b) for t, b in zip(top, bottom)]
    return (min(pairs), max(pairs)) if len(pairs) > 1 else None


def throughput_effect(scenario: str, c: Comparison, anti_rounds: Sequence[float], fix_rounds: Sequence[float],
                      unit: str = "items/s") -> Effect:
    if len(anti_rounds) < 2 or len(fix_rounds) < 2:
        return _judged(scenario, c, Metric.THROUGHPUT, None, None,
                       "one call each: throughput needs timed rounds (run with --tfperf)")
    best_anti, best_fix = max(anti_rounds), max(fix_rounds)
    detail = (f"best round {best_fix:,.1f} vs {best_anti:,.1f} {unit}; "
              f"worst round {min(fix_rounds):,.1f} vs {min(anti_rounds):,.1f} {unit}.")
    return _judged(scenario, c, Metric.THROUGHPUT, _ratio(best_fix, best_anti),
                   _paired_spread(fix_rounds, anti_rounds), detail)


def peak_effect(scenario: str, c: Comparison, anti_peaks: Sequence[int], fix_peaks: Sequence[int],
                device: str) -> Effect:
    if not anti_peaks or not fix_peaks:
        return _judged(scenario, c, Metric.TF_PEAK, None, None, f"no TensorFlow allocator peak on {device} in this run")
    anti, fix = max(anti_peaks), max(fix_peaks)
    detail = f"transient peak on {device}: {anti / _MIB:,.1f} MiB vs {fix / _MIB:,.1f} MiB."
    return _judged(scenario, c, Metric.TF_PEAK, _ratio(anti, fix), _paired_spread(anti_peaks, fix_peaks), detail)


def growth_effect(scenario: str, c: Comparison, anti_share: float | None, fix_share: float | None) -> Effect:
    if anti_share is None or fix_share is None:
        return _judged(scenario, c, Metric.GROWTH, None, None, "too few iterations to fit a growth slope")
    detail = (f"memory in use grows by {anti_share:.2f} vs {fix_share:.2f} of one iteration's output "
              f"per iteration.")
    return _judged(scenario, c, Metric.GROWTH, anti_share - fix_share, None, detail)


def traces_effect(scenario: str, c: Comparison, anti_traces: int | None, anti_calls: int, fix_traces: int | None,
                  fix_calls: int) -> Effect:
    if anti_traces is None or fix_traces is None or anti_calls == 0 or fix_calls == 0:
        return _judged(scenario, c, Metric.TRACES, None, None, "no steady-state trace count in this run")
    detail = f"{anti_traces} traces in {anti_calls} calls vs {fix_traces} in {fix_calls}."
    return _judged(scenario, c, Metric.TRACES, anti_traces / anti_calls - fix_traces / fix_calls, None, detail)


def non_finite_effect(scenario: str, c: Comparison, anti_first: float | None, fix_first: float | None,
                      anti_calls: int, fix_calls: int) -> Effect:
    """Value: the iteration (from 0) where the anti-pattern's loss went NaN or Inf.

    Passes when that happened within ``min_effect`` iterations and the fix's
    loss stayed finite. Too few calls to tell (a smoke run) is "not measured".
    """
    if fix_first is not None:
        detail = f"the fix's loss went non-finite too, at iteration {fix_first:g}."
        passed = False
    elif anti_first is not None:
        detail = (f"the anti-pattern's loss went non-finite at iteration {anti_first:g}; the fix's stayed finite "
                  f"for all {fix_calls} calls.")
        passed = anti_first <= c.min_effect
    elif anti_calls > c.min_effect:
        detail = f"the anti-pattern's loss stayed finite for all {anti_calls} calls."
        anti_first = math.inf
        passed = False
    else:
        return Effect(scenario, c.anti, c.fix, Metric.FIRST_NON_FINITE, None, None, c.min_effect, c.gated,
                      f"only {anti_calls} calls: too few to see the loss diverge.", c.measured_here)
    return Effect(scenario, c.anti, c.fix, Metric.FIRST_NON_FINITE, anti_first, None, c.min_effect, c.gated, detail,
                  c.measured_here, passed)


def device_memory_effect(scenario: str, c: Comparison, anti_bytes: float | None, fix_bytes: float | None) -> Effect:
    if anti_bytes is None or fix_bytes is None:
        return _judged(scenario, c, Metric.DEVICE_RESERVED, None, None, "NVML gave no per-process memory figure")
    detail = f"device memory held: {anti_bytes / _MIB:,.0f} MiB vs {fix_bytes / _MIB:,.0f} MiB."
    return _judged(scenario, c, Metric.DEVICE_RESERVED, _ratio(anti_bytes, fix_bytes), None, detail)


def effects_from_measurements(scenario: Scenario, measurements: Mapping[str, Measurement], *,
                              memory_device: str = "CPU:0") -> list[Effect]:
    """Judge every comparison of ``scenario`` from the harness's measurements and the variants' observations."""
    observed = {v.name: (v.observe() if v.observe is not None else None) for v in scenario.variants}
    out = []
    for c in scenario.comparisons:
        anti, fix = measurements[c.anti], measurements[c.fix]
        metric = scenario.metric
        if metric is Metric.THROUGHPUT:
            out.append(throughput_effect(scenario.key, c, anti.timings.round_throughputs_per_s,
                                         fix.timings.round_throughputs_per_s))
        elif metric is Metric.TF_PEAK:
            out.append(peak_effect(scenario.key, c, transient_peaks(anti, memory_device),
                                   transient_peaks(fix, memory_device), memory_device))
        elif metric is Metric.GROWTH:
            out.append(growth_effect(scenario.key, c, observed[c.anti], observed[c.fix]))
        elif metric is Metric.TRACES:
            out.append(traces_effect(scenario.key, c, anti.traces_steady, anti.timings.iterations,
                                     fix.traces_steady, fix.timings.iterations))
        elif metric is Metric.FIRST_NON_FINITE:
            out.append(non_finite_effect(scenario.key, c, observed[c.anti], observed[c.fix],
                                         _calls(scenario, c.anti, anti), _calls(scenario, c.fix, fix)))
        else:
            out.append(device_memory_effect(scenario.key, c, observed[c.anti], observed[c.fix]))
    return out


def transient_peaks(m: Measurement, device: str) -> list[int]:
    """Per-round TensorFlow allocator peaks above the memory in use when the first round started."""
    peak = m.memory_peak(MemorySource.TF_ALLOCATOR, device)
    if peak is None or not peak.available:
        return []
    base = peak.baseline_bytes or 0
    return [max(0, p - base) for p in peak.per_round_peak_bytes]


def _calls(scenario: Scenario, name: str, m: Measurement) -> int:
    # Warm-up calls count too: a loss can go NaN during them.
    counter = getattr(scenario.variant(name).run, "iterations", None)
    return int(counter) if isinstance(counter, int) else m.timings.iterations


# -- the margins' rule -----------------------------------------------------------------------------------------
#
# A timing or peak-memory margin is a gate: a margin the fix misses by chance turns the main job red for
# nothing. So each one comes from the effect's distribution over fresh processes of the main job on the
# reference machine (benchmarks/results/catalog_margins.json, written by
# `python benchmarks/catalog_margins.py collect` and `... summarise`):
# - the lower one-sided prediction bound, at MARGIN_CONFIDENCE, for the log ratio of ONE new process
#   (Student's t with n - 1 degrees of freedom, so a short collection pays for its few runs), never above
#   the lowest ratio seen, rounded down to two significant figures;
# - capped from above by the effect the scenario stands for (``ceiling``, its module's stated margin): the
#   rule only lowers a margin, so a machine where the effect is huge does not turn the catalog into a
#   benchmark of that machine;
# - and from below by MIN_CLEAR_MARGIN: the fix must still beat the anti-pattern clearly, so the
#   anti-pattern (a ratio near 1) is still caught. Where the bound falls below it (few runs, a wide spread)
#   the margin is the floor, and the rule says how likely the model thinks a miss of the floor is.
# With about eight such gates in the main job, 99.95% each keeps a red job by chance below 0.5% a run where
# the bound sets the margin; where a cap sets it the chance is smaller (``miss_chance``).
MARGIN_CONFIDENCE = 0.9995
MIN_CLEAR_MARGIN = 1.1


@dataclass(frozen=True, slots=True)
class MarginFromData:
    """The margin the rule gives for one effect, and the figures it came from."""

    runs: int
    lowest: float
    median: float
    bound: float  # the prediction bound for one new process, before rounding and caps
    margin: float  # what the gate uses
    miss_chance: float  # the model's chance that one new process misses ``margin`` (log-t predictive)
    reason: str  # in words: which limb of the rule set the margin


def _round_down_2sig(x: float) -> float:
    if x <= 0 or math.isinf(x):
        return x
    exponent = math.floor(math.log10(x)) - 1
    digits = math.floor(x / 10**exponent + 1e-9)
    return round(digits * 10**exponent, max(0, -exponent))  # 1.4, not 1.4000000000000001


def margin_from_ratios(ratios: Sequence[float], *, ceiling: float, confidence: float = MARGIN_CONFIDENCE,
                       floor: float = MIN_CLEAR_MARGIN) -> MarginFromData:
    """Apply the margins' rule (above) to the fix/anti ratios of one effect, one per fresh process."""
    finite = [r for r in ratios if r > 0 and not math.isinf(r)]
    if len(finite) < 3:
        raise ValueError(f"the margins' rule needs at least 3 finite positive ratios, got {list(ratios)}")
    if not 1.0 < floor <= ceiling:
        raise ValueError(f"the margins' rule needs 1 < floor <= ceiling, got floor {floor}, ceiling {ceiling}")
    logs = [math.log(r) for r in finite]
    n = len(logs)
    mean = sum(logs) / n
    scale = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1)) * math.sqrt(1 + 1 / n)
    bound = math.exp(mean - t_quantile(confidence, n - 1) * scale)
    lowest, middle = min(finite), median(finite)
    candidate = _round_down_2sig(min(bound, lowest))
    if candidate >= ceiling:
        margin, reason = ceiling, f"the stated effect {ceiling:g}x (the bound {bound:.3g}x is above it)"
    elif candidate < floor:
        margin, reason = floor, (f"the floor {floor:g}x: the bound {bound:.3g}x is below it, so these runs "
                                 f"cannot show the margin at {confidence:.2%}")
    else:
        limb = "the prediction bound" if bound <= lowest else "the lowest ratio seen"
        margin, reason = candidate, f"{limb}, rounded down"
    if scale > 0:
        miss = t_cdf((math.log(margin) - mean) / scale, n - 1)
    else:
        miss = 0.0 if margin <= lowest else 1.0
    return MarginFromData(n, lowest, middle, bound, margin, miss, reason)

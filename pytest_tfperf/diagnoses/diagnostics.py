"""Say why a completed workload is slow: input-bound pipelines, a GPU that waits, memory growth, retracing.

``analyse`` reads a ``RawRun`` that completed and returns gateable scalar
metrics (units in their names) and ``Diagnosis`` records: the input-bound
figures (``input_bound``), the GPU's busy share (``gpu_waits``) and the
memory growth slope, judged here, and what made a ``tf.function`` trace after
warm-up (``retrace_diagnosis.retrace_diagnoses``). Why a measurement did not complete is
``failures``'. Every summary says what is going on in plain words first, then
the numbers. No pytest, no TensorFlow.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_tfperf.input_bound.diagnosis import (
    DATASET_ALONE_METRIC,
    INPUT_BOUND_METRIC,
    RESTART_METRIC,
    ProfiledStages,
    STEP_ALONE_METRIC,
    back_to_back_per_s,
    elements_per_s,
    epoch_restarts,
    input_bound,
)
from pytest_tfperf.measuring import memory_growth
from pytest_tfperf.measuring.memory_growth import GROWTH_FLOOR_BYTES, GrowthFit, MemorySeries
from pytest_tfperf.measuring.workload import RawRun
from pytest_tfperf.diagnoses.retrace_diagnosis import retrace_diagnoses
from pytest_tfperf.diagnoses import gpu_waits
from pytest_tfperf.model import TRACES_EACH, Diagnosis, readable_bytes

MEMORY_GROWTH_METRIC = "memory_growth_bytes_per_iteration"

Extras = tuple[tuple[str, float], ...]


def analyse(raw: RawRun, *, growth_floor_bytes: float = GROWTH_FLOOR_BYTES,
            stages: ProfiledStages | None = None) -> tuple[Extras, tuple[Diagnosis, ...]]:
    """Extra metrics and diagnoses derivable from one variant's raw measurement.

    ``stages``: a profiled pass of the pipeline, which the session takes after
    the timed rounds when the input-bound diagnosis fires (``input_fired``),
    and then analyses again with it.
    """
    extras: list[tuple[str, float]] = []
    diagnoses: list[Diagnosis] = []
    if raw.input_wait_ns:
        d, fraction = input_bound(raw, stages)
        extras.append((INPUT_BOUND_METRIC, fraction))
        if raw.input_split is not None:
            extras.append((DATASET_ALONE_METRIC, back_to_back_per_s(raw.input_split.dataset_alone)))
            extras.append((STEP_ALONE_METRIC, elements_per_s(raw.input_split.step_alone)))
        diagnoses.append(d)
        restart = epoch_restarts(raw)
        if restart is not None:
            extras.append((RESTART_METRIC, dict(restart.figures)[RESTART_METRIC]))
            diagnoses.append(restart)
    gpu_waits.extend_analysis(raw, extras, diagnoses)  # "the GPU waits", beside the input-wait figure above
    if raw.memory_series:
        growth_extras, growth_diagnosis = memory_growth_diagnosis(raw.memory_series, floor_bytes=growth_floor_bytes)
        extras += growth_extras
        if growth_diagnosis is not None:
            diagnoses.append(growth_diagnosis)
    diagnoses += retrace_diagnoses(raw.steady_trace_events, raw.traces_steady, raw.timings.iterations_measured,
                                   causes_known=raw.trace_counting == TRACES_EACH)
    return tuple(extras), tuple(diagnoses)


def input_fired(diagnoses: Sequence[Diagnosis]) -> bool:
    """Whether the input-bound diagnosis warns: the one case worth a profiled pass of the pipeline."""
    return any(d.kind == "input_bound" and d.severity == "warning" for d in diagnoses)


def memory_growth_diagnosis(series: Sequence[MemorySeries], *,
                            floor_bytes: float = GROWTH_FLOOR_BYTES) -> tuple[Extras, Diagnosis | None]:
    """The gateable growth metric and a diagnosis: flagged (warning) or steady (info).

    ``memory_growth_bytes_per_iteration`` is the largest *persistent* slope
    over the counters: the later half of the readings grows significantly,
    in most rounds, at no less than half the early rate (see
    ``memory_growth.judge_growth``); 0.0 when none does. The diagnosis
    flags exactly the counters whose metric reaches ``floor_bytes``, so a
    budget at or above the floor fails only a measurement the diagnosis
    flags, and the diagnosis always states the figure a budget reads.
    """
    verdicts = [v for v in (memory_growth.judge_growth(s, floor_bytes=floor_bytes) for s in series) if v is not None]
    if not verdicts:
        return (), None
    metric = max((v.metric_bytes_per_iteration for v in verdicts), default=0.0)
    extras: Extras = ((MEMORY_GROWTH_METRIC, metric),)
    figures: list[tuple[str, float]] = [(MEMORY_GROWTH_METRIC, metric),
                                        ("iterations", float(verdicts[0].whole.iterations)),
                                        ("confirmation_iterations", float(verdicts[0].confirmation_iterations))]
    for v in verdicts:
        f, late = v.whole, v.late
        figures.append((f"{f.source}_slope_bytes_per_iteration", f.slope_bytes_per_iteration))
        figures.append((f"{f.source}_late_slope_bytes_per_iteration", late.slope_bytes_per_iteration))
        if v.early is not None:
            figures.append((f"{f.source}_early_slope_bytes_per_iteration", v.early.slope_bytes_per_iteration))
        if late.ci_low_bytes_per_iteration is not None and late.ci_high_bytes_per_iteration is not None:
            figures.append((f"{f.source}_ci_low_bytes_per_iteration", late.ci_low_bytes_per_iteration))
            figures.append((f"{f.source}_ci_high_bytes_per_iteration", late.ci_high_bytes_per_iteration))
        if v.warmup_growth_bytes is not None:
            figures.append((f"{f.source}_warmup_growth_bytes", float(v.warmup_growth_bytes)))
            figures.append((f"{f.source}_warmup_iterations", float(v.warmup_iterations)))
    longer = (f", {verdicts[0].confirmation_iterations:,} of them measured longer to confirm"
              if verdicts[0].confirmation_iterations else "")
    leaking = sorted((v for v in verdicts if v.leaking(floor_bytes)), key=lambda v: -v.late.slope_bytes_per_iteration)
    if leaking:
        worst = leaking[0]
        late = worst.late
        others = [v for v in verdicts if v is not worst]
        summary = (f"memory grows by {_kib(late.slope_bytes_per_iteration)} per iteration ({_ci(late)}) over "
                   f"{late.iterations:,} iterations, in {late.rounds_growing} of {late.rounds} rounds "
                   f"({worst.label}), and keeps growing at that pace in the later half of "
                   f"{worst.whole.iterations:,} iterations{longer}")
        if others:
            summary += "; " + ", ".join(f"{v.label} {_signed_kib(v.late.slope_bytes_per_iteration)}" for v in others)
        summary += (". Something keeps data alive across iterations: a list of step outputs, a cache that never "
                    "evicts, or variables or tf.functions created inside the loop")
        return extras, Diagnosis(kind="memory_growth", severity="warning", summary=summary, figures=tuple(figures))
    parts = [_settled(v, floor_bytes) for v in verdicts]
    summary = f"no steady memory growth: {'; '.join(parts)}, over {verdicts[0].whole.iterations:,} iterations{longer}"
    return extras, Diagnosis(kind="memory_growth", severity="info", summary=summary, figures=tuple(figures))


def _settled(v: memory_growth.GrowthVerdict, floor_bytes: float) -> str:
    """One counter that is not leaking, in words: its warm-up growth, then its later slope."""
    late = f"{_signed_kib(v.late.slope_bytes_per_iteration)} per iteration ({_ci(v.late)})"
    if v.warm_up_growth and v.warmup_growth_bytes is not None and v.warmup_growth_bytes > 0:
        text = (f"{v.label} grew {readable_bytes(v.warmup_growth_bytes)} in the first {v.warmup_iterations:,} "
                f"iterations (warm-up), then {late} in the later half")
    else:
        text = f"{v.label} {late}"
    if v.persistent and v.metric_bytes_per_iteration > 0:
        text += f", steady but below the {_kib(floor_bytes)} per iteration taken for a leak"
    elif v.late.significant and v.late.slope_bytes_per_iteration >= floor_bytes:
        # Growth the data supports, yet not a leak: say which test it failed.
        if not v.late.steady:
            text += (f", but in only {v.late.rounds_growing} of {v.late.rounds} rounds of the later half: "
                     "steps, not a steady leak")
        elif v.early is not None:
            text += (f", slowing down from {_signed_kib(v.early.slope_bytes_per_iteration)} per iteration in the "
                     "earlier half: warm-up, not a leak")
    return text


def _kib(value: float) -> str:
    if abs(value) >= 10 * 2**20:
        return f"{value / 2**20:,.1f} MiB"
    return f"{value / 1024:,.1f} KiB"


def _signed_kib(value: float) -> str:
    text = _kib(value)
    return text if text.startswith("-") else "+" + text


def _ci(f: GrowthFit) -> str:
    if f.ci_low_bytes_per_iteration is None or f.ci_high_bytes_per_iteration is None:
        return "too few readings for a 95% interval"
    lo, hi = f.ci_low_bytes_per_iteration, f.ci_high_bytes_per_iteration
    unit = "MiB" if max(abs(lo), abs(hi)) >= 10 * 2**20 else "KiB"
    scale = 2**20 if unit == "MiB" else 1024
    return f"95% CI {lo / scale:,.1f}..{hi / scale:,.1f} {unit}"

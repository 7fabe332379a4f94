"""Say why a workload is slow or died: input-bound pipelines, memory growth, stalls, exhaustion, NaNs.

Two halves. ``analyse`` reads a ``RawRun`` that completed and returns gateable
scalar metrics (units in their names) and ``Diagnosis`` records. The
``diagnose_failure`` half turns the exception of a measurement that did not
complete (a stall, an out-of-memory error, a non-finite loss) into a
``MeasurementFailure``: the test's failure message, and a ``Diagnosis`` that
the session shows in its summary and writes to the JSON results.

Every summary says what is going on in plain words first, then the numbers.
No pytest here; TensorFlow only through ``sys.modules`` when it is loaded.
"""

from __future__ import annotations

import math
import re
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_tfperf.probes import gpu_busy
from pytest_tfperf.measuring import memory_growth
from pytest_tfperf.measuring.memory_growth import GROWTH_FLOOR_BYTES, GrowthFit, MemorySeries
from pytest_tfperf.model import Diagnosis, Timings
from pytest_tfperf.diagnoses.pipeline_shape import PipelineShape
from pytest_tfperf.measuring.workload import RawRun

# TensorFlow's profiler (xprof, op_stats_to_input_pipeline_analysis.cc) calls a
# step HIGHLY input-bound at >= 20% of step time waiting for input and
# MODERATELY input-bound at >= 5%. We use the same thresholds and words.
HIGHLY_INPUT_BOUND = 0.20
MODERATELY_INPUT_BOUND = 0.05

INPUT_BOUND_METRIC = "input_bound_fraction"
DATASET_ALONE_METRIC = "dataset_alone_elements_per_s"
STEP_ALONE_METRIC = "step_alone_elements_per_s"
MEMORY_GROWTH_METRIC = "memory_growth_bytes_per_iteration"
# A prefetching pipeline at least this many times as fast alone as the step
# alone is not what the step waits for (see ``_contention``).
CONTENTION_HEADROOM = 3.0
RESTART_METRIC = "epoch_restart_fraction"  # share of the measured time spent restarting a finite dataset

Extras = tuple[tuple[str, float], ...]


def analyse(raw: RawRun, *, growth_floor_bytes: float = GROWTH_FLOOR_BYTES) -> tuple[Extras, tuple[Diagnosis, ...]]:
    """Extra metrics and diagnoses derivable from one variant's raw measurement."""
    extras: list[tuple[str, float]] = []
    diagnoses: list[Diagnosis] = []
    if raw.input_wait_ns:
        d, fraction = input_bound(raw)
        extras.append((INPUT_BOUND_METRIC, fraction))
        if raw.input_split is not None:
            extras.append((DATASET_ALONE_METRIC, _back_to_back_per_s(raw.input_split.dataset_alone)))
            extras.append((STEP_ALONE_METRIC, _elements_per_s(raw.input_split.step_alone)))
        diagnoses.append(d)
        restart = epoch_restarts(raw)
        if restart is not None:
            extras.append((RESTART_METRIC, dict(restart.figures)[RESTART_METRIC]))
            diagnoses.append(restart)
    gpu_busy.extend_analysis(raw, extras, diagnoses)  # "the GPU waits", beside the input-wait figure above
    if raw.memory_series:
        growth_extras, growth_diagnosis = memory_growth_diagnosis(raw.memory_series, floor_bytes=growth_floor_bytes)
        extras += growth_extras
        if growth_diagnosis is not None:
            diagnoses.append(growth_diagnosis)
    return tuple(extras), tuple(diagnoses)


# -- input-bound ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Waits:
    """The together phase's per-step figures, epoch restarts left out."""

    fraction: float  # waiting beyond the handover floor, share of the step time
    raw_fraction: float  # all waiting, floor included
    wait_ms: float  # per step, floor included
    floor_ms: float  # handing over a ready element; 0 when not measured
    step_ms: float
    steps: int
    restarts: int
    restart_wait_ms: float  # all restarts together
    total_ms: float  # all iterations, restarts included


def _waits(raw: RawRun) -> _Waits:
    restarted = set(raw.input_restart_iterations)
    samples, waits = raw.timings.samples_ns, raw.input_wait_ns
    steady = [(t, w) for i, (t, w) in enumerate(zip(samples, waits)) if i not in restarted]
    if not steady:  # every pull restarted: nothing to leave out
        steady, restarted = list(zip(samples, waits)), set()
    split = raw.input_split
    floor = 0.0
    if split is not None and split.handover_ns and steady:
        # The floor is part of every wait, so it cannot exceed the typical one:
        # a slow step's step-alone phase has two or three handovers, and one
        # slow wake-up among them once put the "floor" at 26 ms.
        floor = min(statistics.median(split.handover_ns), statistics.median(w for _, w in steady))
    total = sum(t for t, _ in steady)
    wait = sum(w for _, w in steady)
    # Waiting beyond the floor, step by step: a step whose wait is the floor
    # alone waited for nothing a pipeline change could give back.
    excess = sum(max(0.0, w - floor) for _, w in steady)
    n = len(steady)
    restart_wait = sum(waits[i] for i in restarted if i < len(waits))
    return _Waits(fraction=min(1.0, excess / total) if total else 0.0,
                  raw_fraction=min(1.0, wait / total) if total else 0.0,
                  wait_ms=wait / n / 1e6 if n else 0.0, floor_ms=floor / 1e6,
                  step_ms=(total - wait) / n / 1e6 if n else 0.0, steps=n, restarts=len(restarted),
                  restart_wait_ms=restart_wait / 1e6, total_ms=sum(samples) / 1e6)


def input_bound(raw: RawRun) -> tuple[Diagnosis, float]:
    """The share of each step spent waiting for data beyond the handover floor, classified as the profiler does.

    Epoch restarts (a finite dataset started again) are left out here and
    reported by ``epoch_restarts``: they come once an epoch, and whether one
    lands in the measured rounds decided the figure (5-27% for one pipeline).
    The handover floor (handing over an element already made, measured in
    the step-alone phase) is subtracted: no pipeline change removes it.
    """
    w = _waits(raw)
    fraction = w.fraction
    split = raw.input_split
    headroom = None
    if split is not None:
        step_rate = _elements_per_s(split.step_alone)
        if step_rate > 0 and math.isfinite(step_rate):
            headroom = _back_to_back_per_s(split.dataset_alone) / step_rate
    if fraction >= MODERATELY_INPUT_BOUND and _contention(headroom, raw.pipeline):
        words, severity = "waits for data, but not input-bound", "info"
    elif fraction >= HIGHLY_INPUT_BOUND:
        words, severity = "highly input-bound", "warning"
    elif fraction >= MODERATELY_INPUT_BOUND:
        words, severity = "moderately input-bound", "warning"
    else:
        words, severity = "not input-bound", "info"
    together = _elements_per_s(raw.timings)
    figures: list[tuple[str, float]] = [
        ("input_bound_fraction", fraction),
        ("input_wait_fraction_with_floor", w.raw_fraction),
        ("input_wait_ms_per_iteration", w.wait_ms),
        ("handover_floor_ms", w.floor_ms),
        ("step_ms_per_iteration", w.step_ms),
        ("together_elements_per_s", together),
    ]
    summary = f"{words}: {fraction:.0%} of each step waits for data"
    if split is not None and split.handover_ns:
        summary += (f" beyond the {w.floor_ms:.2f} ms it takes to hand over an element already made "
                    f"({w.raw_fraction:.0%} with it)")
    if split is not None:
        dataset, step = _back_to_back_per_s(split.dataset_alone), _elements_per_s(split.step_alone)
        figures += [(DATASET_ALONE_METRIC, dataset), (STEP_ALONE_METRIC, step)]
        summary += (f"; the dataset alone delivers {_rate(dataset)} elements/s, the step alone {_rate(step)}, "
                    f"the two together {_rate(together)}")
        if severity == "info" and fraction >= MODERATELY_INPUT_BOUND and headroom is not None:
            summary += (f". The pipeline alone is {headroom:,.0f}x as fast as the step and prefetches "
                        f"({raw.pipeline.describe() if isinstance(raw.pipeline, PipelineShape) else ''}): "
                        "nothing in it is slow; its threads and the step compete for the same cores "
                        "(a busy or small machine), which no pipeline change fixes")
        else:
            summary += _input_hint(fraction, dataset, step, raw.pipeline)
        if headroom is not None:
            figures.append(("dataset_headroom_ratio", headroom))
    else:
        summary += f" ({w.wait_ms:.2f} ms waiting, {w.step_ms:.2f} ms in the step, per iteration)"
        summary += _input_hint(fraction, None, None, raw.pipeline)
    if w.restarts:
        summary += f" (epoch restarts left out: {w.restarts} in the measured rounds, reported apart)"
    return Diagnosis(kind="input_bound", severity=severity, summary=summary, figures=tuple(figures)), fraction


def _contention(headroom: float | None, shape: object) -> bool:
    """A wait the pipeline cannot be blamed for: it prefetches, and alone it is far faster than the step.

    On a 2-core machine shared with other processes the prefetching threads
    of a pipeline 50x faster than its step still leave the step waiting
    2-7 ms a pull (12-15% measured on the real-model suite under a load of
    6-9), because they get no core while the step and the other processes
    hold both. The wait is real and stays in ``input_bound_fraction`` for a
    budget; the diagnosis does not call it input-bound, since no change to
    the pipeline would remove it.
    """
    if headroom is None or headroom < CONTENTION_HEADROOM:
        return False
    return isinstance(shape, PipelineShape) and (shape.prefetches or shape.prefetch_injected)


def epoch_restarts(raw: RawRun) -> Diagnosis | None:
    """What starting a finite dataset again costs, apart from the steady waits; ``None`` without restarts."""
    w = _waits(raw)
    split = raw.input_split
    alone = split.dataset_restarts_ns if split is not None else ()
    if not w.restarts and not alone:
        return None
    all_restarts = [raw.input_wait_ns[i] for i in raw.input_restart_iterations if i < len(raw.input_wait_ns)]
    all_restarts += list(alone)
    mean_ms = statistics.fmean(all_restarts) / 1e6 if all_restarts else 0.0
    worst_ms = max(all_restarts) / 1e6 if all_restarts else 0.0
    steady_wait_ms = w.wait_ms * w.steps
    share_of_waiting = w.restart_wait_ms / (w.restart_wait_ms + steady_wait_ms) if w.restart_wait_ms else 0.0
    share_of_time = w.restart_wait_ms / w.total_ms if w.total_ms else 0.0
    summary = (f"each new epoch costs {mean_ms:.0f} ms to restart the pipeline (mean of {len(all_restarts)}, "
               f"worst {worst_ms:.0f} ms)")
    if w.restarts:
        summary += (f"; {w.restarts} restarts in the measured rounds were {share_of_waiting:.0%} of the waiting and "
                    f"{share_of_time:.1%} of the time")
    shape = raw.pipeline
    if isinstance(shape, PipelineShape) and shape.has("shuffle"):
        summary += (". A finite dataset starts again each epoch and refills its shuffle buffer first; "
                    "with .repeat() after .shuffle() (and steps_per_epoch) the buffer carries across epochs")
    else:
        summary += ". A finite dataset starts again each epoch; .repeat() (with steps_per_epoch) avoids the restart"
    figures = ((RESTART_METRIC, share_of_time), ("epoch_restart_ms_mean", mean_ms),
               ("epoch_restart_ms_max", worst_ms), ("epoch_restarts", float(len(all_restarts))),
               ("epoch_restart_share_of_waiting", share_of_waiting))
    return Diagnosis(kind="epoch_restart", severity="info", summary=summary, figures=figures)


def _input_hint(fraction: float, dataset_per_s: float | None, step_per_s: float | None, shape: object) -> str:
    """Advice that fits the pipeline: nothing it already does, named from its own transformations."""
    if fraction < MODERATELY_INPUT_BOUND:
        return ""
    known = shape if isinstance(shape, PipelineShape) else None
    seen = f" (pipeline: {known.describe()})" if known is not None else ""
    slower = dataset_per_s is not None and step_per_s is not None and dataset_per_s < step_per_s
    if known is None:
        if slower:
            return (". The input pipeline is the slower side: parallelise its map "
                    "(num_parallel_calls=tf.data.AUTOTUNE), prefetch, or cache what does not change")
        return (". The dataset alone keeps up with the step, yet the step waits: the pipeline does not run ahead "
                "(add .prefetch(tf.data.AUTOTUNE)) or the two compete for the same cores")
    fixes: list[str] = []
    if known.sequential_map:
        fixes.append("give its map num_parallel_calls=tf.data.AUTOTUNE"
                     + (" (map_parallelization is off in its options)" if "map_parallelization"
                        in known.auto_fixes_off else ""))
    if not known.prefetches:
        fixes.append("end it with .prefetch(tf.data.AUTOTUNE)"
                     + (" (inject_prefetch is off in its options)" if not known.prefetch_injected else ""))
    if slower:
        if not known.caches:
            fixes.append("cache what does not change from epoch to epoch (.cache() before the random steps)")
        if not fixes:
            fixes.append("it already maps in parallel and prefetches: make the preprocessing cheaper, "
                         "vectorise it (batch before map), or give it more cores")
        return f". The input pipeline is the slower side{seen}: " + "; ".join(fixes)
    if not fixes:
        fixes.append("it already prefetches and keeps up alone, so the producer and the step compete for the "
                     "same cores; more cores, or cheaper preprocessing, would help")
    return f". The dataset alone keeps up with the step, yet the step waits{seen}: " + "; ".join(fixes)


def _elements_per_s(t: Timings) -> float:
    """Items per second at the median iteration (an iteration of a batched dataset is many elements)."""
    med = t.median_ns
    return math.inf if med == 0 else t.items_per_iteration * 1e9 / med


def _back_to_back_per_s(t: Timings) -> float:
    """Elements per second over all the pulls (what back-to-back pulls sustain), not the median pull.

    A prefetching pipeline hands over buffered elements in microseconds and
    then waits for the next one: the median pull says nothing of the rate.
    """
    total = sum(t.samples_ns)
    return math.inf if total == 0 else len(t.samples_ns) * t.items_per_iteration * 1e9 / total


def _rate(value: float) -> str:
    if not math.isfinite(value):
        return "unmeasurably many"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


# -- memory growth ---------------------------------------------------------------


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
        text = (f"{v.label} grew {_bytes(v.warmup_growth_bytes)} in the first {v.warmup_iterations:,} iterations "
                f"(warm-up), then {late} in the later half")
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


# -- failures: stall, out of memory, non-finite ------------------------------------


@dataclass(frozen=True, slots=True)
class MeasurementFailure:
    """A measurement that did not complete, explained."""

    test_id: str
    diagnosis: Diagnosis  # severity "failure"; kind "stall", "oom" or "non_finite"
    message: str  # the test's failure text: the summary first, then details (stacks, resources, hints)

    def verdict_dict(self) -> dict[str, Any]:
        """What the results JSON holds for this test, in place of a gate verdict."""
        from pytest_tfperf.storage.serialization import diagnosis_to_dict

        return {"status": "failed", "kind": self.diagnosis.kind, "summary": self.diagnosis.summary,
                "diagnoses": [diagnosis_to_dict(self.diagnosis)]}


def diagnose_failure(exc: BaseException, test_id: str, *, batch_size: int | None = None,
                     items_per_iteration: float | None = None) -> MeasurementFailure | None:
    """Explain a stall, an out-of-memory error or a non-finite value; ``None`` for any other error."""
    from pytest_tfperf.diagnoses.numerics import NonFiniteError
    from pytest_tfperf.measuring.watchdog import StallError

    if isinstance(exc, StallError):
        d = Diagnosis(kind="stall", severity="failure", summary=exc.summary, figures=(
            ("waited_s", exc.waited_ns / 1e9), ("deadline_s", exc.deadline_ns / 1e9),
            ("iterations_done", float(exc.iterations_done))))
        return MeasurementFailure(test_id, d, f"{test_id}: {exc}")
    if isinstance(exc, NonFiniteError):
        d = Diagnosis(kind="non_finite", severity="failure", summary=str(exc).split(". ")[0],
                      figures=(("iteration", float(exc.iteration)),))
        return MeasurementFailure(test_id, d, f"{test_id}: {exc}")
    if is_out_of_memory(exc):
        return _explain_oom(exc, test_id, batch_size, items_per_iteration)
    return None


def explain_exhaustion(exc: BaseException, test_id: str) -> str | None:
    """A clear message for an out-of-memory error during a measurement, or None for other errors."""
    if not is_out_of_memory(exc):
        return None
    return _explain_oom(exc, test_id, None, None).message


def is_out_of_memory(exc: BaseException) -> bool:
    """A TensorFlow ``ResourceExhaustedError`` (by class, Keras re-raises keep it) or a ``MemoryError``."""
    if isinstance(exc, MemoryError):
        return True
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        try:
            return isinstance(exc, tf.errors.ResourceExhaustedError)
        except AttributeError:
            pass
    return any(cls.__name__ == "ResourceExhaustedError" for cls in type(exc).__mro__)


_DTYPE_BYTES = {
    "float": 4, "double": 8, "half": 2, "bfloat16": 2, "float16": 2, "float32": 4, "float64": 8,
    "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
    "bool": 1, "complex64": 8, "complex128": 16,
}
_SHAPE = re.compile(r"shape\s*\[([\d,\s]*)\]\s*and\s+type\s+(\w+)")


def requested_allocation(message: str) -> tuple[tuple[int, ...], str, int | None] | None:
    """Shape, dtype and bytes of the tensor an OOM message says could not be allocated."""
    m = _SHAPE.search(message)
    if m is None:
        return None
    dims = tuple(int(d) for d in m.group(1).replace(" ", "").split(",") if d)
    dtype = m.group(2)
    size = _DTYPE_BYTES.get(dtype)
    return dims, dtype, None if size is None else size * math.prod(dims)


def device_of(message: str) -> str | None:
    """``CPU:0`` / ``GPU:1`` from an OOM message (its device path, else its BFC allocator's name)."""
    m = re.search(r"/device:([A-Za-z_]+:\d+)", message)
    if m:
        return m.group(1)
    m = re.search(r"by allocator (GPU|CPU)_(\d+)_bfc", message)
    if m:
        return f"{m.group(1)}:{m.group(2)}"
    return None


def _explain_oom(exc: BaseException, test_id: str, batch_size: int | None,
                 items_per_iteration: float | None) -> MeasurementFailure:
    text = str(exc).strip()
    device = device_of(text) or ("host memory" if isinstance(exc, MemoryError) else "an unknown device")
    phase = getattr(exc, "tfperf_phase", None)
    request = requested_allocation(text)
    figures: list[tuple[str, float]] = []
    headline = f"out of memory on {device}" + (f" in the {phase}" if phase else "") + f" ({type(exc).__name__})"
    if request is not None:
        dims, dtype, nbytes = request
        shape = "[" + ", ".join(str(d) for d in dims) + "]"
        if nbytes is not None:
            headline += f": a {dtype} tensor of shape {shape} ({_bytes(nbytes)}) could not be allocated"
            figures.append(("requested_bytes", float(nbytes)))
        else:
            headline += f": a {dtype} tensor of shape {shape} could not be allocated"
    lines = [f"{test_id}: {headline}."]
    peak_words, peak_figures = _peaks_at_failure(exc, device)
    figures += peak_figures
    lines.append("  Peak reached: " + peak_words + ".")
    machine = _machine_memory()
    if machine is not None:
        available, total = machine
        lines.append(f"  Machine: {_bytes(available)} available of {_bytes(total)}.")
        figures += [("available_bytes", float(available)), ("total_bytes", float(total))]
    if batch_size is not None:
        lines.append(f"  Batch size: {batch_size:,} (from @pytest.mark.tfperf(batch_size=...)).")
        figures.append(("batch_size", float(batch_size)))
    elif items_per_iteration is not None and items_per_iteration != 1:
        lines.append(f"  Batch size: not given; each iteration counts {items_per_iteration:g} items "
                     "(name the batch size with @pytest.mark.tfperf(batch_size=...)).")
    else:
        lines.append("  Batch size: unknown (name it with @pytest.mark.tfperf(batch_size=...)).")
    first_line = text.splitlines()[0] if text else type(exc).__name__
    lines.append(f"  TensorFlow said: {first_line[:400]}" if not isinstance(exc, MemoryError)
                 else f"  Python said: {first_line[:400]}")
    lines.append("  Try: " + "; ".join(_oom_hints(device, request, machine, batch_size)) + ".")
    summary = headline + (f"; batch size {batch_size:,}" if batch_size is not None else "")
    d = Diagnosis(kind="oom", severity="failure", summary=summary, figures=tuple(figures))
    return MeasurementFailure(test_id, d, "\n".join(lines))


def _oom_hints(device: str, request: tuple[tuple[int, ...], str, int | None] | None,
               machine: tuple[int, int] | None, batch_size: int | None) -> list[str]:
    hints: list[str] = []
    nbytes = request[2] if request is not None else None
    if nbytes is not None and machine is not None and nbytes > machine[1]:
        hints.append(f"check the shape first: this one tensor ({_bytes(nbytes)}) is larger than the machine's "
                     f"memory ({_bytes(machine[1])}), so a dimension is far too large or multiplied in twice")
    batch = f"halve the batch size ({batch_size:,} now)" if batch_size is not None else "a smaller batch size"
    hints.append(f"{batch}: peak memory grows about linearly with it; gradient accumulation keeps the effective batch")
    if device.startswith("GPU"):
        hints.append("tf.config.experimental.set_memory_growth(gpu, True) when other processes share the GPU")
        hints.append("TF_GPU_ALLOCATOR=cuda_malloc_async when TensorFlow's log mentions fragmentation")
        hints.append("mixed precision (tf.keras.mixed_precision.set_global_policy('mixed_float16')) "
                     "to halve activations")
    hints.append("release tensors kept across iterations (this test's memory-growth line under --tfperf says "
                 "whether memory climbs)")
    hints.append("a budget such as @pytest.mark.tfperf(max_peak_tf_bytes=...) to fail before memory runs out")
    return hints


def _peaks_at_failure(exc: BaseException, device: str) -> tuple[str, list[tuple[str, float]]]:
    """The probes' peaks when the error left the workload, else TensorFlow's and the kernel's own counters."""
    parts: list[str] = []
    figures: list[tuple[str, float]] = []
    peaks = getattr(exc, "tfperf_peaks", None)
    if peaks:
        since = getattr(exc, "tfperf_peaks_since", "the last reset")
        for source, dev, value, unavailable in peaks:
            label = _source_label(source, dev)
            if value is None:
                parts.append(f"{label} not measured ({unavailable or 'no reading'})")
            else:
                parts.append(f"{label} {_bytes(value)} since {since}")
                figures.append((f"peak_{source}[{dev}]_bytes", float(value)))
        return "; ".join(parts), figures
    tf = sys.modules.get("tensorflow")
    if tf is not None and device.split(":")[0] in ("CPU", "GPU"):
        try:
            peak = int(tf.config.experimental.get_memory_info(device)["peak"])
            parts.append(f"TF allocator on {device} {_bytes(peak)} since its last reset")
            figures.append((f"peak_tf_allocator[{device}]_bytes", float(peak)))
        except Exception as err:  # noqa: BLE001 - stats are off with TF_ENABLE_ONEDNN_OPTS=0
            parts.append(f"TF allocator on {device} not tracked ({str(err).splitlines()[0][:120]})")
    hwm = _vm_hwm_bytes()
    if hwm is not None:
        parts.append(f"process RSS high-water {_bytes(hwm)} since its last reset")
        figures.append(("peak_rss_hwm[host]_bytes", float(hwm)))
    return ("; ".join(parts) or "not measured"), figures


def _source_label(source: str, device: str) -> str:
    return {"tf_allocator": f"TF allocator on {device}", "rss_hwm": "process RSS high-water",
            "rss_sampled": "process RSS (sampled)", "nvml": f"NVML used on {device}"}.get(source, f"{source} {device}")


def _vm_hwm_bytes() -> int | None:
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _machine_memory() -> tuple[int, int] | None:
    try:
        import psutil

        vm = psutil.virtual_memory()
        return int(vm.available), int(vm.total)
    except Exception:  # noqa: BLE001 - the message is still useful without it
        return None


def _bytes(value: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= scale:
            return f"{value / scale:,.1f} {unit}"
    return f"{value:,.0f} B"


def failure_summary_lines(failures: Iterable[MeasurementFailure]) -> list[str]:
    """End-of-session lines: each failed measurement's diagnosis, then threads still stuck after stalls."""
    from pytest_tfperf.measuring.watchdog import abandoned_summary

    lines = [f"{f.test_id}: FAILED ({f.diagnosis.kind}): {f.diagnosis.summary}" for f in failures]
    return lines + abandoned_summary()

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
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_tfperf import gpu_busy, memory_growth
from pytest_tfperf.memory_growth import GROWTH_FLOOR_BYTES, GrowthFit, MemorySeries
from pytest_tfperf.model import Diagnosis, Timings
from pytest_tfperf.runner import RawRun

# TensorFlow's profiler (xprof, op_stats_to_input_pipeline_analysis.cc) calls a
# step HIGHLY input-bound at >= 20% of step time waiting for input and
# MODERATELY input-bound at >= 5%. We use the same thresholds and words.
HIGHLY_INPUT_BOUND = 0.20
MODERATELY_INPUT_BOUND = 0.05

INPUT_BOUND_METRIC = "input_bound_fraction"
DATASET_ALONE_METRIC = "dataset_alone_elements_per_s"
STEP_ALONE_METRIC = "step_alone_elements_per_s"
MEMORY_GROWTH_METRIC = "memory_growth_bytes_per_iteration"

Extras = tuple[tuple[str, float], ...]


def analyse(raw: RawRun, *, growth_floor_bytes: float = GROWTH_FLOOR_BYTES) -> tuple[Extras, tuple[Diagnosis, ...]]:
    """Extra metrics and diagnoses derivable from one variant's raw measurement."""
    extras: list[tuple[str, float]] = []
    diagnoses: list[Diagnosis] = []
    if raw.input_wait_ns:
        d, fraction = input_bound(raw)
        extras.append((INPUT_BOUND_METRIC, fraction))
        if raw.input_split is not None:
            extras.append((DATASET_ALONE_METRIC, _elements_per_s(raw.input_split.dataset_alone)))
            extras.append((STEP_ALONE_METRIC, _elements_per_s(raw.input_split.step_alone)))
        diagnoses.append(d)
    gpu_busy.extend_analysis(raw, extras, diagnoses)  # "the GPU waits", beside the input-wait figure above
    if raw.memory_series:
        growth_extras, growth_diagnosis = memory_growth_diagnosis(raw.memory_series, floor_bytes=growth_floor_bytes)
        extras += growth_extras
        if growth_diagnosis is not None:
            diagnoses.append(growth_diagnosis)
    return tuple(extras), tuple(diagnoses)


# -- input-bound ---------------------------------------------------------------


def input_bound(raw: RawRun) -> tuple[Diagnosis, float]:
    """The share of each iteration spent waiting for the next element, classified as the profiler does."""
    total = sum(raw.timings.samples_ns)
    wait = sum(raw.input_wait_ns)
    fraction = min(1.0, wait / total) if total else 0.0
    n = len(raw.input_wait_ns)
    wait_ms = wait / n / 1e6 if n else 0.0
    step_ms = (total - wait) / n / 1e6 if n else 0.0
    if fraction >= HIGHLY_INPUT_BOUND:
        words, severity = "highly input-bound", "warning"
    elif fraction >= MODERATELY_INPUT_BOUND:
        words, severity = "moderately input-bound", "warning"
    else:
        words, severity = "not input-bound", "info"
    together = _elements_per_s(raw.timings)
    figures: list[tuple[str, float]] = [
        ("input_bound_fraction", fraction),
        ("input_wait_ms_per_iteration", wait_ms),
        ("step_ms_per_iteration", step_ms),
        ("together_elements_per_s", together),
    ]
    summary = f"{words}: {fraction:.0%} of each step waits for data"
    split = raw.input_split
    if split is not None:
        dataset, step = _elements_per_s(split.dataset_alone), _elements_per_s(split.step_alone)
        figures += [(DATASET_ALONE_METRIC, dataset), (STEP_ALONE_METRIC, step)]
        summary += (f"; the dataset alone delivers {_rate(dataset)} elements/s, the step alone {_rate(step)}, "
                    f"the two together {_rate(together)}")
        summary += _input_hint(fraction, dataset, step)
    else:
        summary += f" ({wait_ms:.2f} ms waiting, {step_ms:.2f} ms in the step, per iteration)"
    return Diagnosis(kind="input_bound", severity=severity, summary=summary, figures=tuple(figures)), fraction


def _input_hint(fraction: float, dataset_per_s: float, step_per_s: float) -> str:
    if fraction < MODERATELY_INPUT_BOUND:
        return ""
    if dataset_per_s < step_per_s:
        return (". The input pipeline is the slower side: parallelise its map "
                "(num_parallel_calls=tf.data.AUTOTUNE), prefetch, or cache what does not change")
    return (". The dataset alone keeps up with the step, yet the step waits: the pipeline does not run ahead "
            "(add .prefetch(tf.data.AUTOTUNE)) or the two compete for the same cores")


def _elements_per_s(t: Timings) -> float:
    med = t.median_ns
    return math.inf if med == 0 else 1e9 / med


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

    ``memory_growth_bytes_per_iteration`` is the largest slope, over the
    counters, whose 95% interval excludes zero: growth the data supports,
    0.0 when none does. The diagnosis flags only growth that is also at
    least ``floor_bytes`` per iteration and steady across rounds.
    """
    fits = [f for f in (memory_growth.fit_growth(s, floor_bytes=floor_bytes) for s in series) if f is not None]
    if not fits:
        return (), None
    significant = [f for f in fits if f.significant]
    metric = max((f.slope_bytes_per_iteration for f in significant), default=0.0)
    extras: Extras = ((MEMORY_GROWTH_METRIC, metric),)
    figures: list[tuple[str, float]] = [(MEMORY_GROWTH_METRIC, metric), ("iterations", float(fits[0].iterations))]
    for f in fits:
        figures.append((f"{f.source}_slope_bytes_per_iteration", f.slope_bytes_per_iteration))
        if f.ci_low_bytes_per_iteration is not None and f.ci_high_bytes_per_iteration is not None:
            figures.append((f"{f.source}_ci_low_bytes_per_iteration", f.ci_low_bytes_per_iteration))
            figures.append((f"{f.source}_ci_high_bytes_per_iteration", f.ci_high_bytes_per_iteration))
    leaking = sorted((f for f in fits if f.leaking(floor_bytes)), key=lambda f: -f.slope_bytes_per_iteration)
    if leaking:
        worst = leaking[0]
        others = [f for f in fits if f is not worst]
        summary = (f"memory grows by {_kib(worst.slope_bytes_per_iteration)} per iteration ({_ci(worst)}) over "
                   f"{worst.iterations:,} iterations, in {worst.rounds_growing} of {worst.rounds} rounds "
                   f"({worst.label})")
        if others:
            summary += "; " + ", ".join(f"{f.label} {_signed_kib(f.slope_bytes_per_iteration)}" for f in others)
        summary += (". Something keeps data alive across iterations: a list of step outputs, a cache that never "
                    "evicts, or variables or tf.functions created inside the loop")
        return extras, Diagnosis(kind="memory_growth", severity="warning", summary=summary, figures=tuple(figures))
    parts = [f"{f.label} {_signed_kib(f.slope_bytes_per_iteration)} per iteration ({_ci(f)})" for f in fits]
    summary = f"no steady memory growth: {', '.join(parts)}, over {fits[0].iterations:,} iterations"
    return extras, Diagnosis(kind="memory_growth", severity="info", summary=summary, figures=tuple(figures))


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
        from pytest_tfperf.serialization import diagnosis_to_dict

        return {"status": "failed", "kind": self.diagnosis.kind, "summary": self.diagnosis.summary,
                "diagnoses": [diagnosis_to_dict(self.diagnosis)]}


def diagnose_failure(exc: BaseException, test_id: str, *, batch_size: int | None = None,
                     items_per_iteration: float | None = None) -> MeasurementFailure | None:
    """Explain a stall, an out-of-memory error or a non-finite value; ``None`` for any other error."""
    from pytest_tfperf.numerics import NonFiniteError
    from pytest_tfperf.watchdog import StallError

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
    from pytest_tfperf.watchdog import abandoned_summary

    lines = [f"{f.test_id}: FAILED ({f.diagnosis.kind}): {f.diagnosis.summary}" for f in failures]
    return lines + abandoned_summary()

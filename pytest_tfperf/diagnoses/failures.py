"""Why a measurement died: a stall, an out-of-memory error or a non-finite value, explained.

``diagnose_failure`` turns the exception of a measurement that did not
complete into a ``MeasurementFailure``: the test's failure message, and a
``Diagnosis`` that the session shows in its summary and writes to the JSON
results. Every summary says what is going on in plain words first, then the
numbers. No pytest here; TensorFlow only through ``sys.modules`` when it is
loaded.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pytest_tfperf.model import Diagnosis, readable_bytes

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
            headline += f": a {dtype} tensor of shape {shape} ({readable_bytes(nbytes)}) could not be allocated"
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
        lines.append(f"  Machine: {readable_bytes(available)} available of {readable_bytes(total)}.")
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
        hints.append(f"check the shape first: this one tensor ({readable_bytes(nbytes)}) is larger than the machine's "
                     f"memory ({readable_bytes(machine[1])}), so a dimension is far too large or multiplied in twice")
    batch = f"halve the batch size ({batch_size:,} now)" if batch_size is not None else "a smaller batch size"
    hints.append(f"{batch}: peak memory grows about linearly with it; gradient accumulation keeps the effective batch")
    if device.startswith("GPU"):
        hints.append("tf.config.experimental.set_memory_growth(gpu, True) when other processes share the GPU")
        hints.append("TF_GPU_ALLOCATOR=cuda_malloc_async when TensorFlow's log mentions fragmentation")
        hints.append("mixed precision (tf.keras.mixed_precision.set_global_policy('mixed_float16')) "
                     "to halve activations")
    hints.append("release tensors kept across iterations (this test's memory-growth line under --tfperf says "
                 "whether memory climbs)")
    hints.append("a limit such as @pytest.mark.tfperf(max_peak_tf_bytes=...) to fail before memory runs out")
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
                parts.append(f"{label} {readable_bytes(value)} since {since}")
                figures.append((f"peak_{source}[{dev}]_bytes", float(value)))
        return "; ".join(parts), figures
    tf = sys.modules.get("tensorflow")
    if tf is not None and device.split(":")[0] in ("CPU", "GPU"):
        try:
            peak = int(tf.config.experimental.get_memory_info(device)["peak"])
            parts.append(f"TF allocator on {device} {readable_bytes(peak)} since its last reset")
            figures.append((f"peak_tf_allocator[{device}]_bytes", float(peak)))
        except Exception as err:  # noqa: BLE001 - stats are off with TF_ENABLE_ONEDNN_OPTS=0
            parts.append(f"TF allocator on {device} not tracked ({str(err).splitlines()[0][:120]})")
    hwm = _vm_hwm_bytes()
    if hwm is not None:
        parts.append(f"process RSS high-water {readable_bytes(hwm)} since its last reset")
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


def failure_summary_lines(failures: Iterable[MeasurementFailure]) -> list[str]:
    """End-of-session lines: each failed measurement's diagnosis, then threads still stuck after stalls."""
    from pytest_tfperf.measuring.watchdog import abandoned_summary

    lines = [f"{f.test_id}: FAILED ({f.diagnosis.kind}): {f.diagnosis.summary}" for f in failures]
    return lines + abandoned_summary()

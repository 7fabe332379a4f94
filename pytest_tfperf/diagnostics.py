"""Say why a workload is slow or died: input-bound pipelines, memory growth, exhaustion.

Pure analysis of a ``RawRun`` (plus the exception of a failed run); findings
come back as ``Diagnosis`` records (plain words first, numbers after) and as
gateable scalar metrics with their units in the name.
"""

from __future__ import annotations

from pytest_tfperf.model import Diagnosis
from pytest_tfperf.runner import RawRun

# TensorFlow's profiler (xprof, op_stats_to_input_pipeline_analysis.cc) calls a
# step HIGHLY input-bound at >= 20% of step time waiting for input and
# MODERATELY input-bound at >= 5%. We use the same thresholds and words.
HIGHLY_INPUT_BOUND = 0.20
MODERATELY_INPUT_BOUND = 0.05

INPUT_BOUND_METRIC = "input_bound_fraction"


def analyse(raw: RawRun) -> tuple[tuple[tuple[str, float], ...], tuple[Diagnosis, ...]]:
    """Extra metrics and diagnoses derivable from one variant's raw measurement."""
    extras: list[tuple[str, float]] = []
    diagnoses: list[Diagnosis] = []
    if raw.input_wait_ns:
        d, fraction = input_bound(raw)
        extras.append((INPUT_BOUND_METRIC, fraction))
        diagnoses.append(d)
    return tuple(extras), tuple(diagnoses)


def input_bound(raw: RawRun) -> tuple[Diagnosis, float]:
    total = sum(raw.timings.samples_ns)
    wait = sum(raw.input_wait_ns)
    fraction = wait / total if total else 0.0
    n = len(raw.input_wait_ns)
    wait_ms = wait / n / 1e6 if n else 0.0
    step_ms = (total - wait) / n / 1e6 if n else 0.0
    if fraction >= HIGHLY_INPUT_BOUND:
        words, severity = "highly input-bound", "warning"
    elif fraction >= MODERATELY_INPUT_BOUND:
        words, severity = "moderately input-bound", "info"
    else:
        words, severity = "not input-bound", "info"
    summary = (f"{words}: {fraction:.0%} of each step waits for data "
               f"({wait_ms:.2f} ms waiting, {step_ms:.2f} ms in the step, per iteration)")
    return (Diagnosis(kind="input_bound", severity=severity, summary=summary,
                      figures=(("input_bound_fraction", fraction), ("input_wait_ms_per_iteration", wait_ms),
                               ("step_ms_per_iteration", step_ms))), fraction)


def explain_exhaustion(exc: BaseException, test_id: str) -> str | None:
    """A clear message for an out-of-memory error during a measurement, or None for other errors."""
    import sys

    tf = sys.modules.get("tensorflow")
    is_tf_oom = tf is not None and isinstance(exc, tf.errors.ResourceExhaustedError)
    if not (is_tf_oom or isinstance(exc, MemoryError)):
        return None
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    device = _device_of(str(exc))
    return (
        f"{test_id}: out of memory during the measurement ({type(exc).__name__}) on {device}.\n"
        f"  TensorFlow said: {first_line[:400]}\n"
        "  Try: a smaller batch (or gradient accumulation to keep the effective batch), "
        "tf.config.experimental.set_memory_growth on GPUs, releasing tensors kept across iterations, "
        "or a memory budget in @pytest.mark.tfperf(max_peak_tf_bytes=...) to catch growth before it crashes."
    )


def _device_of(message: str) -> str:
    marker = "/device:"
    if marker in message:
        tail = message.split(marker, 1)[1]
        return tail.split()[0].rstrip(",.")
    return "an unknown device"

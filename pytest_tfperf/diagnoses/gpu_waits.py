"""The "GPU waits" diagnosis and the gateable ``gpu_busy_fraction`` metric, from NVML's busy figures.

``probes.gpu_busy`` reads the figures per round; :func:`extend_analysis` adds
the ``gpu_busy_fraction`` metric and a diagnosis to what ``diagnostics.analyse``
returns.

What the counter means, and why the threshold is 50%. ``nvmlDeviceGetUtilizationRates().gpu``
is the share of time during which at least one kernel ran on the GPU. It is
one-sided: a low reading proves the GPU waited; a high one does not prove the
GPU is used well (one small kernel at a time also reads 100%). Measured on an
NVIDIA H200 (../shared/research/gpu-h200.md, sampled every 20 ms as here): a
saturated step (20 bf16 4096x4096 matmuls back to back) read 98%; an
input-starved step (8 ms of host work per 0.4 ms of GPU work) read 11% mean,
4% median. Below 50% the GPU spends more of the step waiting than working,
which neither measured regime comes near (48 points below the saturated
step, more than four times the starved one): that is where we say "the GPU
waits". No pynvml, no TensorFlow here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytest_tfperf.input_bound.diagnosis import INPUT_BOUND_METRIC, MODERATELY_INPUT_BOUND
from pytest_tfperf.model import Diagnosis, GpuBusy

GPU_WAITS_BELOW = 0.50  # see the module docstring: saturated 98%, starved 11% on an H200
GPU_BUSY_METRIC = "gpu_busy_fraction"


def busiest(gpu_busy: Sequence[GpuBusy]) -> GpuBusy | None:
    """The GPU that stands for the workload: the busiest one this process may have used.

    A GPU whose process list was empty in every round (``process_on_gpu`` is
    False) had no CUDA context of this process; it is left out unless no
    other GPU has a figure.
    """
    measured = [g for g in gpu_busy if g.fraction is not None]
    used = [g for g in measured if g.process_on_gpu is not False] or measured
    return max(used, key=lambda g: g.fraction or 0.0, default=None)


def extend_analysis(raw: Any, extras: list[tuple[str, float]], diagnoses: list[Diagnosis]) -> None:
    """Add ``gpu_busy_fraction`` and the GPU-busy diagnosis for ``raw`` (a ``measuring.workload.RawRun``), if NVML read any."""
    measured = tuple(getattr(raw, "gpu_busy", ()))
    top = busiest(measured)
    if top is None or top.fraction is None:
        return
    extras.append((GPU_BUSY_METRIC, top.fraction))
    input_wait = next((v for k, v in extras if k == INPUT_BOUND_METRIC), None)
    diagnoses.append(diagnose(measured, input_wait))


def diagnose(gpu_busy: Sequence[GpuBusy], input_bound_fraction: float | None = None) -> Diagnosis:
    """"The GPU waits: input-bound or host-bound" below ``GPU_WAITS_BELOW``, else an info line with the figure."""
    top = busiest(gpu_busy)
    if top is None or top.fraction is None:
        raise ValueError("diagnose() needs at least one GPU with a busy fraction")
    figures: list[tuple[str, float]] = [(GPU_BUSY_METRIC, top.fraction), ("gpu_busy_threshold", GPU_WAITS_BELOW)]
    if top.process_fraction is not None:
        figures.append(("gpu_process_busy_fraction", top.process_fraction))
    if input_bound_fraction is not None:
        figures.append((INPUT_BOUND_METRIC, input_bound_fraction))
    busy = describe(top)
    if all(g.process_on_gpu is False for g in gpu_busy if g.fraction is not None):
        return Diagnosis(kind="gpu_busy", severity="info", figures=tuple(figures),
                         summary=f"{busy}; this process held no CUDA context on any GPU during the rounds "
                                 "(NVML listed no compute process), so the GPU figures are other processes'")
    if top.fraction >= GPU_WAITS_BELOW:
        return Diagnosis(kind="gpu_busy", severity="info", summary=busy, figures=tuple(figures))
    summary = f"the GPU waits: input-bound or host-bound: {busy}"
    if input_bound_fraction is None:
        summary += (". Measure with tfperf.iterate(dataset, step=...) to see how much of the step waits for input; "
                    "otherwise host work in the step (Python, host ops, copies to the device) keeps the GPU idle")
    elif input_bound_fraction >= MODERATELY_INPUT_BOUND:
        summary += (f"; {input_bound_fraction:.0%} of each step waits for data: the input pipeline is "
                    "(at least part of) why")
    else:
        summary += (f"; only {input_bound_fraction:.0%} of each step waits for data: host work in the step itself "
                    "(Python, host ops, copies to the device) keeps the GPU idle")
    return Diagnosis(kind="gpu_busy", severity="warning", summary=summary, figures=tuple(figures))


def describe(g: GpuBusy) -> str:
    """``GPU:0 busy 11% of the measured time (NVML, median round; this process 9%)``."""
    if g.fraction is None:
        return f"{g.device} busy: not measured ({g.unavailable})"
    share = f"; this process {g.process_fraction:.0%}" if g.process_fraction is not None else ""
    return f"{g.device} busy {g.fraction:.0%} of the measured time (NVML, median round{share})"

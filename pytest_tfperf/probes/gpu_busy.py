"""GPU busy fraction: per-round readings from the NVML probe, their summary, and the "GPU waits" diagnosis.

The NVML memory probe (``nvml.NvmlMemoryProbe``) also reads NVML's
utilisation counter on its sampler thread, so busy readings exist exactly
where device-memory readings do: during rounds, never during warm-up or
between tests. The runner takes one ``BusyReading`` per NVML probe after each
round (:func:`round_readings`); :func:`collect` turns a variant's rounds into
``model.GpuBusy``; :func:`extend_analysis` adds the gateable
``gpu_busy_fraction`` metric and a diagnosis to what ``diagnostics.analyse``
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
from dataclasses import dataclass
from typing import Any

from pytest_tfperf.model import Diagnosis, GpuBusy, MemorySource

GPU_WAITS_BELOW = 0.50  # see the module docstring: saturated 98%, starved 11% on an H200
GPU_BUSY_METRIC = "gpu_busy_fraction"
INPUT_BOUND_METRIC = "input_bound_fraction"  # diagnostics' name, read here to say the two together
_MODERATELY_INPUT_BOUND = 0.05  # as diagnostics.MODERATELY_INPUT_BOUND (the profiler's threshold)


@dataclass(frozen=True, slots=True)
class BusyReading:
    """One GPU over one round: NVML's device-wide busy fraction and this process's share."""

    device: str
    fraction: float | None  # mean of the round's device-wide readings; None: see problem
    process_fraction: float | None  # this process's SM share over NVML's samples in the round
    samples: int
    process_on_gpu: bool | None  # see model.GpuBusy.process_on_gpu
    problem: str | None = None
    process_problem: str | None = None


def round_readings(probes: Sequence[Any]) -> tuple[BusyReading, ...]:
    """Each NVML probe's reading of the round that its ``peak()`` just ended."""
    out: list[BusyReading] = []
    for probe in probes:
        if probe.source is not MemorySource.NVML:
            continue
        reading = getattr(probe, "last_busy", None)
        if probe.unavailable is not None:
            reading = BusyReading(probe.device, None, None, 0, None, probe.unavailable, probe.unavailable)
        elif reading is None:
            reading = BusyReading(probe.device, None, None, 0, None, "the probe took no utilisation reading")
        out.append(reading)
    return tuple(out)


def collect(rounds: Sequence[Sequence[BusyReading]]) -> tuple[GpuBusy, ...]:
    """One ``GpuBusy`` per device from per-round readings; a round without a reading makes it unavailable.

    As for memory peaks, a summary over the remaining rounds could mislead,
    so one missing round removes the device-wide figure and says why.
    """
    devices: dict[str, list[tuple[int, BusyReading]]] = {}
    for r, readings in enumerate(rounds):
        for reading in readings:
            devices.setdefault(reading.device, []).append((r, reading))
    out: list[GpuBusy] = []
    for device, items in devices.items():
        readings = [x for _, x in items]
        missing = [(r, x) for r, x in items if x.fraction is None]
        process = tuple(x.process_fraction for x in readings)
        process_problem = next((x.process_problem for x in readings if x.process_problem), None)
        listed = [x.process_on_gpu for x in readings]
        on_gpu = True if True in listed else (False if listed and all(v is False for v in listed) else None)
        common: dict[str, Any] = {
            "device": device,
            "per_round_process_fraction": process if any(v is not None for v in process) else (),
            "process_unavailable": None if any(v is not None for v in process) else (
                process_problem or "NVML held no utilisation sample of this process during the rounds"),
            "process_on_gpu": on_gpu,
            "samples": sum(x.samples for x in readings),
        }
        if missing:
            r, first = missing[0]
            why = f"round {r + 1} of {len(rounds)}: {first.problem or 'no reading'}"
            out.append(GpuBusy(unavailable=why, **common))
        else:
            out.append(GpuBusy(per_round_fraction=tuple(x.fraction for x in readings if x.fraction is not None),
                               **common))
    return tuple(out)


def pool(a: Sequence[GpuBusy], b: Sequence[GpuBusy]) -> tuple[GpuBusy, ...]:
    """Two measurements' busy figures as one (rounds of ``a`` then ``b``), for ``gates.pooling.pool``."""
    later = {g.device: g for g in b}
    out: list[GpuBusy] = []
    for g in a:
        other = later.pop(g.device, None)
        if other is None or not other.available:
            out.append(g)
        elif not g.available:
            out.append(other)
        else:
            process = g.per_round_process_fraction + other.per_round_process_fraction
            if not g.per_round_process_fraction or not other.per_round_process_fraction:
                process = ()  # one side has none: the rounds would no longer line up
            out.append(GpuBusy(
                device=g.device,
                per_round_fraction=g.per_round_fraction + other.per_round_fraction,
                per_round_process_fraction=process,
                process_unavailable=g.process_unavailable if not process else None,
                process_on_gpu=True if True in (g.process_on_gpu, other.process_on_gpu) else g.process_on_gpu,
                samples=g.samples + other.samples,
            ))
    return tuple(out) + tuple(later.values())


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
    elif input_bound_fraction >= _MODERATELY_INPUT_BOUND:
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


def short(gpu_busy: Sequence[GpuBusy]) -> str:
    """The summary table's cell: ``98%``, ``11% (own 9%)``, ``GPU:0 98%, GPU:1 0%`` or ``n/a``."""
    parts = []
    for g in gpu_busy:
        if g.fraction is None:
            text = "n/a"
        else:
            text = f"{g.fraction:.0%}" + (f" (own {g.process_fraction:.0%})" if g.process_fraction is not None else "")
        parts.append(text if len(gpu_busy) == 1 else f"{g.device} {text}")
    return ", ".join(parts) if parts else "n/a"

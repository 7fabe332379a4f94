"""GPU busy fraction read: per-round readings from the NVML probe, and their summary per variant.

The NVML memory probe (``nvml.NvmlMemoryProbe``) also reads NVML's
utilisation counter on its sampler thread, so busy readings exist exactly
where device-memory readings do: during rounds, never during warm-up or
between tests. The runner takes one ``BusyReading`` per NVML probe after each
round (:func:`round_readings`); :func:`collect` turns a variant's rounds into
``model.GpuBusy``. What the figure means, and when "the GPU waits", is the
diagnosis' (``diagnoses.gpu_waits``); two measurements' figures are pooled by
``gates.pooling``, and the summary's cell is worded by ``reports.report``.
No pynvml, no TensorFlow here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_tfperf.model import GpuBusy, MemorySource


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

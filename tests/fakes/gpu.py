"""An emulated GPU for the self-check's own tests: ``FakeOps`` does "GPU work" that a fake NVML sees.

``python -m pytest_tfperf.gpu_check`` drives real CuPy/PyTorch work on a real
GPU and reads it back through NVML. Here both ends are emulated in one
process: ``FakeOps.hold`` raises the fake device's memory (this process's
entry and the device total), ``FakeOps.work`` marks the device busy while it
sleeps, and the fake ``pynvml`` (``tests.fakes.make_fake_pynvml``) answers
utilisation as the share of the last 1/6 s covered by such work, as NVML's
counter does over its sample period.

Importing this module does nothing; ``FakeOps()`` (what ``load_ops("tests.fakes.gpu:FakeOps")``
calls in the generated test file's process) installs the fake NVML in that
process, so the plugin's probes there read the emulated device.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field

from tests.fakes import FakeGpu, make_fake_pynvml

MIB = 2**20
CONTEXT_BYTES = 520 * MIB  # the CUDA context's share, as the H200 run read it
WINDOW_S = 1 / 6  # NVML's utilisation sample period on recent boards
SECONDS_PER_MATMUL = 0.0002


@dataclass
class EmulatedGpu(FakeGpu):
    """A fake GPU whose utilisation follows ``FakeOps``' busy intervals."""

    intervals: list[tuple[float, float]] = field(default_factory=list)
    sampled: threading.Event = field(default_factory=threading.Event)  # a sampler thread read the memory

    def __post_init__(self) -> None:
        self.on_memory_read = _note_sampler_read

    def busy_now(self) -> int:
        now = time.perf_counter()
        start = now - WINDOW_S
        covered = sum(max(0.0, min(b, now) - max(a, start)) for a, b in self.intervals[-2000:])
        return min(100, round(100 * covered / WINDOW_S))


def _note_sampler_read(gpu: FakeGpu) -> None:
    if threading.current_thread().name.startswith("tfperf-nvml") and isinstance(gpu, EmulatedGpu):
        gpu.sampled.set()


DEVICE: EmulatedGpu | None = None


def install() -> EmulatedGpu:
    """Put the emulated GPU's NVML in ``sys.modules`` and let the plugin look for it (once per process)."""
    global DEVICE
    from pytest_tfperf.probes import nvml

    if DEVICE is None:
        DEVICE = EmulatedGpu(name="NVIDIA H200 (emulated)", uuid="GPU-e0000000-0000-0000-0000-000000000000",
                             total_bytes=141 * 2**30, used_bytes=0)
        module = make_fake_pynvml([DEVICE], driver_version="580.159.04")
        real_rates = module.nvmlDeviceGetUtilizationRates

        def rates(handle: FakeGpu) -> object:
            if isinstance(handle, EmulatedGpu):
                handle.busy_percent = handle.busy_now()
            return real_rates(handle)

        module.nvmlDeviceGetUtilizationRates = rates
        sys.modules["pynvml"] = module
    nvml.nvidia_driver_visible = lambda: True  # type: ignore[assignment]
    nvml._inventory_cache.clear()  # the real inventory, if read already, is not this device's
    return DEVICE


class FakeOps:
    """The self-check's GPU operations, on the emulated device."""

    name = "emulated GPU"
    work_with = "emulated"

    def __init__(self) -> None:
        self.device = install()

    def context(self) -> None:
        pid = os.getpid()
        if pid not in self.device.processes:
            self.device.processes[pid] = CONTEXT_BYTES
            self.device.used_bytes += CONTEXT_BYTES

    def sync(self) -> None:
        pass

    def hold(self, nbytes: int, seconds: float) -> None:
        pid = os.getpid()
        self.context()
        self.device.sampled.clear()
        self.device.processes[pid] = (self.device.processes[pid] or 0) + nbytes
        self.device.used_bytes += nbytes
        # Held until a sampler thread has seen it: the tests must not depend on the thread's timing.
        self.device.sampled.wait(timeout=30)
        time.sleep(seconds)
        self.device.processes[pid] = (self.device.processes[pid] or 0) - nbytes
        self.device.used_bytes -= nbytes

    def work(self, reps: int) -> object:
        self.context()
        start = time.perf_counter()
        time.sleep(SECONDS_PER_MATMUL * reps)
        end = time.perf_counter()
        self.device.intervals.append((start, end))
        del self.device.intervals[:-2000]
        stamp = int(time.time() * 1e6)
        self.device.process_samples.append((os.getpid(), stamp, self.device.busy_now()))
        del self.device.process_samples[:-200]
        return None

"""What every probe is built on: the ``MemoryProbe`` protocol, a probe that cannot measure, a sampling thread.

It sits below :mod:`pytest_tfperf.probes.memory_probes` (host and TensorFlow probes,
and ``default_probes``, which assembles every kind) and
:mod:`pytest_tfperf.probes.nvml` (GPU probes), so that both build on it without
importing each other.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from pytest_tfperf.model import MemorySource


class MemoryProbe(Protocol):
    """What the runner needs from a probe."""

    source: MemorySource
    device: str  # "CPU:0", "GPU:0", "host"
    unavailable: str | None  # why the probe cannot measure; then reset()/peak() return None

    def reset(self) -> int | None:
        """Reset the peak to the current usage; return the bytes in use now (None if unknown)."""
        ...

    def peak(self) -> int | None:
        """Peak bytes since the last reset (None if unavailable)."""
        ...

    def close(self) -> None: ...


class UnavailableProbe:
    """A probe that knows from the start it cannot measure, and says why."""

    def __init__(self, source: MemorySource, device: str, reason: str) -> None:
        self.source = source
        self.device = device
        self.unavailable: str | None = reason
        self.detail = reason

    def reset(self) -> int | None:
        return None

    def peak(self) -> int | None:
        return None

    def close(self) -> None:
        pass


class WindowSampler:
    """Calls ``tick`` every ``interval_s`` on a daemon thread, between ``start()`` and ``stop()`` only.

    A fresh thread per window keeps the bookkeeping simple (no reading of one
    window can land in the next) for about 0.1 ms per round. An exception in
    ``tick`` ends the window and is kept in ``error``. ``last_window_cpu_ns`` is
    the CPU time the thread used in the last window: the probe's own cost.
    """

    def __init__(self, tick: Callable[[], None], interval_s: float, *, name: str) -> None:
        self._tick = tick
        self.interval_s = interval_s
        self._name = name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.ticks = 0
        self.last_window_cpu_ns = 0

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        self.stop()
        self.error = None
        self.ticks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(self._stop,), name=self._name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        thread = self._thread
        if thread is None:
            return
        self._stop.set()
        thread.join()
        self._thread = None

    def _run(self, stop: threading.Event) -> None:
        cpu_start = time.thread_time_ns()
        try:
            while not stop.wait(self.interval_s):
                self._tick()
                self.ticks += 1
        except Exception as exc:
            self.error = exc
        finally:
            self.last_window_cpu_ns = time.thread_time_ns() - cpu_start

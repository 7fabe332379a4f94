"""Turn a stalled workload into a test failure instead of a CI job that times out.

The workload runs on a measuring thread; the calling thread polls its progress.
An iteration that runs past its deadline (a multiple of the typical iteration
so far, clamped between a floor and a ceiling) raises ``StallError`` in the
calling thread, carrying the stack of every Python thread and a snapshot of
resources. The stuck measuring thread is abandoned (it is a daemon thread):
nothing in Python can interrupt a call blocked inside TensorFlow's C++, but the
session can go on to the next test.

Where even that is impossible, because the stuck code holds the GIL so that
the calling thread never runs again, ``faulthandler`` is armed as a last resort:
past ``hard_exit_s`` it dumps every thread's stack and exits the process, so
CI gets a clear trace instead of a silent hang.
"""

from __future__ import annotations

import faulthandler
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class StallPolicy:
    """When an iteration counts as stalled.

    The deadline is ``multiple`` x the typical iteration time measured so far,
    never below ``floor_s`` (so fast workloads with a slow hiccup are not
    failed) and never above ``ceiling_s``; before any iteration has completed
    (the first call traces and compiles) only the ceiling applies.
    """

    enabled: bool = True
    multiple: float = 100.0
    floor_s: float = 10.0
    ceiling_s: float = 300.0
    poll_s: float = 0.05
    hard_exit_s: float | None = None  # faulthandler exit after this long, if set

    def __post_init__(self) -> None:
        if self.multiple <= 1:
            raise ValueError(f"stall multiple must be > 1, got {self.multiple}")
        if not 0 < self.floor_s <= self.ceiling_s:
            raise ValueError(
                f"stall floor ({self.floor_s} s) must be positive and not above the ceiling ({self.ceiling_s} s)"
            )
        if self.poll_s <= 0:
            raise ValueError(f"poll_s must be positive, got {self.poll_s}")

    def deadline_ns(self, typical_ns: float | None) -> int:
        if typical_ns is None:
            return int(self.ceiling_s * 1e9)
        return int(min(max(self.multiple * typical_ns, self.floor_s * 1e9), self.ceiling_s * 1e9))


class ProgressView(Protocol):
    phase: str
    iteration_started_ns: int
    typical_ns: float | None
    iterations_done: int


class StallError(Exception):
    """An iteration ran past its deadline; ``report`` says where every thread was."""

    def __init__(self, summary: str, report: str) -> None:
        super().__init__(f"{summary}\n\n{report}")
        self.summary = summary
        self.report = report


_abandoned: list[threading.Thread] = []


def abandoned_threads() -> list[threading.Thread]:
    """Measuring threads given up on after a stall that are still alive."""
    return [t for t in _abandoned if t.is_alive()]


def run_watched(
    body: Callable[[], None],
    progress: ProgressView,
    policy: StallPolicy,
    *,
    clock: Callable[[], int] = time.perf_counter_ns,
    snapshot: Callable[[], list[str]] | None = None,
) -> None:
    """Run ``body`` on a measuring thread; raise ``StallError`` if it stalls."""
    if not policy.enabled:
        body()
        return
    outcome: dict[str, BaseException] = {}

    def target() -> None:
        try:
            body()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
            outcome["exc"] = exc

    worker = threading.Thread(target=target, name="tfperf-measure", daemon=True)
    armed = policy.hard_exit_s is not None
    if armed:
        faulthandler.dump_traceback_later(policy.hard_exit_s, exit=True)  # type: ignore[arg-type]
    try:
        worker.start()
        while True:
            worker.join(policy.poll_s)
            if not worker.is_alive():
                break
            started = progress.iteration_started_ns
            if not started:
                continue
            waited = clock() - started
            deadline = policy.deadline_ns(progress.typical_ns)
            if waited > deadline:
                _abandoned.append(worker)
                raise _stall_error(worker, progress, waited, deadline, snapshot)
    finally:
        if armed:
            faulthandler.cancel_dump_traceback_later()
    if "exc" in outcome:
        raise outcome["exc"]


def _stall_error(worker: threading.Thread, progress: ProgressView, waited_ns: int, deadline_ns: int,
                 snapshot: Callable[[], list[str]] | None) -> StallError:
    typical = progress.typical_ns
    typical_text = f"typical iteration {typical / 1e6:.1f} ms" if typical else "no iteration had completed yet"
    summary = (
        f"stalled: the {progress.phase} has run {waited_ns / 1e9:.1f} s, past its deadline of "
        f"{deadline_ns / 1e9:.1f} s ({typical_text}; {progress.iterations_done} iterations done). "
        "The measuring thread was abandoned so the session can go on."
    )
    lines = ["Stacks of every Python thread at the stall:"]
    lines += thread_stacks(highlight=worker)
    lines.append("")
    lines.append("Resources at the stall:")
    try:
        lines += (snapshot or resource_snapshot)()
    except Exception as exc:  # noqa: BLE001 - a snapshot must never hide the stall itself
        lines.append(f"  (snapshot failed: {exc!r})")
    return StallError(summary, "\n".join(lines))


def thread_stacks(highlight: threading.Thread | None = None) -> list[str]:
    names = {t.ident: t.name for t in threading.enumerate()}
    frames = sys._current_frames()
    lines: list[str] = []
    for ident, frame in frames.items():
        mark = "  <- the stalled workload" if highlight is not None and ident == highlight.ident else ""
        lines.append(f"--- thread {names.get(ident, '?')} ({ident}){mark}")
        lines += ["  " + ln.rstrip() for ln in traceback.format_stack(frame)]
    if highlight is not None and highlight.ident in frames:
        lines.append(
            "(If the stalled thread's innermost frame is a TensorFlow call such as get_next or a "
            "session run, the wait is inside TensorFlow's C++ runtime.)"
        )
    return lines


def resource_snapshot() -> list[str]:
    """Memory of the process and the machine, and TF/GPU memory where available."""
    import psutil

    lines = []
    proc = psutil.Process()
    vm = psutil.virtual_memory()
    sw = psutil.swap_memory()
    lines.append(f"  process RSS: {proc.memory_info().rss / 2**20:,.1f} MiB; threads: {proc.num_threads()}")
    lines.append(f"  machine: {vm.available / 2**20:,.0f} MiB available of {vm.total / 2**20:,.0f} MiB; "
                 f"swap used {sw.used / 2**20:,.0f} of {sw.total / 2**20:,.0f} MiB")
    lines.append(f"  CPU: {psutil.cpu_percent(interval=None):.0f}% busy over the last interval; "
                 f"load average {', '.join(f'{x:.2f}' for x in psutil.getloadavg())}")
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        try:
            for dev in tf.config.list_logical_devices():
                name = dev.name.split("device:")[-1]
                try:
                    info = tf.config.experimental.get_memory_info(name)
                    lines.append(f"  TF allocator {name}: {info['current'] / 2**20:,.1f} MiB in use, "
                                 f"peak {info['peak'] / 2**20:,.1f} MiB")
                except (ValueError, RuntimeError) as exc:
                    lines.append(f"  TF allocator {name}: unavailable ({exc})")
        except Exception as exc:  # noqa: BLE001 - TF may itself be wedged
            lines.append(f"  TF allocator: could not be read ({exc!r})")
    if "pynvml" in sys.modules:
        from pytest_tfperf import nvml

        describe = getattr(nvml, "describe_devices", None)
        if describe is not None:
            lines += ["  " + ln for ln in describe()]
    return lines

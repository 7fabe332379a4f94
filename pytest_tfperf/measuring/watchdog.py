"""Turn a stalled workload into a test failure instead of a CI job that times out.

The workload runs on a measuring thread; the calling thread polls its progress.
An iteration that runs past its deadline (a multiple of the typical iteration
so far, clamped between a floor and a ceiling) raises ``StallError`` in the
calling thread, carrying the stack of every Python thread and a snapshot of
resources. The stuck measuring thread is abandoned (it is a daemon thread):
nothing in Python can interrupt a call blocked inside TensorFlow's C++, but the
session can go on to the next test.

An abandoned thread that comes back to life (a ``time.sleep`` in a
``tf.py_function`` that ends after all) sees ``progress.abandoned`` and stops
at its next chunk of iterations, so it cannot measure behind the next test's
back; one that never comes back does not keep the process from exiting (it is
a daemon thread, and TensorFlow's blocked threads are native).

Where even that is impossible, because the stuck code holds the GIL so that
the calling thread never runs again, ``faulthandler`` is armed as a last resort:
if the watching loop has not run for ``hard_exit_s`` it dumps every thread's
stack ("Timeout (h:mm:ss)!" then the stacks) and exits the process, so CI gets
a trace instead of a silent hang. The watching loop re-arms it as it polls,
so a long but healthy measurement is never cut short.
"""

from __future__ import annotations

import faulthandler
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from pytest_tfperf.model import readable_duration


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


class Progress:
    """What the measuring thread is doing, read by the watchdog without locks.

    Plain attribute writes are atomic under the GIL; the watchdog tolerates a
    stale read by one poll interval. ``abandoned`` goes the other way: the
    watchdog sets it when it gives up on the thread, and a thread that comes
    back to life stops at its next chunk instead of measuring on behind the
    next test's back.
    """

    __slots__ = ("phase", "detail", "iteration_started_ns", "typical_ns", "iterations_done", "abandoned")

    def __init__(self) -> None:
        self.phase = "first call"
        self.detail = ""  # "waiting for the next element" / "in the step", for pull+step workloads
        self.iteration_started_ns = 0  # 0: not inside an iteration
        self.typical_ns: float | None = None
        self.iterations_done = 0
        self.abandoned = False


class Abandoned(BaseException):
    """Raised in a measuring thread that the watchdog gave up on, should it ever resume."""


class StallError(Exception):
    """An iteration ran past its deadline; ``report`` says where every thread was."""

    def __init__(self, summary: str, report: str, *, waited_ns: int = 0, deadline_ns: int = 0,
                 phase: str = "", iterations_done: int = 0) -> None:
        super().__init__(f"{summary}\n\n{report}")
        self.summary = summary
        self.report = report
        self.waited_ns = waited_ns
        self.deadline_ns = deadline_ns
        self.phase = phase
        self.iterations_done = iterations_done


_abandoned: list[tuple[threading.Thread, str]] = []
REARM_EVERY_S = 5.0  # how often the watching loop pushes the hard-exit timer back


def abandoned_threads() -> list[threading.Thread]:
    """Measuring threads given up on after a stall that are still alive."""
    return [t for t, _ in _abandoned if t.is_alive()]


def abandoned_summary() -> list[str]:
    """Lines for the end of the session about measuring threads still stuck, or none."""
    alive = abandoned_threads()
    if not alive:
        return []
    where = {t: stalled_in for t, stalled_in in _abandoned}
    lines = [f"{len(alive)} measuring thread(s) abandoned after a stall are still blocked:"]
    lines += [f"  {t.name} ({t.ident}): {where[t]}" for t in alive]
    lines.append("  They are daemon threads and do not keep the process alive; a test that ran after them "
                 "shared the machine with whatever they still do.")
    return lines


def run_watched(
    body: Callable[[], None],
    progress: Progress,
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
    hard_exit_s = policy.hard_exit_s
    armed_at = time.monotonic()
    if hard_exit_s is not None:
        faulthandler.dump_traceback_later(hard_exit_s, exit=True)
    try:
        worker.start()
        while True:
            worker.join(policy.poll_s)
            if not worker.is_alive():
                break
            if hard_exit_s is not None and time.monotonic() - armed_at > min(REARM_EVERY_S, hard_exit_s / 4):
                faulthandler.dump_traceback_later(hard_exit_s, exit=True)
                armed_at = time.monotonic()
            started = progress.iteration_started_ns
            if not started:
                continue
            waited = clock() - started
            deadline = policy.deadline_ns(progress.typical_ns)
            if waited > deadline:
                progress.abandoned = True
                error = _stall_error(worker, progress, waited, deadline, snapshot)
                _abandoned.append((worker, f"stalled in the {error.phase}"))
                raise error
    finally:
        if hard_exit_s is not None:
            faulthandler.cancel_dump_traceback_later()
    if "exc" in outcome:
        raise outcome["exc"]


def _stall_error(worker: threading.Thread, progress: Progress, waited_ns: int, deadline_ns: int,
                 snapshot: Callable[[], list[str]] | None) -> StallError:
    typical = progress.typical_ns
    typical_text = (f"typical iteration {readable_duration(typical / 1e9, microsecond_digits=0)}" if typical
                    else "no iteration had completed yet, so the ceiling applies")
    detail = getattr(progress, "detail", "")
    where = progress.phase + (f", {detail}" if detail else "")
    summary = (
        f"stalled in the {where}: the iteration has run {waited_ns / 1e9:.1f} s, past its deadline of "
        f"{deadline_ns / 1e9:.1f} s ({typical_text}; {progress.iterations_done} iterations done). "
        "The measuring thread was abandoned so the session can go on."
    )
    earlier = [t for t, _ in _abandoned if t.is_alive() and t is not worker]
    if earlier:
        summary += (f" {len(earlier)} thread(s) abandoned by earlier stalls are still blocked and may hold "
                    "what this one waits for.")
    lines = ["Stacks of every Python thread at the stall:"]
    lines += thread_stacks(highlight=worker)
    lines.append("")
    lines.append("Resources at the stall:")
    try:
        lines += (snapshot or resource_snapshot)()
    except Exception as exc:  # noqa: BLE001 - a snapshot must never hide the stall itself
        lines.append(f"  (snapshot failed: {exc!r})")
    return StallError(summary, "\n".join(lines), waited_ns=waited_ns, deadline_ns=deadline_ns, phase=where,
                      iterations_done=progress.iterations_done)


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
        from pytest_tfperf.probes import nvml

        describe = getattr(nvml, "describe_devices", None)
        if describe is not None:
            lines += ["  " + ln for ln in describe()]
    return lines

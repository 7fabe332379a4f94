"""Hard deadlines for the two steps of a profiled pass that no clock inside them can stop.

- ``tf.profiler.experimental.stop()`` (TensorFlow collects the trace and writes the ``.xplane.pb``) is one
  call into C++ that releases the GIL while it works (measured: a ticking thread kept ticking through it), so
  a worker thread with a deadline bounds it: ``in_thread``. A stop that never returns leaves its thread (a
  daemon) behind, holding TensorFlow's profiler lock: the caller must not start the profiler again while it
  lives (``capture`` refuses, in one line).
- Parsing the ``.xplane.pb`` (``XSpace.ParseFromString``) is one C call that holds the GIL from start to end
  (measured: no tick of another thread during a 250 ms parse), so no thread of this process can give up on it;
  ``in_child`` runs the whole read (parse and summary) in a forked child and kills it at the deadline. A fork
  costs 15-30 ms here (a TensorFlow process). A child asleep without CPU time is stuck (a fork of a
  multi-threaded process can deadlock): it is killed and the read forked again within the same deadline.
  Where ``os.fork`` does not exist (Windows) the read runs in this process, bounded by the profile's size cap
  and the reader's own deadline checks between events.

No TensorFlow here, and nothing that knows what is being run.
"""

from __future__ import annotations

import math
import os
import pickle
import select
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class DeadlineExceeded(Exception):
    """The call did not finish within its deadline (the message says which call and how long it had)."""


def in_thread(fn: Callable[[], T], timeout_s: float, what: str) -> tuple[T | None, threading.Thread | None]:
    """``fn()`` on a daemon thread, waited for at most ``timeout_s``: (its result, None), or (None, the thread still
    running it) past the deadline. ``fn``'s exception is raised here."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=run, name=f"tfperf-{what}", daemon=True)
    thread.start()
    thread.join(max(0.0, timeout_s))
    if thread.is_alive():
        return None, thread
    if "error" in box:
        raise box["error"]
    return box.get("value"), None


def can_fork() -> bool:
    return hasattr(os, "fork") and hasattr(select, "poll")


# A child with no CPU time for this long while asleep is stuck, not slow: a parse never sleeps, and a fork of a
# multi-threaded process can deadlock in the child on a lock another thread held at the fork (CPython warns of
# it from 3.12). Seen once in CI: a 30 ms calibration read hit its 60 s deadline under load 1.2.
STALL_S = 5.0
# Forks tried per read before a stuck child becomes the reason; the read's deadline bounds them all together.
ATTEMPTS = 3


class _Stalled(Exception):
    pass


def child_cpu(pid: int) -> tuple[str, int] | None:
    """(state letter, user + system clock ticks) of process ``pid`` from /proc, or None where there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    try:  # after the name: state, ppid, ... utime (14th field of the line) and stime (15th)
        return fields[0].decode(), int(fields[11]) + int(fields[12])
    except (IndexError, ValueError):
        return None


def in_child(fn: Callable[[], T], timeout_s: float, what: str, *,
             clock: Callable[[], float] = time.monotonic, stall_s: float = STALL_S,
             cpu: Callable[[int], tuple[str, int] | None] = child_cpu, attempts: int = ATTEMPTS) -> T:
    """``fn()`` in a forked child, its result (pickled) back here; killed and DeadlineExceeded past ``timeout_s``.

    A child asleep with no CPU time for ``stall_s`` is killed and the read forked again, at most ``attempts``
    forks within the one deadline. ``fn``'s exception is raised here (as itself when it pickles, else as a
    RuntimeError naming it). Without ``os.fork`` it runs here, unbounded by this function.
    """
    if not can_fork():
        return fn()
    deadline = clock() + max(0.0, timeout_s)
    for attempt in range(1, max(1, attempts) + 1):
        try:
            return _in_one_child(fn, deadline, timeout_s, what, clock=clock, stall_s=stall_s, cpu=cpu)
        except _Stalled:
            if attempt >= attempts or clock() >= deadline:
                raise DeadlineExceeded(
                    f"{what}: its process was stuck {attempt} times (asleep with no CPU time for {stall_s:g} s; "
                    "a fork of a multi-threaded process deadlocked)") from None
    raise AssertionError("unreachable")  # pragma: no cover


def _in_one_child(fn: Callable[[], T], deadline: float, timeout_s: float, what: str, *,
                  clock: Callable[[], float], stall_s: float, cpu: Callable[[int], tuple[str, int] | None]) -> T:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's code, never flushes the parent's buffers
        status = 0
        try:
            os.close(read_fd)
            try:
                payload = pickle.dumps((True, fn()))
            except BaseException as exc:  # noqa: BLE001 - sent to the parent
                try:
                    payload = pickle.dumps((False, exc))
                except Exception:  # noqa: BLE001 - an exception that does not pickle
                    payload = pickle.dumps((False, RuntimeError(f"{type(exc).__name__}: {exc}")))
            view = memoryview(payload)
            while view:
                view = view[os.write(write_fd, view):]
        except BaseException:  # noqa: BLE001
            status = 1
        finally:
            os._exit(status)
    os.close(write_fd)
    chunks: list[bytes] = []
    # poll, not select: a TensorFlow process may hold more than select's 1024 descriptors
    poller = select.poll()
    poller.register(read_fd, select.POLLIN | select.POLLHUP)
    ticks, since = -1, clock()
    try:
        while True:
            left = deadline - clock()
            ready = poller.poll(max(1, math.ceil(min(left, 0.25) * 1000))) if left > 0 else []
            if ready:
                chunk = os.read(read_fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
                ticks, since = -1, clock()
                continue
            now = clock()
            if now >= deadline:
                _kill(pid)
                pid = 0
                raise DeadlineExceeded(f"{what} took longer than {timeout_s:g} s")
            seen = cpu(pid)
            if seen is None or seen[0] != "S" or seen[1] != ticks:
                ticks, since = (seen[1] if seen else -1), now
            elif now - since >= stall_s:
                _kill(pid)
                pid = 0
                raise _Stalled
    finally:
        os.close(read_fd)
        if pid:
            os.waitpid(pid, 0)
    if not chunks:
        raise RuntimeError(f"{what}: the reading process ended without an answer")
    ok, value = pickle.loads(b"".join(chunks))
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)

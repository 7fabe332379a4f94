"""Freeze the session that is not being timed: SIGSTOP while the other one runs its round.

Why: a tf.data pipeline keeps working while its consumer is idle. Between two
of its timed rounds a side's prefetch and parallel-map threads refill their
buffers, on the same cores the other side is timing, and the next round then
starts with elements made for free. How much depends on the buffer sizes that
tf.data's autotuner chose in that process, a state that lasts as long as the
process: two identical pipelines taking turns read 10-40% apart, for a whole
session. A stopped process does nothing at all (every thread, TensorFlow's
included, stays where it was), so each side's rounds join into one continuous
run and neither side works on the other's time.

Linux only (the state is read from ``/proc``); elsewhere nothing is frozen and
the rounds take turns as before.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

WAIT_STOPPED_S = 1.0  # a stop lands within microseconds; past this the process is left to run


def supported() -> bool:
    return sys.platform.startswith("linux") and hasattr(signal, "SIGSTOP") and Path("/proc/self/stat").exists()


def _state(pid: int) -> str:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # "pid (comm) S ...": comm may hold spaces and parentheses, the state follows the last ')'.
    return text[text.rfind(")") + 2:][:1]


def stop(pid: int) -> bool:
    """Stop ``pid`` and wait until it is stopped; False when it could not be (then it runs on)."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except OSError:
        return False
    deadline = time.monotonic() + WAIT_STOPPED_S
    while time.monotonic() < deadline:
        if _state(pid) in ("T", "t"):
            return True
        time.sleep(0.0002)
    cont(pid)
    return False


def cont(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGCONT)
    except OSError:
        pass


# The guard: a partner stops this process for each of its rounds and lets it run again after. A partner that dies
# (killed, out of memory, a crash in TensorFlow) before it does would leave this process stopped for good, and the
# CI job hanging; so a small process of its own, started beside each partner, lets this one run when it is stopped
# while that partner is gone. (A stopped partner is no sign: while one partner of a confirmation runs its round,
# the other is stopped, and so is this process.) It reads two /proc files ten times a second.
_GUARD = """
import os, signal, sys, time
coordinator, partner = int(sys.argv[1]), int(sys.argv[2])
def state(pid):
    try:
        text = open(f"/proc/{pid}/stat").read()
    except OSError:
        return ""
    return text[text.rfind(")") + 2:][:1]
while state(coordinator) not in ("", "Z"):
    if state(partner) in ("", "Z"):
        if state(coordinator) in ("T", "t"):
            os.kill(coordinator, signal.SIGCONT)
        break
    time.sleep(0.1)
"""


def guard(coordinator_pid: int, partner_pid: int) -> subprocess.Popen[bytes] | None:
    """Start the guard for one partner process (None where nothing is frozen); stop it with ``end_guard``."""
    if not supported():
        return None
    try:
        return subprocess.Popen([sys.executable, "-S", "-c", _GUARD, str(coordinator_pid), str(partner_pid)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        return None


def end_guard(process: subprocess.Popen[bytes] | None) -> None:
    if process is not None and process.poll() is None:
        process.kill()
        process.wait()

"""against.freeze on real processes: a stopped process is stopped, and the guard lets a coordinator run again
when the partner that stopped it is gone."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from pytest_tfperf.against import freeze

pytestmark = pytest.mark.skipif(not freeze.supported(), reason="freezing needs Linux's /proc")


def sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def wait_for(predicate, timeout_s: float = 15.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_stop_waits_until_the_process_is_stopped_and_cont_lets_it_run() -> None:
    p = sleeper()
    try:
        assert freeze.stop(p.pid)
        assert freeze._state(p.pid) == "T"
        freeze.cont(p.pid)
        assert wait_for(lambda: freeze._state(p.pid) in ("S", "R"))
    finally:
        p.kill()
        p.wait()


def test_stopping_a_process_that_is_gone_says_so() -> None:
    p = sleeper()
    p.kill()
    p.wait()
    assert not freeze.stop(p.pid)


def test_the_guard_lets_a_stopped_coordinator_run_when_its_partner_dies() -> None:
    coordinator, partner = sleeper(), sleeper()
    guard = freeze.guard(coordinator.pid, partner.pid)
    try:
        assert freeze.stop(coordinator.pid)
        time.sleep(1.0)
        assert freeze._state(coordinator.pid) == "T"  # the partner lives: its round may be long, nothing is done
        assert freeze.stop(partner.pid)
        time.sleep(1.0)
        assert freeze._state(coordinator.pid) == "T"  # a stopped partner (the other one of a pair runs): nothing
        freeze.cont(partner.pid)
        partner.kill()
        partner.wait()
        assert wait_for(lambda: freeze._state(coordinator.pid) in ("S", "R"))
    finally:
        freeze.end_guard(guard)
        for p in (coordinator, partner):
            p.kill()
            p.wait()


def test_the_guard_ends_with_its_coordinator() -> None:
    coordinator, partner = sleeper(), sleeper()
    guard = freeze.guard(coordinator.pid, partner.pid)
    assert guard is not None
    try:
        coordinator.kill()
        coordinator.wait()
        assert wait_for(lambda: guard.poll() is not None)
    finally:
        freeze.end_guard(guard)
        partner.kill()
        partner.wait()

"""Hard deadlines on the profiler's stop and the profile's parse: a fake profiler whose stop hangs, a parse that
never ends, a fake clock for the child's deadline. The verdict-side of it (one line, the test's result
unchanged): tests/plugin/test_explain_default.py."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_tfperf.profiling import bounded, capture
from pytest_tfperf.profiling.capture import profile_step
from pytest_tfperf.profiling.xspace import ProfileUnavailable
from tests.unit.test_profiling_capture import FakeProfiler, fake  # noqa: F401  (the fixture)


def test_a_call_on_a_thread_gives_its_result_its_exception_or_the_thread_still_running() -> None:
    assert bounded.in_thread(lambda: 7, 5.0, "quick") == (7, None)
    with pytest.raises(KeyError):
        bounded.in_thread(lambda: {}["x"], 5.0, "raises")
    release = threading.Event()
    value, thread = bounded.in_thread(release.wait, 0.01, "hangs")
    assert value is None and thread is not None and thread.is_alive() and thread.daemon
    release.set()
    thread.join(5)


@pytest.mark.skipif(not bounded.can_fork(), reason="no os.fork here: the read runs in this process")
def test_a_read_in_a_child_returns_its_value_or_raises_its_exception() -> None:
    assert bounded.in_child(lambda: {"side": (1, 2.5)}, 30.0, "reading") == {"side": (1, 2.5)}

    def unreadable() -> None:
        raise ProfileUnavailable("profile host.xplane.pb is 900 MiB")
    with pytest.raises(ProfileUnavailable, match="900 MiB"):
        bounded.in_child(unreadable, 30.0, "reading")


@pytest.mark.skipif(not bounded.can_fork(), reason="no os.fork here: the read runs in this process")
def test_a_child_past_its_deadline_is_killed_and_says_so() -> None:
    # A fake clock past the deadline at the first look: no waiting at all, the child is killed at once.
    ticks = iter([0.0] + [100.0] * 10)
    with pytest.raises(bounded.DeadlineExceeded, match="reading host.xplane.pb took longer than 60 s"):
        bounded.in_child(lambda: time.sleep(3600), 60.0, "reading host.xplane.pb", clock=lambda: next(ticks))


@pytest.mark.skipif(not bounded.can_fork(), reason="no os.fork here: the read runs in this process")
def test_a_stuck_child_is_forked_again_within_the_same_deadline(tmp_path: Path) -> None:
    # The first child sleeps for ever, as one deadlocked on a lock held at the fork would; the second answers.
    flag = tmp_path / "forked-once"

    def stuck_the_first_time() -> str:
        if not flag.exists():
            flag.touch()
            time.sleep(3600)
        return "read"
    asleep = lambda pid: ("S", 7)  # noqa: E731 - a child that never gets a tick of CPU
    started = time.monotonic()
    assert bounded.in_child(stuck_the_first_time, 60.0, "reading", stall_s=0.2, cpu=asleep) == "read"
    assert time.monotonic() - started < 30


@pytest.mark.skipif(not bounded.can_fork(), reason="no os.fork here: the read runs in this process")
def test_a_child_stuck_every_time_is_a_reason_that_says_so() -> None:
    with pytest.raises(bounded.DeadlineExceeded, match=r"^reading host.xplane.pb: its process was stuck 2 times "
                                                        r"\(asleep with no CPU time for 0.1 s"):
        bounded.in_child(lambda: time.sleep(3600), 60.0, "reading host.xplane.pb", stall_s=0.1,
                         cpu=lambda pid: ("S", 0), attempts=2)


@pytest.mark.skipif(not bounded.can_fork(), reason="no os.fork here: the read runs in this process")
def test_a_child_that_runs_or_gains_cpu_time_is_never_taken_for_stuck() -> None:
    ticks = iter(range(10**6))
    running = lambda pid: ("S", next(ticks))  # noqa: E731 - asleep at each look, but with new CPU time each time
    assert bounded.in_child(lambda: time.sleep(0.6) or 1, 60.0, "reading", stall_s=0.05, cpu=running) == 1
    assert bounded.in_child(lambda: time.sleep(0.6) or 2, 60.0, "reading", stall_s=0.05,
                            cpu=lambda pid: ("R", 0)) == 2
    assert bounded.in_child(lambda: time.sleep(0.6) or 3, 60.0, "reading", stall_s=0.05,
                            cpu=lambda pid: None) == 3  # no /proc: only the deadline


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="no /proc here")
def test_the_cpu_probe_reads_state_and_ticks_from_proc() -> None:
    import os
    state, ticks = bounded.child_cpu(os.getpid()) or ("?", -1)
    assert state == "R" and ticks >= 0  # this process, reading its own stat, is running
    assert bounded.child_cpu(2**22 + 12345) is None  # past pid_max: no such process


@pytest.fixture
def hanging_stop(fake: FakeProfiler, monkeypatch: pytest.MonkeyPatch) -> threading.Event:  # noqa: F811
    """The fake profiler's stop blocks until the returned event is set (set again after the test)."""
    release = threading.Event()
    module = fake.module()
    stop = module.profiler.experimental.stop

    def hangs() -> None:
        release.wait()
        stop()
    module.profiler.experimental.stop = hangs
    monkeypatch.setattr(capture, "_profiler_module", lambda: module)
    monkeypatch.setattr(capture, "_stuck", {})
    yield release
    release.set()


def test_a_stop_that_never_returns_is_a_reason_and_no_pass_starts_until_it_does(
        hanging_stop: threading.Event, fake: FakeProfiler, tmp_path: Path) -> None:  # noqa: F811
    outcome = profile_step(lambda: None, tmp_path / "a", windows=1, iterations=1, stop_timeout_s=0.01)
    assert outcome.profile is None
    assert outcome.line == ("no profile: stopping the profiler took longer than 0.01 s "
                            "(tf.profiler.experimental.stop() had not returned; no profile)")
    # TensorFlow's profiler lock is held by that stop: starting again would wait for ever, so nothing starts
    starts = fake.events.count("start")
    again = profile_step(lambda: None, tmp_path / "b", windows=1, iterations=1, stop_timeout_s=0.01)
    assert again.reason.startswith("an earlier tf.profiler.experimental.stop() has not returned")
    assert fake.events.count("start") == starts
    # once it returned, profiling works again
    hanging_stop.set()
    capture._stuck["thread"].join(5)
    capture._profiler_module().profiler.experimental.stop = lambda: None  # no more hanging
    assert capture._stuck_stop() is None


@pytest.mark.skipif(not bounded.can_fork(), reason="no os.fork here: the read runs in this process")
def test_a_parse_that_never_ends_is_a_reason_and_the_raw_profile_is_kept(
        fake: FakeProfiler, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    def endless(path: Path, max_bytes: int) -> Any:
        time.sleep(3600)  # a parse holds the GIL: only the child it runs in can be stopped
    monkeypatch.setattr(capture, "load_xspace", endless)
    outcome = profile_step(lambda: None, tmp_path, windows=1, iterations=1, parse_timeout_s=0.2)
    assert outcome.profile is None
    assert outcome.reason == (f"reading host.xplane.pb took longer than 0.2 s (the profile is kept: "
                              f"tensorboard --logdir {tmp_path})")

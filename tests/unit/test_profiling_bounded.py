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

"""The profiled pass never fails the caller for profiler trouble: each kind gives "no profile: <reason>".

TensorFlow's profiler is replaced by a fake here (``capture._profiler_module``);
tests/plugin/test_profiling_tensorflow.py runs the real one.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_tfperf.profiling import capture
from pytest_tfperf.profiling.capture import profile_pipeline, profile_step, profile_steps
from pytest_tfperf.profiling.xspace import ProfileUnavailable


class AlreadyExistsError(Exception):
    """Named as TensorFlow's error is: the profiler says another session is running."""


class FakeProfiler:
    def __init__(self, start_error: Exception | None = None, stop_error: Exception | None = None,
                 writes: bool = True) -> None:
        self.start_error, self.stop_error, self.writes = start_error, stop_error, writes
        self.events: list[str] = []
        self.sides: list[str | None] = []
        self.logdir: Path | None = None

    def module(self) -> Any:
        profiler = self

        class Trace:
            def __init__(self, name: str, **stats: Any) -> None:
                self.name = name
                self.side = stats.get("side")

            def __enter__(self) -> None:
                profiler.events.append(f"enter {self.name}")
                profiler.sides.append(self.side)

            def __exit__(self, *exc: object) -> None:
                profiler.events.append(f"exit {self.name}")

        def start(logdir: str, options: Any = None) -> None:
            if self.start_error:
                raise self.start_error
            self.logdir = Path(logdir)
            self.events.append("start")

        def stop() -> None:
            self.events.append("stop")
            if self.stop_error:
                raise self.stop_error
            if self.writes and self.logdir is not None:
                run = self.logdir / "plugins" / "profile" / "2026_11_26_13_00_00"
                run.mkdir(parents=True, exist_ok=True)
                (run / "host.xplane.pb").write_bytes(b"fake")

        experimental = SimpleNamespace(start=start, stop=stop, Trace=Trace,
                                       ProfilerOptions=lambda **kw: SimpleNamespace(**kw))
        return SimpleNamespace(profiler=SimpleNamespace(experimental=experimental))


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeProfiler:
    profiler = FakeProfiler()
    monkeypatch.setattr(capture, "_profiler_module", profiler.module)
    monkeypatch.setattr(capture, "load_xspace", lambda path, max_bytes: "space")
    monkeypatch.setattr(capture, "summarise_sides", lambda space, iterations, **kw: {
        side: SimpleNamespace(windows=3, name=side, iterations=n, **kw) for side, n in iterations.items()})
    return profiler


def test_windows_of_iterations_run_inside_one_session_each_marked(fake: FakeProfiler, tmp_path: Path) -> None:
    calls = []
    outcome = profile_step(lambda: calls.append(fake.events[-1] if fake.events else "warm"), tmp_path,
                           windows=3, iterations=2, warmup=1)
    assert outcome.profile is not None and outcome.reason is None
    assert outcome.run_dir is not None and outcome.run_dir.endswith("2026_11_26_13_00_00")
    assert fake.events == ["start"] + ["enter tfperf_window", "exit tfperf_window"] * 3 + ["stop"]
    assert len(calls) == 1 + 3 * 2  # the warm-up call ran before the profiler started
    assert outcome.line.startswith("profiled 3 x 2 iterations in ")
    assert 0 <= outcome.seconds_windows <= outcome.seconds and 0 <= outcome.seconds_stop <= outcome.seconds


def test_another_profiler_session_is_a_reason_not_an_error(fake: FakeProfiler, tmp_path: Path) -> None:
    fake.start_error = AlreadyExistsError("Another profiler is running.")
    outcome = profile_step(lambda: None, tmp_path)
    assert outcome.profile is None
    assert outcome.line == ("no profile: another profiler session is running (TensorFlow allows one at a time; "
                            "a TensorBoard callback?)")


def test_any_other_start_failure_says_what_it_was(fake: FakeProfiler, tmp_path: Path) -> None:
    fake.start_error = RuntimeError("permission denied\nsecond line")
    assert profile_step(lambda: None, tmp_path).line == \
        "no profile: the profiler did not start: RuntimeError: permission denied"


def test_a_tensorflow_without_the_profiler_is_a_reason(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def missing() -> Any:
        raise ProfileUnavailable("this TensorFlow has no tf.profiler.experimental (start, stop, Trace)")
    monkeypatch.setattr(capture, "_profiler_module", missing)
    ran = []
    outcome = profile_step(lambda: ran.append(1), tmp_path, warmup=0)
    assert outcome.line == "no profile: this TensorFlow has no tf.profiler.experimental (start, stop, Trace)"
    assert ran == []  # nothing profiled, nothing run


def test_nothing_written_and_a_failed_stop_are_reasons(fake: FakeProfiler, tmp_path: Path) -> None:
    fake.writes = False
    assert profile_step(lambda: None, tmp_path / "a").line.startswith("no profile: the profiler wrote no .xplane.pb")
    fake.stop_error = RuntimeError("disk full")
    assert profile_step(lambda: None, tmp_path / "b").line == \
        "no profile: the profiler did not stop cleanly: RuntimeError: disk full"


def test_a_profile_too_large_or_unreadable_is_a_reason(fake: FakeProfiler, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    def too_big(path: Path, max_bytes: int) -> Any:
        raise ProfileUnavailable("profile host.xplane.pb is 900 MiB, over the 256 MiB read in time")
    monkeypatch.setattr(capture, "load_xspace", too_big)
    assert "900 MiB" in profile_step(lambda: None, tmp_path / "a").line

    def garbage(path: Path, max_bytes: int) -> Any:
        raise ValueError("Error parsing message")
    monkeypatch.setattr(capture, "load_xspace", garbage)
    assert profile_step(lambda: None, tmp_path / "b").line == \
        "no profile: the profile could not be read: ValueError: Error parsing message"


def test_the_steps_own_exception_is_raised_after_the_profiler_stops(fake: FakeProfiler, tmp_path: Path) -> None:
    calls = []

    def step() -> None:
        calls.append(1)
        if len(calls) > 2:
            raise KeyError("the test's bug")
    with pytest.raises(KeyError, match="the test's bug"):
        profile_step(step, tmp_path, warmup=1)
    assert fake.events[-1] == "stop"


def test_bad_window_counts_are_refused(fake: FakeProfiler, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="windows and iterations must be >= 1, got 0 and 5"):
        profile_step(lambda: None, tmp_path, windows=0, iterations=5)


def test_a_pipeline_is_iterated_again_when_it_ends_as_epochs_are(fake: FakeProfiler, tmp_path: Path) -> None:
    seen: list[int] = []
    outcome = profile_pipeline([1, 2, 3], tmp_path, windows=2, iterations=4, warmup=1, consume=seen.append)
    assert outcome.profile is not None
    assert seen == [1, 2, 3, 1, 2, 3, 1, 2, 3]


def test_a_pipeline_warms_up_a_window_so_buffered_elements_are_not_read_as_free(fake: FakeProfiler,
                                                                               tmp_path: Path) -> None:
    pulled: list[str] = []
    profile_pipeline(range(100), tmp_path, windows=2, iterations=5,
                     consume=lambda e: pulled.append(fake.events[-1] if fake.events else "before"))
    assert pulled[:5] == ["before"] * 5 and len(pulled) == 15


def test_sides_share_one_session_their_windows_alternating_each_marked_with_its_side(fake: FakeProfiler,
                                                                                   tmp_path: Path) -> None:
    ran: list[str] = []
    outcomes = profile_steps({"base": lambda: ran.append("b"), "changed": lambda: ran.append("c")}, tmp_path,
                             windows=4, iterations={"base": 2, "changed": 1}, warmup=1, settle={"changed": 1})
    assert fake.events.count("start") == 1 and fake.events.count("stop") == 1
    # A B, then B A: neither side is always the one profiled after the other
    assert fake.sides == ["base", "changed", "changed", "base", "base", "changed", "changed", "base"]
    assert ran[:2] == ["b", "c"]  # warm-up, before the profiler started
    assert ran.count("b") == 1 + 4 * 2 and ran.count("c") == 1 + 4 * (1 + 1)  # changed settles a call each window
    assert outcomes["base"].profile.iterations == 2 and outcomes["changed"].profile.iterations == 1
    assert outcomes["base"].profile.name == "base" and outcomes["base"].run_dir == outcomes["changed"].run_dir


def test_trouble_in_a_shared_session_is_every_sides_reason(fake: FakeProfiler, tmp_path: Path) -> None:
    fake.start_error = AlreadyExistsError("busy")
    outcomes = profile_steps({"a": lambda: None, "b": lambda: None}, tmp_path)
    assert {o.reason for o in outcomes.values()} == {
        "another profiler session is running (TensorFlow allows one at a time; a TensorBoard callback?)"}
    assert all(o.profile is None for o in outcomes.values())

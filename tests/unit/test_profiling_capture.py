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
from pytest_tfperf.profiling.capture import profile_step, profile_steps
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


# -- a budget: the pass sized from a calibration session, on a fake clock ------------------------------------

class FakeClock:
    """``time.monotonic`` for capture: steps, stopping and reading advance it by what they are told to cost."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clocked(fake: FakeProfiler, monkeypatch: pytest.MonkeyPatch) -> tuple[FakeProfiler, FakeClock, dict[str, Any]]:
    """The fake profiler on a fake clock: each step call costs ``cost["call"]`` seconds, and stopping the
    profiler costs ``cost["event"]`` per call profiled since it started (``EVENTS`` events a call)."""
    clock = FakeClock()
    cost: dict[str, Any] = {"call": 0.01, "event": 2e-6, "calls": 0, "calibration": {}}
    monkeypatch.setattr(capture, "time", SimpleNamespace(monotonic=clock.monotonic))
    module = fake.module()
    experimental = module.profiler.experimental
    start, stop = experimental.start, experimental.stop

    def timed_start(logdir: str, options: Any = None) -> None:
        cost["calls"] = 0
        start(logdir, options)

    def timed_stop() -> None:
        clock.now += cost["calls"] * EVENTS * cost["event"]
        stop()

    experimental.start, experimental.stop = timed_start, timed_stop
    monkeypatch.setattr(capture, "_profiler_module", lambda: module)

    def window_costs(space: Any, **kw: Any) -> dict[str, tuple[int, int, float]]:
        # the calibration's own windows: every side's calls, their events and time
        return {side: (1, n * EVENTS, n * cost["call"]) for side, n in cost["calibration"].items()}
    monkeypatch.setattr(capture, "window_costs", window_costs)
    calibrate = capture._calibrate

    def calibrating(*args: Any, **kw: Any) -> Any:  # the calls made meanwhile are the calibration's
        cost["calibrating"] = True
        try:
            return calibrate(*args, **kw)
        finally:
            cost["calibrating"] = False
    monkeypatch.setattr(capture, "_calibrate", calibrating)
    return fake, clock, cost


EVENTS = 3000


def _step(clock: FakeClock, cost: dict[str, Any], side: str, ran: list[str]) -> Any:
    def step() -> None:
        clock.now += cost["call"]
        cost["calls"] += 1
        ran.append(side)
        if cost.get("calibrating"):
            cost["calibration"][side] = cost["calibration"].get(side, 0) + 1
    return step


def test_a_budget_sizes_the_windows_from_a_calibration_session_deleted_after(
        clocked: tuple[FakeProfiler, FakeClock, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake, clock, cost = clocked
    ran: list[str] = []
    folders: list[str] = []
    real_mkdtemp = capture.tempfile.mkdtemp
    monkeypatch.setattr(capture.tempfile, "mkdtemp", lambda prefix: folders.append(real_mkdtemp(prefix=prefix))
                        or folders[-1])
    started = clock.now
    # unbounded, this pass would take 6 windows x 40 calls x 10 ms = 2.4 s, then 240 x 3,000 events x 2 us to stop
    outcome = profile_step(_step(clock, cost, "step", ran), tmp_path, windows=6, iterations=40, warmup=1,
                           budget_s=1.0, min_windows=5)
    assert fake.events.count("start") == 2 and fake.events.count("stop") == 2  # the calibration, then the pass
    assert cost["calibration"] == {"step": 10}  # a quarter window
    assert folders and not Path(folders[0]).exists()  # the calibration's profile is not left behind
    plan = outcome.plan
    assert plan is not None and plan.fits and plan.windows == 6 and 1 <= plan.iterations["step"] < 40
    assert outcome.windows_run == 6 and outcome.profile.iterations == plan.iterations["step"]
    assert ran.count("step") == 1 + 10 + 6 * plan.iterations["step"]
    assert clock.now - started <= 1.0 and outcome.seconds == pytest.approx(clock.now - started)
    assert outcome.seconds_calibration > 0 and outcome.seconds_per_event == pytest.approx(2e-6)
    assert not outcome.over_budget


def test_a_machine_slower_than_calibrated_cuts_windows_not_the_budget(
        clocked: tuple[FakeProfiler, FakeClock, dict[str, Any]], tmp_path: Path) -> None:
    fake, clock, cost = clocked
    ran: list[str] = []
    step = _step(clock, cost, "step", ran)

    def slowing() -> None:
        if fake.events.count("start") == 2:  # the windows run 3x slower than the calibration saw
            clock.now += 2 * cost["call"]
        step()
    started = clock.now
    outcome = profile_step(slowing, tmp_path, windows=8, iterations=40, warmup=0, budget_s=2.0, min_windows=4)
    assert 4 <= outcome.windows_run < outcome.plan.windows == 8
    assert fake.events.count("enter tfperf_window") == 1 + outcome.windows_run
    assert clock.now - started <= 2.0


def test_a_budget_too_small_for_min_windows_of_one_call_says_so(
        clocked: tuple[FakeProfiler, FakeClock, dict[str, Any]], tmp_path: Path) -> None:
    _, clock, cost = clocked
    cost["call"] = 0.3
    outcome = profile_step(_step(clock, cost, "step", []), tmp_path, windows=5, iterations=3, warmup=1,
                           budget_s=1.0)
    assert outcome.over_budget and outcome.windows_run == 5 and outcome.plan.iterations == {"step": 1}
    assert outcome.profile is not None  # the smallest honest pass still explains


def test_trouble_in_the_calibration_session_is_the_reason(
        clocked: tuple[FakeProfiler, FakeClock, dict[str, Any]], tmp_path: Path) -> None:
    fake, clock, cost = clocked
    fake.start_error = AlreadyExistsError("busy")
    outcome = profile_step(_step(clock, cost, "step", []), tmp_path, budget_s=1.0)
    assert outcome.profile is None and outcome.reason.startswith("another profiler session is running")
    fake.start_error, fake.writes = None, False
    outcome = profile_step(_step(clock, cost, "step", []), tmp_path, budget_s=1.0)
    assert outcome.reason.startswith("the profiler wrote no .xplane.pb (calibration session")


def test_with_a_budget_the_warm_up_runs_after_the_calibration_right_before_the_windows(
        clocked: tuple[FakeProfiler, FakeClock, dict[str, Any]], tmp_path: Path) -> None:
    fake, clock, cost = clocked
    seen: list[str] = []
    step = _step(clock, cost, "step", [])

    def pull() -> None:  # what the profiler had done last when each call ran
        seen.append(fake.events[-1] if fake.events else "nothing")
        step()
    outcome = profile_step(pull, tmp_path, windows=5, iterations=40, warmup=40, budget_s=1.0)
    assert outcome.plan is not None, outcome.reason
    n = outcome.plan.iterations["step"]
    assert 1 <= n < 40
    calibration = seen[:10]  # a quarter window, in the calibration session's window
    assert calibration == ["enter tfperf_window"] * 10
    # then a window's worth as planned (not the 40 asked for), after the calibration stopped, before the pass starts
    assert seen[10:10 + n] == ["stop"] * n and seen[10 + n] == "enter tfperf_window"


def test_each_window_carries_the_process_cpu_clock_per_iteration(fake: FakeProfiler, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU clock is read around each window apart from the profile: the attribution checks self times by it."""
    from pytest_tfperf.profiling.profile_model import Profile

    monkeypatch.setattr(capture, "summarise_sides", lambda space, iterations, **kw: {
        side: Profile(name=side, iterations=n, wall=(0.01,) * 3, groups=(), other=(0.0,) * 3, smallest_kept=0.0,
                      input_wait=(0.0,) * 3, elements=0.0) for side, n in iterations.items()})
    clock = iter(range(100))
    monkeypatch.setattr(capture, "_process_time", lambda: 0.5 * next(clock) ** 2)
    outcomes = profile_steps({"a": lambda: None, "b": lambda: None}, tmp_path, windows=3,
                             iterations={"a": 2, "b": 1}, warmup=0)
    # windows a b | b a | a b: clock reads (0,1) (2,3) | (4,5) (6,7) | (8,9) (10,11), each t^2/2
    assert outcomes["a"].profile.cpu == pytest.approx((0.5 / 2, 6.5 / 2, 8.5 / 2))
    assert outcomes["b"].profile.cpu == pytest.approx((2.5, 4.5, 10.5))
    assert Profile.from_dict(outcomes["b"].profile.to_dict()).cpu == pytest.approx((2.5, 4.5, 10.5))


def test_before_windows_runs_once_after_the_profiler_started_and_right_before_the_first_window(
        clocked: tuple[FakeProfiler, FakeClock, dict[str, Any]], tmp_path: Path) -> None:
    """A pipeline's buffers refill during the calibration session and the profiler's start: the settling
    (``explain.settle``) must come after both, the last thing before the windows, unmarked."""
    fake, clock, cost = clocked
    step = _step(clock, cost, "step", [])
    when: list[str] = []
    outcome = profile_step(step, tmp_path, windows=5, iterations=4, budget_s=1.0,
                           before_windows=lambda: when.append(fake.events[-1]))
    assert outcome.plan is not None, outcome.reason
    assert when == ["start"]  # once: the main session had started, and no window yet
    assert fake.events[fake.events.index("start", fake.events.index("stop") + 1) + 1] == "enter tfperf_window"

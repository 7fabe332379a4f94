"""A profiled pass of its own: run a step (or pull a tf.data pipeline) under TensorFlow's profiler, and read it.

The pass runs ``windows`` windows of ``iterations`` iterations each, every
window marked with a TraceMe event, under one profiler session
(``tf.profiler.experimental.start/stop``). ``profile_steps`` profiles the
sides of a comparison in that one session, their windows alternating, so
that the machine's drift falls on every side alike. The raw profile stays in
the caller's ``logdir`` (``tensorboard --logdir <logdir>`` opens it in the
Profile tab); the compact ``Profile`` of each side is read from it.

Profiling adds about 20% to a step at host tracer level 2, so this pass is
never one of the measured rounds. Trouble with the profiler is never raised
into the caller: another profiler session running, a TensorFlow without the
profiler or without the XPlane protobuf, a profile too large to read in time
all give a ``ProfileOutcome`` without a profile and with the reason in one
line. An exception from the step itself is the caller's and is raised (after
the profiler is stopped).

TensorFlow is imported here lazily, inside the functions that profile.
"""

from __future__ import annotations

import math
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pytest_tfperf.profiling import bounded
from pytest_tfperf.profiling.profile_budget import PassPlan, SideCost, plan_pass, window_deadline_s
from pytest_tfperf.profiling.profile_model import Profile
from pytest_tfperf.profiling.xspace import (
    WINDOW_MARKER, ProfileUnavailable, load_xspace, summarise_sides, window_costs,
)

# The process's CPU seconds, every thread, bound here: the budget's tests replace ``time`` with a fake clock.
_process_time = time.process_time

DEFAULT_WINDOWS = 5
DEFAULT_ITERATIONS = 10
DEFAULT_PARSE_TIMEOUT_S = 60.0
# The longest ``tf.profiler.experimental.stop()`` may take (collecting and writing the profile; 0.3 s for 3.5 MiB
# here). Past it the pass has no profile, and no pass starts in this process while that stop still runs: it holds
# TensorFlow's profiler lock, and a ``start`` would wait on it for ever.
DEFAULT_STOP_TIMEOUT_S = 60.0
DEFAULT_MAX_BYTES = 256 * 2**20
NOT_LOADED = "the test did not load TensorFlow: its profiler has nothing to see"
# The calibration session profiles a quarter of each side's window (at least one call): enough events to
# measure its events and time per call, a few % of the pass.
CALIBRATION_SHARE = 4


@dataclass(frozen=True, slots=True)
class ProfileOutcome:
    """A profile, or the one-line reason there is none; and what the pass cost."""

    profile: Profile | None
    reason: str | None
    run_dir: str | None  # the profiler's run folder (holds the .xplane.pb)
    seconds: float  # wall time of the whole pass: warm-up, profiled windows, stop and reading
    seconds_windows: float = 0.0  # of which the profiled windows themselves
    seconds_stop: float = 0.0  # of which stopping the profiler (TensorFlow collects and writes the .xplane.pb)
    seconds_calibration: float = 0.0  # of which the calibration session, when the pass had a budget
    seconds_read: float = 0.0  # of which reading the profile
    seconds_per_event: float = 0.0  # stopping and reading, per host event in a window (calibration's estimate)
    plan: PassPlan | None = None  # how the budget sized the pass (None without a budget)
    windows_run: int = 0  # windows each side ran (fewer than planned when the budget's deadline came first)

    @property
    def over_budget(self) -> bool:
        """Whether even the smallest pass (``min_windows`` of one iteration) did not fit in the budget."""
        return self.plan is not None and not self.plan.fits

    @property
    def line(self) -> str:
        if self.profile is None:
            return f"no profile: {self.reason}"
        return f"profiled {self.profile.windows} x {self.profile.iterations} iterations in {self.seconds:.1f} s"


def profile_step(step: Callable[[], Any], logdir: str | Path, *, name: str = "step",
                 windows: int = DEFAULT_WINDOWS, iterations: int = DEFAULT_ITERATIONS, warmup: int = 1,
                 top: int = 30, host_tracer_level: int = 2, parse_timeout_s: float = DEFAULT_PARSE_TIMEOUT_S,
                 max_bytes: int = DEFAULT_MAX_BYTES, budget_s: float | None = None,
                 min_windows: int | None = None, stop_timeout_s: float | None = None,
                 before_windows: Callable[[], object] | None = None) -> ProfileOutcome:
    """Profile ``windows`` windows of ``iterations`` calls of ``step`` (after ``warmup`` unprofiled calls);
    with ``budget_s``, the whole pass within it (see ``profile_steps``)."""
    return profile_steps({name: step}, logdir, windows=windows, iterations=iterations, warmup=warmup, top=top,
                         host_tracer_level=host_tracer_level, parse_timeout_s=parse_timeout_s,
                         max_bytes=max_bytes, budget_s=budget_s, min_windows=min_windows,
                         stop_timeout_s=stop_timeout_s,
                         before_windows=None if before_windows is None else {name: before_windows})[name]


def profile_steps(steps: Mapping[str, Callable[[], Any]], logdir: str | Path, *, windows: int = DEFAULT_WINDOWS,
                  iterations: int | Mapping[str, int] = DEFAULT_ITERATIONS, warmup: int = 1,
                  settle: int | Mapping[str, int] = 0, top: int = 30, host_tracer_level: int = 2,
                  parse_timeout_s: float = DEFAULT_PARSE_TIMEOUT_S, max_bytes: int = DEFAULT_MAX_BYTES,
                  budget_s: float | None = None, min_windows: int | None = None,
                  stop_timeout_s: float | None = None,
                  before_windows: Mapping[str, Callable[[], object]] | None = None) -> dict[str, ProfileOutcome]:
    """Profile several steps (the sides of a comparison) in ONE profiler session, their windows alternating.

    Round ``r`` runs one window of each side, in the given order on even
    rounds and reversed on odd ones (A B B A A B ...), so whatever the machine
    does meanwhile (load, frequency) falls on every side alike instead of on
    whichever side was profiled second; TensorFlow allows one profiler session
    at a time, so one session is also the only way to interleave. Each window
    is a TraceMe event ``tfperf_window`` with the side's name in its ``side``
    stat; the profile is read once and split by side. ``settle`` calls of a
    side run unmarked before each of its windows (a pipeline fills its buffer
    while the other sides run; pulled in the window, those elements would
    read as free). Every side's outcome shares the pass's timings and, when
    there is no profile, its reason.

    ``budget_s`` (the measured rounds' time) bounds the whole pass, warm-up,
    stop and reading included: a calibration session first measures each
    side's events and time per call and what an event costs to stop and read
    (``profiling.profile_budget``), then ``windows`` and ``iterations`` (and
    ``settle``, in proportion) are cut to fit, never raised, down to
    ``min_windows`` (default ``windows``) windows of one iteration; and no
    round of windows starts past the budget's deadline once ``min_windows``
    ran. The calibration's own profile is deleted. With a budget the warm-up
    runs after the calibration, just before the windows, and at most a
    window's worth of calls (the calibration's calls warm the step first).

    ``before_windows[side]`` runs once, unmarked, after the profiler started and right before the first
    window: last, so that nothing the pass does before its windows (the calibration, the profiler's start)
    leaves a pipeline's buffers full again (``explain.settle``).

    Stopping the profiler waits at most ``stop_timeout_s`` (default
    ``DEFAULT_STOP_TIMEOUT_S``) and reading the profile at most
    ``parse_timeout_s`` (``profiling.bounded``); past either the pass has no
    profile and its reason says so.
    """
    if not steps:
        raise ValueError("no step to profile")
    counts = {side: iterations if isinstance(iterations, int) else iterations[side] for side in steps}
    settles = {side: settle if isinstance(settle, int) else settle.get(side, 0) for side in steps}
    if windows < 1 or min(counts.values()) < 1:
        raise ValueError(f"windows and iterations must be >= 1, got {windows} and {iterations}")
    least = windows if min_windows is None else max(1, min(min_windows, windows))
    started = time.monotonic()
    extra: dict[str, Any] = {}

    def every(reason: str | None, run_dir: str | None = None, profiles: Mapping[str, Profile] | None = None,
              **timings: float) -> dict[str, ProfileOutcome]:
        seconds = time.monotonic() - started
        return {side: ProfileOutcome(profiles[side] if profiles else None, reason, run_dir, seconds, **timings,
                                     **extra)
                for side in steps}

    if budget_s is None:
        for step in steps.values():
            for _ in range(warmup):
                step()
    try:
        tf = _profiler_module()
    except ProfileUnavailable as exc:
        return every(str(exc))
    stuck = _stuck_stop()
    if stuck is not None:
        return every(stuck)
    deadline = None
    if budget_s is not None:
        calibrating = time.monotonic()
        planned = _calibrate(tf, steps, counts, settles, host_tracer_level=host_tracer_level,
                             parse_timeout_s=parse_timeout_s, max_bytes=max_bytes, stop_timeout_s=stop_timeout_s)
        extra["seconds_calibration"] = time.monotonic() - calibrating
        if isinstance(planned, str):
            return every(planned)
        costs, per_event = planned
        extra["seconds_per_event"] = per_event
        # The warm-up runs after the calibration, right before the windows: a pipeline refills its buffers while
        # the calibration's profile is stopped and read, and its first window would read those elements as free.
        # It is paid for in the plan (at most a window's worth of calls a side).
        warming = sum(min(warmup, counts[side]) * costs[side].seconds_per_iteration for side in steps)
        plan = plan_pass(budget_s, time.monotonic() - started + warming, costs, per_event, ceilings=counts,
                         max_windows=windows, min_windows=least)
        extra["plan"] = plan
        counts, settles, windows = dict(plan.iterations), dict(plan.settle), plan.windows
        deadline = started + window_deadline_s(budget_s, plan)
        for side, step in steps.items():
            for _ in range(min(warmup, counts[side])):
                step()
    logdir = Path(logdir)
    before = set(_xplane_files(logdir))
    try:
        tf.profiler.experimental.start(str(logdir), options=tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=host_tracer_level, python_tracer_level=0, device_tracer_level=1))
    except Exception as exc:  # noqa: BLE001 - any profiler trouble becomes a reason, never a failed test
        return every(_start_failure(exc))
    trace = tf.profiler.experimental.Trace
    order = list(steps)
    windows_started = time.monotonic()
    ran, last_round = 0, 0.0
    # The process's CPU clock around each window, apart from the profile: the attribution checks the groups' self
    # times against it (profiling.attribution's CPU frame).
    cpu: dict[str, list[float]] = {side: [] for side in steps}
    try:
        for side in order:
            if before_windows and side in before_windows:
                before_windows[side]()
        windows_started = time.monotonic()  # the windows' time, not the settling's
        for window in range(windows):
            round_started = time.monotonic()
            if deadline is not None and window >= least and round_started + last_round > deadline:
                break  # the machine is slower than the calibration found it: fewer windows, not a longer pass
            for side in (order if window % 2 == 0 else order[::-1]):
                step, n = steps[side], counts[side]
                for _ in range(settles[side]):
                    step()
                # step_num and _r=1 make TensorBoard's overview page read each window as a step
                cpu_started = _process_time()
                with trace(WINDOW_MARKER, step_num=window, _r=1, side=side):
                    for _ in range(n):
                        step()
                cpu[side].append((_process_time() - cpu_started) / n)
            ran += 1
            last_round = time.monotonic() - round_started
    finally:
        stopping = time.monotonic()
        stop_error = _stop(tf, stop_timeout_s)
    extra["windows_run"] = ran
    timings = {"seconds_windows": stopping - windows_started, "seconds_stop": time.monotonic() - stopping}
    if stop_error:
        return every(stop_error, **timings)
    reading = time.monotonic()
    profiles, reason, run_dir = _read(logdir, before, iterations=counts, top=top, started=started,
                                      host_tracer_level=host_tracer_level, parse_timeout_s=parse_timeout_s,
                                      max_bytes=max_bytes)
    extra["seconds_read"] = time.monotonic() - reading
    if profiles:
        profiles = {side: replace(p, cpu=tuple(cpu[side]))
                    if isinstance(p, Profile) and len(cpu.get(side, ())) == p.windows else p
                    for side, p in profiles.items()}
    return every(reason, run_dir, profiles, **timings)


def _calibrate(tf: Any, steps: Mapping[str, Callable[[], Any]], counts: Mapping[str, int],
               settles: Mapping[str, int], *, host_tracer_level: int, parse_timeout_s: float,
               max_bytes: int, stop_timeout_s: float | None = None) -> tuple[dict[str, SideCost], float] | str:
    """A short profiler session (one window of a quarter of each side's iterations) in a folder of its own,
    deleted after: each side's time and host events per call, and the seconds one event costs to stop the
    profiler and read the profile. The reason there is none, in one line, on profiler trouble."""
    calls = {side: max(1, math.ceil(counts[side] / CALIBRATION_SHARE)) for side in steps}
    ratio = {side: settles[side] / counts[side] for side in steps}
    folder = Path(tempfile.mkdtemp(prefix="tfperf-calibration-"))
    try:
        try:
            tf.profiler.experimental.start(str(folder), options=tf.profiler.experimental.ProfilerOptions(
                host_tracer_level=host_tracer_level, python_tracer_level=0, device_tracer_level=1))
        except Exception as exc:  # noqa: BLE001 - any profiler trouble becomes a reason, never a failed test
            return _start_failure(exc)
        trace = tf.profiler.experimental.Trace
        try:
            for side, step in steps.items():
                for _ in range(max(1, round(calls[side] * ratio[side])) if ratio[side] > 0 else 0):
                    step()
                with trace(WINDOW_MARKER, step_num=0, _r=1, side=side):
                    for _ in range(calls[side]):
                        step()
        finally:
            stopping = time.monotonic()
            stop_error = _stop(tf, stop_timeout_s)
        if stop_error:
            return stop_error
        files = _xplane_files(folder)
        if not files:
            return f"the profiler wrote no .xplane.pb (calibration session, under {folder})"
        try:
            seen = bounded.in_child(lambda: window_costs(load_xspace(files[-1], max_bytes=max_bytes),
                                                         deadline=time.monotonic() + parse_timeout_s),
                                    parse_timeout_s, "reading the calibration profile")
        except bounded.DeadlineExceeded as exc:
            return f"calibration session: {exc}"
        except ProfileUnavailable as exc:
            return f"calibration session: {exc}"
        except Exception as exc:  # noqa: BLE001 - a malformed profile is profiler trouble, not the test's
            return f"the calibration profile could not be read: {type(exc).__name__}: {exc}"
        after = time.monotonic() - stopping
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    missing = [side for side in steps if side not in seen]
    if missing:
        return f"the calibration profile has no window of side {missing[0]!r}"
    events = sum(seen[side][1] for side in steps)
    costs = {side: SideCost(seconds_per_iteration=seen[side][2] / calls[side],
                            events_per_iteration=seen[side][1] / calls[side], settle_ratio=ratio[side])
             for side in steps}
    return costs, (after / events if events else 0.0)


def _profiler_module() -> Any:
    # A test that never imported TensorFlow ran no op its profiler could see: importing it now would only cost
    # seconds (explanations are on by default, and a suite may gate plain Python too).
    tf = sys.modules.get("tensorflow")
    if tf is None:
        raise ProfileUnavailable(NOT_LOADED)
    experimental = getattr(getattr(tf, "profiler", None), "experimental", None)
    if experimental is None or not all(hasattr(experimental, a) for a in ("start", "stop", "Trace", "ProfilerOptions")):
        raise ProfileUnavailable("this TensorFlow has no tf.profiler.experimental (start, stop, Trace)")
    return tf


def _start_failure(exc: Exception) -> str:
    kind = type(exc).__name__
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if kind == "AlreadyExistsError":
        return "another profiler session is running (TensorFlow allows one at a time; a TensorBoard callback?)"
    return f"the profiler did not start: {kind}: {message}"


# The thread of a ``stop()`` that did not return in time: while it runs, TensorFlow's profiler lock is held.
_stuck: dict[str, Any] = {}


def _stop(tf: Any, timeout_s: float | None = None) -> str | None:
    # Read at each call, not bound as a default: a test (or a caller) may lower it.
    timeout_s = DEFAULT_STOP_TIMEOUT_S if timeout_s is None else timeout_s
    try:
        _, thread = bounded.in_thread(tf.profiler.experimental.stop, timeout_s, "profiler-stop")
    except Exception as exc:  # noqa: BLE001
        return f"the profiler did not stop cleanly: {type(exc).__name__}: {str(exc).strip()[:200]}"
    if thread is not None:
        _stuck.update(thread=thread, timeout_s=timeout_s)
        return (f"stopping the profiler took longer than {timeout_s:g} s (tf.profiler.experimental.stop() "
                "had not returned; no profile)")
    return None


def _stuck_stop() -> str | None:
    """Why no pass may start: an earlier ``stop()`` that did not return in time still runs (None once it ended)."""
    thread = _stuck.get("thread")
    if thread is None:
        return None
    if not thread.is_alive():
        _stuck.clear()
        return None
    return (f"an earlier tf.profiler.experimental.stop() has not returned (past its {_stuck['timeout_s']:g} s); "
            "no profiler session can start in this process until it does")


def _xplane_files(logdir: Path) -> list[Path]:
    return sorted(logdir.glob("plugins/profile/*/*.xplane.pb"))


def _read(logdir: Path, before: set[Path], *, iterations: Mapping[str, int], top: int, started: float,
          host_tracer_level: int, parse_timeout_s: float,
          max_bytes: int) -> tuple[dict[str, Profile] | None, str | None, str | None]:
    """(a profile per side, None, the run folder) or (None, why there is none, the run folder or None)."""
    new = [p for p in _xplane_files(logdir) if p not in before]
    if not new:
        return None, f"the profiler wrote no .xplane.pb under {logdir}/plugins/profile", None
    path = max(new, key=lambda p: p.stat().st_mtime)

    def read() -> dict[str, Profile]:
        deadline = time.monotonic() + parse_timeout_s
        space = load_xspace(path, max_bytes=max_bytes)
        if time.monotonic() > deadline:
            raise ProfileUnavailable(f"parsing {path.name} took longer than {parse_timeout_s:.0f} s")
        return summarise_sides(space, iterations=iterations, top=top, deadline=deadline, logdir=str(logdir),
                               host_tracer_level=host_tracer_level)

    try:
        profiles = bounded.in_child(read, parse_timeout_s, f"reading {path.name}")
    except bounded.DeadlineExceeded as exc:
        return None, f"{exc} (the profile is kept: tensorboard --logdir {logdir})", str(path.parent)
    except ProfileUnavailable as exc:
        return None, str(exc), str(path.parent)
    except Exception as exc:  # noqa: BLE001 - a malformed profile is profiler trouble, not the test's
        return None, f"the profile could not be read: {type(exc).__name__}: {exc}", str(path.parent)
    return profiles, None, str(path.parent)

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

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_tfperf.profiling.model import Profile
from pytest_tfperf.profiling.xspace import WINDOW_MARKER, ProfileUnavailable, load_xspace, summarise_sides

DEFAULT_WINDOWS = 5
DEFAULT_ITERATIONS = 10
DEFAULT_PARSE_TIMEOUT_S = 60.0
DEFAULT_MAX_BYTES = 256 * 2**20


@dataclass(frozen=True, slots=True)
class ProfileOutcome:
    """A profile, or the one-line reason there is none; and what the pass cost."""

    profile: Profile | None
    reason: str | None
    run_dir: str | None  # the profiler's run folder (holds the .xplane.pb)
    seconds: float  # wall time of the whole pass: warm-up, profiled windows, stop and reading
    seconds_windows: float = 0.0  # of which the profiled windows themselves
    seconds_stop: float = 0.0  # of which stopping the profiler (TensorFlow collects and writes the .xplane.pb)

    @property
    def line(self) -> str:
        if self.profile is None:
            return f"no profile: {self.reason}"
        return f"profiled {self.profile.windows} x {self.profile.iterations} iterations in {self.seconds:.1f} s"


def profile_step(step: Callable[[], Any], logdir: str | Path, *, name: str = "step",
                 windows: int = DEFAULT_WINDOWS, iterations: int = DEFAULT_ITERATIONS, warmup: int = 1,
                 top: int = 30, host_tracer_level: int = 2, parse_timeout_s: float = DEFAULT_PARSE_TIMEOUT_S,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> ProfileOutcome:
    """Profile ``windows`` windows of ``iterations`` calls of ``step`` (after ``warmup`` unprofiled calls)."""
    return profile_steps({name: step}, logdir, windows=windows, iterations=iterations, warmup=warmup, top=top,
                         host_tracer_level=host_tracer_level, parse_timeout_s=parse_timeout_s,
                         max_bytes=max_bytes)[name]


def profile_steps(steps: Mapping[str, Callable[[], Any]], logdir: str | Path, *, windows: int = DEFAULT_WINDOWS,
                  iterations: int | Mapping[str, int] = DEFAULT_ITERATIONS, warmup: int = 1,
                  settle: int | Mapping[str, int] = 0, top: int = 30, host_tracer_level: int = 2,
                  parse_timeout_s: float = DEFAULT_PARSE_TIMEOUT_S,
                  max_bytes: int = DEFAULT_MAX_BYTES) -> dict[str, ProfileOutcome]:
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
    """
    if not steps:
        raise ValueError("no step to profile")
    counts = {side: iterations if isinstance(iterations, int) else iterations[side] for side in steps}
    settles = {side: settle if isinstance(settle, int) else settle.get(side, 0) for side in steps}
    if windows < 1 or min(counts.values()) < 1:
        raise ValueError(f"windows and iterations must be >= 1, got {windows} and {iterations}")
    started = time.monotonic()

    def every(reason: str | None, run_dir: str | None = None, profiles: Mapping[str, Profile] | None = None,
              **timings: float) -> dict[str, ProfileOutcome]:
        seconds = time.monotonic() - started
        return {side: ProfileOutcome(profiles[side] if profiles else None, reason, run_dir, seconds, **timings)
                for side in steps}

    for step in steps.values():
        for _ in range(warmup):
            step()
    try:
        tf = _profiler_module()
    except ProfileUnavailable as exc:
        return every(str(exc))
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
    try:
        for window in range(windows):
            for side in (order if window % 2 == 0 else order[::-1]):
                step, n = steps[side], counts[side]
                for _ in range(settles[side]):
                    step()
                # step_num and _r=1 make TensorBoard's overview page read each window as a step
                with trace(WINDOW_MARKER, step_num=window, _r=1, side=side):
                    for _ in range(n):
                        step()
    finally:
        stopping = time.monotonic()
        stop_error = _stop(tf)
    timings = {"seconds_windows": stopping - windows_started, "seconds_stop": time.monotonic() - stopping}
    if stop_error:
        return every(stop_error, **timings)
    profiles, reason, run_dir = _read(logdir, before, iterations=counts, top=top, started=started,
                                      host_tracer_level=host_tracer_level, parse_timeout_s=parse_timeout_s,
                                      max_bytes=max_bytes)
    return every(reason, run_dir, profiles, **timings)


def profile_pipeline(dataset: Iterable[Any], logdir: str | Path, *, name: str = "pipeline",
                     windows: int = DEFAULT_WINDOWS, iterations: int = DEFAULT_ITERATIONS, warmup: int | None = None,
                     consume: Callable[[Any], Any] | None = None, **options: Any) -> ProfileOutcome:
    """Profile pulling elements from ``dataset`` (``iterations`` per window); ``consume`` stands for the step.

    A finite dataset is iterated again when it ends, as epochs are, so work
    that a ``cache`` saves from the second epoch on shows as it does in training.
    The warm-up is a window's worth of elements unless told otherwise: a
    pipeline fills its buffers while nobody pulls, and the first window would
    read those elements as free.
    """
    state: dict[str, Iterator[Any]] = {"it": iter(dataset)}

    def pull() -> Any:
        try:
            element = next(state["it"])
        except StopIteration:
            state["it"] = iter(dataset)
            element = next(state["it"])
        return consume(element) if consume is not None else element

    return profile_step(pull, logdir, name=name, windows=windows, iterations=iterations,
                        warmup=iterations if warmup is None else warmup, **options)


def _profiler_module() -> Any:
    try:
        import tensorflow as tf
    except ImportError as exc:
        raise ProfileUnavailable(f"TensorFlow is not importable ({exc})") from None
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


def _stop(tf: Any) -> str | None:
    try:
        tf.profiler.experimental.stop()
    except Exception as exc:  # noqa: BLE001
        return f"the profiler did not stop cleanly: {type(exc).__name__}: {str(exc).strip()[:200]}"
    return None


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
    deadline = time.monotonic() + parse_timeout_s
    try:
        space = load_xspace(path, max_bytes=max_bytes)
        if time.monotonic() > deadline:
            raise ProfileUnavailable(f"parsing {path.name} took longer than {parse_timeout_s:.0f} s")
        profiles = summarise_sides(space, iterations=iterations, top=top, deadline=deadline, logdir=str(logdir),
                                   host_tracer_level=host_tracer_level)
    except ProfileUnavailable as exc:
        return None, str(exc), str(path.parent)
    except Exception as exc:  # noqa: BLE001 - a malformed profile is profiler trouble, not the test's
        return None, f"the profile could not be read: {type(exc).__name__}: {exc}", str(path.parent)
    return profiles, None, str(path.parent)

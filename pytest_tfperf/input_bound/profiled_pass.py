"""The input-bound diagnosis measured: a profiled pass of the pipeline when the diagnosis fires.

Runs after the timed rounds, never in them, and only for a dataset feeding a
step whose input-bound diagnosis warned: a few windows of pulls and steps
under TensorFlow's profiler (``profiling.capture.profile_step``, about 20%
slower than unprofiled), the whole pass (warm-up, windows, stopping the
profiler, reading the profile) at most as long as the timed rounds it
follows: a calibration session sizes the windows (``profiling.profile_budget``). The raw profile stays under
``<rootdir>/.tfperf/profiles/<test>/input/`` for ``tensorboard --logdir``.
``input_bound.stages`` reads which stage set the pace. Trouble with the
profiler (another session running, a TensorFlow without it) gives a one-line
note instead, and the diagnosis falls back to the pipeline's shape.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_tfperf.input_bound.diagnosis import ProfiledStages
from pytest_tfperf.input_bound.stages import read_stages
from pytest_tfperf.input_bound.pipeline_shape import PipelineShape
from pytest_tfperf.measuring.workload import RawRun, Workload
from pytest_tfperf.explain.explanation import profile_dir, rounds_seconds

WINDOWS = 4
WINDOW_S = 0.25  # each profiled window's target length: 4 windows of 0.25 s, about 1 s profiled
MAX_ITERATIONS = 50

# profile_step's signature (step, logdir, *, name, windows, iterations, warmup) -> ProfileOutcome; tests fake it.
Profiler = Callable[..., Any]


def iterations_per_window(median_s: float) -> int:
    if not median_s > 0:
        return 10
    return max(1, min(MAX_ITERATIONS, int(WINDOW_S / median_s)))


def profile_input(workload: Workload, raw: RawRun, rootdir: str | Path, test_id: str,
                  profiler: Profiler | None = None) -> ProfiledStages:
    """Profile the pipeline feeding the step from a fresh iterator, and read its stages; never raises."""
    step, fresh = workload.step, workload.fresh_pull
    if step is None or fresh is None:
        return ProfiledStages(None, "the workload is not a tf.data pipeline feeding a step")
    if not isinstance(workload.pipeline, PipelineShape):
        # Any other iterable (a Python generator, a list): TensorFlow's profiler has no stages of it to show,
        # and importing TensorFlow for it would cost seconds and change the process for nothing.
        return ProfiledStages(None, "the dataset is not a tf.data pipeline, whose stages the profiler shows")
    if profiler is None:
        from pytest_tfperf.profiling.capture import profile_step as profiler
    iterations = iterations_per_window(raw.timings.median_ns / 1e9)
    # The timed rounds the diagnosis reads: together, and the dataset and the step alone (its three phases).
    split = raw.input_split
    rounds_s = rounds_seconds(raw.timings) + (0.0 if split is None else
                                              rounds_seconds(split.dataset_alone) + rounds_seconds(split.step_alone))
    logdir = profile_dir(rootdir, test_id, "input")
    shutil.rmtree(logdir, ignore_errors=True)  # the folder holds this run's profile only
    started = time.monotonic()
    try:
        logdir.mkdir(parents=True, exist_ok=True)
        pull = fresh()  # its own iterator: the measured one's buffers stay as they were
        # A window's worth of warm-up: a new iterator fills its buffers while nobody pulls, and the first window
        # would read those elements as free (with the budget, a window as planned, right before the windows).
        outcome = profiler(lambda: step(pull()), logdir, name="pipeline", windows=WINDOWS, iterations=iterations,
                           warmup=iterations, budget_s=rounds_s,
                           min_windows=WINDOWS)
    except Exception as exc:  # noqa: BLE001 - the diagnosis stands without the profile, and says why
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        return ProfiledStages(None, f"the profiled pass raised {type(exc).__name__}: {first}",
                              seconds=time.monotonic() - started, rounds_s=rounds_s)
    seconds = time.monotonic() - started
    if outcome.profile is None:
        return ProfiledStages(None, f"no profile: {outcome.reason}", seconds=seconds, rounds_s=rounds_s)
    reading = read_stages(outcome.profile)
    if reading is None:
        return ProfiledStages(None, "the profile holds no tf.data stage", str(logdir), seconds, rounds_s)
    return ProfiledStages(reading, None, str(logdir), seconds, rounds_s)

"""Is a pipeline input-bound? The share of each step spent waiting for data, and epoch restarts.

A dataset feeding a step is measured together, and, where it can be, as the
dataset alone and the step alone (``input_bound.split``); this module
reads those figures and says, in the profiler's words, whether the step waits
for its input. What to change comes from a profiled pass of the pipeline when
there is one (``stages``: the stage that sets the pace, measured, and the
remedy for that stage); without one, from the pipeline's transformations, and
never advice that TensorFlow already applies by default. No pytest, no TensorFlow.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from pytest_tfperf.input_bound.stages import StageReading, advice, describe_pace
from pytest_tfperf.input_bound.pipeline_shape import PipelineShape
from pytest_tfperf.measuring.workload import RawRun
from pytest_tfperf.model import Diagnosis, Timings

# TensorFlow's profiler (xprof, op_stats_to_input_pipeline_analysis.cc) calls a
# step HIGHLY input-bound at >= 20% of step time waiting for input and
# MODERATELY input-bound at >= 5%. We use the same thresholds and words.
HIGHLY_INPUT_BOUND = 0.20
MODERATELY_INPUT_BOUND = 0.05

INPUT_BOUND_METRIC = "input_bound_fraction"
DATASET_ALONE_METRIC = "dataset_alone_elements_per_s"
STEP_ALONE_METRIC = "step_alone_elements_per_s"
# A prefetching pipeline at least this many times as fast alone as the step
# alone is not what the step waits for (see ``_contention``).
CONTENTION_HEADROOM = 3.0
RESTART_METRIC = "epoch_restart_fraction"  # share of the measured time spent restarting a finite dataset


@dataclass(frozen=True, slots=True)
class ProfiledStages:
    """What the profiled pass of the pipeline gave: its stages read, or the one-line reason there are none."""

    reading: StageReading | None
    note: str | None = None  # "no profile: another profiler session is running ..." when reading is None
    logdir: str | None = None  # where ``tensorboard --logdir`` opens the raw profile
    seconds: float = 0.0  # what the pass cost
    rounds_s: float | None = None  # the timed rounds' time, which bounds the pass (None: no pass was taken)


@dataclass(frozen=True, slots=True)
class _Waits:
    """The together phase's per-step figures, epoch restarts left out."""

    fraction: float  # waiting beyond the handover floor, share of the step time
    raw_fraction: float  # all waiting, floor included
    wait_ms: float  # per step, floor included
    floor_ms: float  # handing over a ready element; 0 when not measured
    step_ms: float
    steps: int
    restarts: int
    restart_wait_ms: float  # all restarts together
    total_ms: float  # all iterations, restarts included


def _waits(raw: RawRun) -> _Waits:
    restarted = set(raw.input_restart_iterations)
    samples, waits = raw.timings.samples_ns, raw.input_wait_ns
    steady = [(t, w) for i, (t, w) in enumerate(zip(samples, waits)) if i not in restarted]
    if not steady:  # every pull restarted: nothing to leave out
        steady, restarted = list(zip(samples, waits)), set()
    split = raw.input_split
    floor = 0.0
    if split is not None and split.handover_ns and steady:
        # The floor is part of every wait, so it cannot exceed the typical one:
        # a slow step's step-alone phase has two or three handovers, and one
        # slow wake-up among them once put the "floor" at 26 ms.
        floor = min(statistics.median(split.handover_ns), statistics.median(w for _, w in steady))
    total = sum(t for t, _ in steady)
    wait = sum(w for _, w in steady)
    # Waiting beyond the floor, step by step: a step whose wait is the floor
    # alone waited for nothing a pipeline change could give back.
    excess = sum(max(0.0, w - floor) for _, w in steady)
    n = len(steady)
    restart_wait = sum(waits[i] for i in restarted if i < len(waits))
    return _Waits(fraction=min(1.0, excess / total) if total else 0.0,
                  raw_fraction=min(1.0, wait / total) if total else 0.0,
                  wait_ms=wait / n / 1e6 if n else 0.0, floor_ms=floor / 1e6,
                  step_ms=(total - wait) / n / 1e6 if n else 0.0, steps=n, restarts=len(restarted),
                  restart_wait_ms=restart_wait / 1e6, total_ms=sum(samples) / 1e6)


def input_bound(raw: RawRun, stages: ProfiledStages | None = None) -> tuple[Diagnosis, float]:
    """The share of each step spent waiting for data beyond the handover floor, classified as the profiler does.

    ``stages``, a profiled pass of the pipeline (taken only when this
    diagnosis fired without it), names the stage that sets the pace and gives
    the advice for it; when its slowest stage is far faster than the step, the
    wait is not the pipeline's (contention for the cores) and the warning
    becomes info.

    Epoch restarts (a finite dataset started again) are left out here and
    reported by ``epoch_restarts``: they come once an epoch, and whether one
    lands in the measured rounds decided the figure (5-27% for one pipeline).
    The handover floor (handing over an element already made, measured in
    the step-alone phase) is subtracted: no pipeline change removes it.
    """
    w = _waits(raw)
    fraction = w.fraction
    split = raw.input_split
    headroom = None
    if split is not None:
        step_rate = elements_per_s(split.step_alone)
        if step_rate > 0 and math.isfinite(step_rate):
            headroom = back_to_back_per_s(split.dataset_alone) / step_rate
    reading = stages.reading if stages is not None else None
    not_the_pace = (reading is not None and reading.pace_setter is not None and not reading.sets_the_pace)
    if fraction >= MODERATELY_INPUT_BOUND and (_contention(headroom, raw.pipeline) or not_the_pace):
        words, severity = "waits for data, but not input-bound", "info"
    elif fraction >= HIGHLY_INPUT_BOUND:
        words, severity = "highly input-bound", "warning"
    elif fraction >= MODERATELY_INPUT_BOUND:
        words, severity = "moderately input-bound", "warning"
    else:
        words, severity = "not input-bound", "info"
    together = elements_per_s(raw.timings)
    figures: list[tuple[str, float]] = [
        ("input_bound_fraction", fraction),
        ("input_wait_fraction_with_floor", w.raw_fraction),
        ("input_wait_ms_per_iteration", w.wait_ms),
        ("handover_floor_ms", w.floor_ms),
        ("step_ms_per_iteration", w.step_ms),
        ("together_elements_per_s", together),
    ]
    summary = f"{words}: {fraction:.0%} of each step waits for data"
    if split is not None and split.handover_ns:
        summary += (f" beyond the {w.floor_ms:.2f} ms it takes to hand over an element already made "
                    f"({w.raw_fraction:.0%} with it)")
    if split is not None:
        dataset, step = back_to_back_per_s(split.dataset_alone), elements_per_s(split.step_alone)
        figures += [(DATASET_ALONE_METRIC, dataset), (STEP_ALONE_METRIC, step)]
        summary += (f"; the dataset alone delivers {_rate(dataset)} elements/s, the step alone {_rate(step)}, "
                    f"the two together {_rate(together)}")
        if (severity == "info" and fraction >= MODERATELY_INPUT_BOUND and headroom is not None
                and _contention(headroom, raw.pipeline)):
            summary += (f". The pipeline alone is {headroom:,.0f}x as fast as the step and prefetches "
                        f"({raw.pipeline.describe() if isinstance(raw.pipeline, PipelineShape) else ''}): "
                        "nothing in it is slow; its threads and the step compete for the same cores "
                        "(a busy or small machine), which no pipeline change fixes")
        elif severity == "info" and not_the_pace and reading is not None:
            summary += _not_the_pace(reading)
        else:
            summary += _hint(raw, fraction, dataset, step, stages)
        if headroom is not None:
            figures.append(("dataset_headroom_ratio", headroom))
    else:
        summary += f" ({w.wait_ms:.2f} ms waiting, {w.step_ms:.2f} ms in the step, per iteration)"
        summary += _not_the_pace(reading) if not_the_pace and reading is not None else \
            _hint(raw, fraction, None, None, stages)
    if reading is not None:
        figures += list(reading.to_figures())
    if stages is not None:
        figures.append(("stages_profiled_pass_s", stages.seconds))  # what the profiled pass cost
        if stages.rounds_s is not None:
            figures.append(("stages_profiled_rounds_s", stages.rounds_s))  # ... and the timed rounds bounding it
    if w.restarts:
        summary += f" (epoch restarts left out: {w.restarts} in the measured rounds, reported apart)"
    return Diagnosis(kind="input_bound", severity=severity, summary=summary, figures=tuple(figures)), fraction


def _contention(headroom: float | None, shape: object) -> bool:
    """A wait the pipeline cannot be blamed for: it prefetches, and alone it is far faster than the step.

    On a 2-core machine shared with other processes the prefetching threads
    of a pipeline 50x faster than its step still leave the step waiting
    2-7 ms a pull (12-15% measured on the real-model suite under a load of
    6-9), because they get no core while the step and the other processes
    hold both. The wait is real and stays in ``input_bound_fraction`` for a
    budget; the diagnosis does not call it input-bound, since no change to
    the pipeline would remove it.
    """
    if headroom is None or headroom < CONTENTION_HEADROOM:
        return False
    return isinstance(shape, PipelineShape) and (shape.prefetches or shape.prefetch_injected)


def epoch_restarts(raw: RawRun) -> Diagnosis | None:
    """What starting a finite dataset again costs, apart from the steady waits; ``None`` without restarts."""
    w = _waits(raw)
    split = raw.input_split
    alone = split.dataset_restarts_ns if split is not None else ()
    if not w.restarts and not alone:
        return None
    all_restarts = [raw.input_wait_ns[i] for i in raw.input_restart_iterations if i < len(raw.input_wait_ns)]
    all_restarts += list(alone)
    mean_ms = statistics.fmean(all_restarts) / 1e6 if all_restarts else 0.0
    worst_ms = max(all_restarts) / 1e6 if all_restarts else 0.0
    steady_wait_ms = w.wait_ms * w.steps
    share_of_waiting = w.restart_wait_ms / (w.restart_wait_ms + steady_wait_ms) if w.restart_wait_ms else 0.0
    share_of_time = w.restart_wait_ms / w.total_ms if w.total_ms else 0.0
    summary = (f"each new epoch costs {mean_ms:.0f} ms to restart the pipeline (mean of {len(all_restarts)}, "
               f"worst {worst_ms:.0f} ms)")
    if w.restarts:
        summary += (f"; {w.restarts} restarts in the measured rounds were {share_of_waiting:.0%} of the waiting and "
                    f"{share_of_time:.1%} of the time")
    shape = raw.pipeline
    if isinstance(shape, PipelineShape) and shape.has("shuffle"):
        summary += (". A finite dataset starts again each epoch and refills its shuffle buffer first; "
                    "with .repeat() after .shuffle() (and steps_per_epoch) the buffer carries across epochs")
    else:
        summary += ". A finite dataset starts again each epoch; .repeat() (with steps_per_epoch) avoids the restart"
    figures = ((RESTART_METRIC, share_of_time), ("epoch_restart_ms_mean", mean_ms),
               ("epoch_restart_ms_max", worst_ms), ("epoch_restarts", float(len(all_restarts))),
               ("epoch_restart_share_of_waiting", share_of_waiting))
    return Diagnosis(kind="epoch_restart", severity="info", summary=summary, figures=figures)


def repeats_each_epoch(raw: RawRun) -> bool:
    """Whether the pipeline's elements come again: it restarted during the measurement, or repeats a finite one."""
    split = raw.input_split
    restarted = bool(raw.input_restart_iterations) or (split is not None and bool(split.dataset_restarts_ns))
    return restarted or (isinstance(raw.pipeline, PipelineShape) and raw.pipeline.repeats)


def _not_the_pace(reading: StageReading) -> str:
    p = reading.pace_setter
    assert p is not None
    return (f". Profiled, the pipeline's busiest stage, {p.words()}, takes {p.ms_per_iteration:.2f} ms per "
            f"iteration against the step's {reading.step_ms:.1f} ms: the pipeline is not what sets the pace; "
            "its threads and the step compete for the same cores (a busy or small machine), which no pipeline "
            "change fixes")


def _hint(raw: RawRun, fraction: float, dataset_per_s: float | None, step_per_s: float | None,
          stages: ProfiledStages | None) -> str:
    """What to change, for a step that waits: from the measured stages, or else from the pipeline's shape."""
    if fraction < MODERATELY_INPUT_BOUND:
        return ""
    shape = raw.pipeline if isinstance(raw.pipeline, PipelineShape) else None
    reading = stages.reading if stages is not None else None
    if reading is not None and reading.pace_setter is not None:
        fixes = advice(reading, shape, repeats=repeats_each_epoch(raw))
        text = f". Profiled, {describe_pace(reading)}"
        if fixes:
            text += ". To do: " + "; ".join(fixes)
        if stages is not None and stages.logdir:
            text += f" (tensorboard --logdir {stages.logdir})"
        return text
    note = ""
    if stages is not None:
        why = stages.note or "the profile holds no tf.data stage"
        note = f" (stages not measured: {why})"
    return note + _shape_hint(dataset_per_s, step_per_s, shape, repeats=repeats_each_epoch(raw))


def _shape_hint(dataset_per_s: float | None, step_per_s: float | None, known: PipelineShape | None, *,
                repeats: bool) -> str:
    """Advice from the pipeline's transformations alone: nothing TensorFlow already does by default.

    TensorFlow injects a prefetch unless ``inject_prefetch`` is off, and
    parallelises a stateless ``map`` unless ``map_parallelization`` is off:
    advising either where it is on would change nothing (the issue's example:
    with and without an explicit prefetch, 64.0 and 64.1 elements/s).
    """
    seen = f" (pipeline: {known.describe()})" if known is not None else ""
    slower = dataset_per_s is not None and step_per_s is not None and dataset_per_s < step_per_s
    lead = (f". The input pipeline is the slower side{seen}" if slower else
            f". The step waits for the pipeline{seen}" if dataset_per_s is None else
            f". The dataset alone keeps up with the step, yet the step waits{seen}")
    if known is None:
        return lead + ": make its slowest stage parallel (num_parallel_calls, interleave) or cheaper"
    fixes: list[str] = []
    off = known.auto_fixes_off
    if known.sequential_map:
        if "map_parallelization" in off:
            fixes.append("give its map num_parallel_calls=tf.data.AUTOTUNE (map_parallelization is off in its "
                         "options)")
        else:
            fixes.append("give its map num_parallel_calls=tf.data.AUTOTUNE if its function is stateful "
                         "(a py_function, say): TensorFlow's map_parallelization already parallelises stateless ones")
    if not known.prefetches and not known.prefetch_injected:
        fixes.append("end it with .prefetch(tf.data.AUTOTUNE) (inject_prefetch is off in its options)")
    if slower and repeats and not known.caches:
        fixes.append("cache what does not change from epoch to epoch (.cache() before the random steps)")
    if not fixes and slower:
        fixes.append("nothing is missing from its transformations that TensorFlow does not add itself: make its "
                     "slowest stage cheaper, vectorise it (batch before map), or give it more cores")
    elif not fixes:
        fixes.append("it keeps up alone and runs ahead of the step (a prefetch, its own or TensorFlow's), so the "
                     "producer and the step compete for the same cores; more cores, or cheaper preprocessing, "
                     "would help")
    return lead + ": " + "; ".join(fixes)


def elements_per_s(t: Timings) -> float:
    """Items per second at the median iteration (an iteration of a batched dataset is many elements)."""
    med = t.median_ns
    return math.inf if med == 0 else t.items_per_iteration * 1e9 / med


def back_to_back_per_s(t: Timings) -> float:
    """Elements per second over all the pulls (what back-to-back pulls sustain), not the median pull.

    A prefetching pipeline hands over buffered elements in microseconds and
    then waits for the next one: the median pull says nothing of the rate.
    """
    total = sum(t.samples_ns)
    return math.inf if total == 0 else len(t.samples_ns) * t.items_per_iteration * 1e9 / total


def _rate(value: float) -> str:
    if not math.isfinite(value):
        return "unmeasurably many"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"

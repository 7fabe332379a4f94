"""Which tf.data stage sets the pace, read from a profiled pass of the pipeline, and the remedy for that stage.

A profiled pass (``profiling.capture``, run by the session after the timed
rounds and only when the input-bound diagnosis fires) gives each tf.data stage
as TensorFlow runs it, after its own rewrites (``map_and_batch_fusion`` turns
``map().batch()`` into ``MapAndBatch``, ``map_parallelization`` turns a stateless
``map`` into ``ParallelMap``, ``inject_prefetch`` adds a ``Prefetch``). This
module reads that profile; it imports no TensorFlow.

What a stage's time means depends on how it runs (measured here, TF 2.21, see
``docs/explanation/diagnostics.md``):

- a **sequential** stage (``Generator``, ``TFRecord``, a sequential ``Map``...)
  does its work on the thread that pulls it, and waits there for the function
  it calls: its self time is its work, function included;
- an **asynchronous** stage (``Prefetch``, ``ParallelMap``, ``MapAndBatch``,
  ``ParallelInterleave``) hands work to other threads; its event on the thread
  downstream is that thread *waiting* for it, and the work of its function runs
  on tf.data's private thread pool, where the profile keeps it as "tf.data
  work" with no stage around it. That work, less what the sequential stages
  already waited for, is the asynchronous stages' function time; its measured
  concurrency (busy time over wall time) says how parallel it really ran.

The stage that sets the pace is the one busiest on the pipeline's critical
path per iteration (a parallel stage counts at most the wall time: its
threads overlap). Its advice is for that stage only, and never what
TensorFlow already does by itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_tfperf.input_bound.pipeline_shape import PipelineShape
from pytest_tfperf.profiling.profile_model import Group, Profile

# Stage names as TensorFlow spells them in the profile, their Parallel/V2 spelling dropped (profiling.names).
_ASYNC = ("Prefetch", "MapAndBatch", "DataService")  # always asynchronous
_ASYNC_WHEN_PARALLEL = ("Map", "Interleave", "Batch", "Filter")  # ParallelMap, ParallelInterleave, ParallelBatch
_SOURCES = {"Generator": "from_generator", "TFRecord": "TFRecordDataset", "TextLine": "TextLineDataset",
            "FixedLengthRecord": "FixedLengthRecordDataset", "Range": "range", "TensorSlice": "from_tensor_slices",
            "FromTensor": "from_tensors", "SSTable": "SSTable", "ListFiles": "list_files"}
_FILE_SOURCES = ("TFRecord", "TextLine", "FixedLengthRecord")
_STAGE_WORDS = {"MapAndBatch": "map (which TensorFlow fused with the batch after it: MapAndBatch)",
                "Map": "map", "FlatMap": "flat_map", "Interleave": "interleave", "Filter": "filter",
                "Batch": "batch", "PaddedBatch": "padded_batch", "Shuffle": "shuffle", "Cache": "cache",
                "Repeat": "repeat", "Prefetch": "prefetch", "Zip": "zip", "Concatenate": "concatenate",
                "Unbatch": "unbatch", "Take": "take", "Skip": "skip", "Shard": "shard", "Scan": "scan"}
_CALLS_FUNCTIONS = ("Generator", "Map", "FlatMap", "Filter", "Interleave", "Scan")
PARALLEL_CONCURRENCY = 1.3  # threads busy on average at or above which a stage's function ran in parallel
# The pipeline's slowest stage must keep the consumer busy at least this share of the step's own time
# to be blamed: a pipeline 3x as fast as the step is not what the step waits for (the headroom rule
# of ``input_bound``, here from the profile).
NOT_THE_PACE_HEADROOM = 3.0


@dataclass(frozen=True, slots=True)
class StageTime:
    """One candidate for the pace: a stage's own work, or the function work of the asynchronous stages."""

    name: str  # as TensorFlow runs it: "Generator", "MapAndBatch", "Map"
    path: str  # the profile's key without "stage:": "MapAndBatch/FlatMap/Generator"
    ms_per_iteration: float  # busy time per consumer iteration (self time; a function's work for async stages)
    ms_per_element: float | None  # per element the stage produced, where the profile counts them
    parallel: bool  # ran on more than one thread at once (measured concurrency, or TensorFlow's parallel op)
    concurrency: float | None  # threads busy on average (function work only)
    families: tuple[str, ...] = ()  # the ops of its function, largest first ("PyFunc", "MatMul")
    function: bool = False  # the time is an asynchronous stage's function work (tf.data's thread pool)

    @property
    def pace_ms(self) -> float:
        return self.ms_per_iteration

    def words(self) -> str:
        base = _STAGE_WORDS.get(self.name) or (f"the {_SOURCES[self.name]} source" if self.name in _SOURCES
                                                else self.name)
        if self.function:
            base = f"the function of its {base}" if self.name in _STAGE_WORDS else f"the {base}"
        return f"{base} [{self.path}]"


@dataclass(frozen=True, slots=True)
class StageReading:
    """The measured stages of one pipeline, as TensorFlow ran it: the pace-setter and the consumer's wait."""

    chain: tuple[str, ...]  # as TensorFlow runs it, root first: ("MapAndBatch", "FlatMap", "Generator")
    candidates: tuple[StageTime, ...]  # pace-setter first
    wall_ms: float  # per consumer iteration, in the profiled pass
    wait_ms: float  # the consumer's wait for input per iteration
    elements: float  # elements the consumer took per iteration
    windows: int
    wall_cv: float  # window-to-window spread of the wall time (coefficient of variation)

    @property
    def pace_setter(self) -> StageTime | None:
        return self.candidates[0] if self.candidates else None

    @property
    def step_ms(self) -> float:
        return max(0.0, self.wall_ms - self.wait_ms)

    @property
    def wait_share(self) -> float:
        return self.wait_ms / self.wall_ms if self.wall_ms > 0 else 0.0

    @property
    def share_of_wait(self) -> float | None:
        """The pace-setter's busy time as a share of the consumer's wait (capped at 1: it covers all of it)."""
        p = self.pace_setter
        if p is None or self.wait_ms <= 0:
            return None
        return min(1.0, p.ms_per_iteration / self.wait_ms)

    @property
    def sets_the_pace(self) -> bool:
        """Whether the slowest stage is slow enough to be what the step waits for (else: contention)."""
        p = self.pace_setter
        if p is None:
            return False
        return p.ms_per_iteration * NOT_THE_PACE_HEADROOM >= self.step_ms

    def to_figures(self) -> tuple[tuple[str, float], ...]:
        p = self.pace_setter
        figures = [("profiled_wall_ms_per_iteration", self.wall_ms), ("profiled_input_wait_ms_per_iteration",
                                                                       self.wait_ms)]
        if p is not None:
            figures.append(("pace_stage_ms_per_iteration", p.ms_per_iteration))
            if p.ms_per_element is not None:
                figures.append(("pace_stage_ms_per_element", p.ms_per_element))
            if p.concurrency is not None:
                figures.append(("pace_stage_concurrency", p.concurrency))
            share = self.share_of_wait
            if share is not None:
                figures.append(("pace_stage_share_of_wait", share))
        return tuple(figures)


def _stage_name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _is_async(name: str, parallel: bool | None) -> bool:
    return name in _ASYNC or (bool(parallel) and name in _ASYNC_WHEN_PARALLEL)


def read_stages(profile: Profile) -> StageReading | None:
    """The pipeline's stages from a profiled pass of it, pace-setter first; ``None`` without tf.data stages."""
    stages = [g for g in profile.stages() if g.key.startswith("stage:")]
    if not stages:
        return None
    wall = profile.wall_mean
    if not (wall > 0 and math.isfinite(wall)):
        return None
    paths = [g.key[len("stage:"):] for g in stages]
    longest = max(paths, key=lambda p: (p.count("/"), p))
    chain = tuple(p for p in longest.split("/") if p != "Root")
    work = [g for g in profile.groups if g.kind == "tf.data work"]
    # The op families of the functions tf.data ran (a dataset op on the thread pool is a reader, not a function)
    work_families = tuple(dict.fromkeys(f for g in sorted(work, key=lambda g: -g.mean) for f in g.families[:1]
                                        if not f.endswith("Dataset")))[:3]
    candidates: list[StageTime] = []
    # The self time of sequential stages that call functions (Generator, Map...): it includes the function
    # work they wait for on tf.data's thread pool, which the profile also holds as "tf.data work".
    waited_for_functions = 0.0
    for g, path in zip(stages, paths):
        name = _stage_name(path)
        if name == "Root" or _is_async(name, g.parallel):
            continue  # an async stage's event downstream is a wait for it, not its work
        ms = g.mean * 1e3
        if name in _CALLS_FUNCTIONS:
            waited_for_functions += ms
        candidates.append(StageTime(name=name, path=path, ms_per_iteration=ms,
                                    ms_per_element=None if g.per_element is None else g.per_element * 1e3,
                                    parallel=bool(g.parallel), concurrency=None,
                                    families=g.families or (work_families if name in _CALLS_FUNCTIONS else ())))
    work_ms = sum(g.mean for g in work) * 1e3
    residual = work_ms - waited_for_functions
    async_function_stages = [n for n in chain if n in ("MapAndBatch", "Map", "Interleave", "Filter")
                             and _async_in_profile(n, stages, paths)]
    if residual > 0 and work:
        owner = async_function_stages[0] if async_function_stages else "tf.data functions"
        owner_path = "/".join(chain[:chain.index(owner) + 1]) if owner in chain else owner
        concurrency = residual / (wall * 1e3)
        families = work_families
        # A parallel stage's threads overlap: on the critical path it counts at most the wall time.
        candidates.append(StageTime(name=owner, path=owner_path, ms_per_iteration=min(residual, wall * 1e3),
                                    ms_per_element=None, parallel=concurrency >= PARALLEL_CONCURRENCY,
                                    concurrency=concurrency, families=families, function=True))
    candidates.sort(key=lambda s: -s.ms_per_iteration)
    waits = profile.input_wait
    wait_ms = (sum(waits) / len(waits) * 1e3) if waits else 0.0
    walls = profile.wall
    mean = sum(walls) / len(walls)
    cv = (math.sqrt(sum((w - mean) ** 2 for w in walls) / (len(walls) - 1)) / mean) if len(walls) > 1 and mean else 0.0
    return StageReading(chain=chain, candidates=tuple(candidates), wall_ms=wall * 1e3, wait_ms=wait_ms,
                        elements=profile.elements, windows=profile.windows, wall_cv=cv)


def _async_in_profile(name: str, stages: Sequence[Group], paths: Sequence[str]) -> bool:
    """Whether ``name`` in the chain ran asynchronously: MapAndBatch always; a Map only as ParallelMap."""
    if name == "MapAndBatch":
        return True
    for g, path in zip(stages, paths):
        if _stage_name(path) == name and g.parallel:
            return True
    return False


def describe_pace(reading: StageReading) -> str:
    """The measured pace-setter in words: its time per element or iteration, how it ran, its share of the wait."""
    p = reading.pace_setter
    assert p is not None
    how = ("in parallel" if p.parallel else "sequentially")
    if p.concurrency is not None:
        how += f", {p.concurrency:.1f} threads busy on average"
    per = (f"{p.ms_per_element:.2f} ms per element ({p.ms_per_iteration:.1f} ms per iteration)"
           if p.ms_per_element is not None else f"{p.ms_per_iteration:.1f} ms per iteration")
    fams = f", mostly {', '.join(p.families[:2])}" if p.function and p.families else ""
    share = reading.share_of_wait
    wait = (f"; the step waited {reading.wait_ms:.1f} ms per iteration ({reading.wait_share:.0%} of it)"
            + (f", which this stage's time {'covers' if share >= 0.995 else f'is {share:.0%} of'}"
               if share is not None else ""))
    return f"the stage that sets the pace is {p.words()}: {per}, {how}{fams}{wait}"


def advice(reading: StageReading, shape: PipelineShape | None, *, repeats: bool) -> list[str]:
    """Remedies for the pace-setting stage only, none that TensorFlow already applies.

    ``repeats``: the pipeline's elements come again (a finite dataset restarted during the measurement,
    or ``repeat()`` over one), so work done per element is done again every epoch.
    """
    p = reading.pace_setter
    if p is None:
        return []
    out: list[str] = []
    off = shape.auto_fixes_off if shape is not None else ()
    is_source = reading.chain and p.name == reading.chain[-1] and not p.function
    if p.name == "Generator":
        out.append("its Python generator yields one element at a time, under the GIL, and TensorFlow cannot "
                   "parallelise it: extract in parallel (split the source into shards and read them with "
                   "interleave(..., num_parallel_calls=tf.data.AUTOTUNE)), or build the elements with TensorFlow "
                   "ops (from_tensor_slices + map(..., num_parallel_calls=tf.data.AUTOTUNE))")
    elif p.name in _FILE_SOURCES:
        out.append("it reads one file at a time: read several at once (TFRecordDataset(files, "
                   "num_parallel_reads=tf.data.AUTOTUNE), or interleave(..., num_parallel_calls=tf.data.AUTOTUNE) "
                   "over the files; shard one big file into several)")
    elif is_source:
        out.append("its source is slow: produce the elements with parallel extraction "
                   "(interleave(..., num_parallel_calls=tf.data.AUTOTUNE) over shards)")
    elif p.name == "FlatMap" and not p.parallel:
        out.append("its flat_map runs one input at a time: interleave(..., num_parallel_calls=tf.data.AUTOTUNE) "
                   "runs several at once")
    elif not p.parallel and (p.function or p.name == "Map"):
        python = "PyFunc" in p.families
        if shape is not None and shape.parallel_map and python:
            out.append("its map asks for num_parallel_calls, yet its py_function ran one call at a time: Python "
                       "holds the GIL while it runs, so write the function with TensorFlow ops")
        elif shape is not None and shape.parallel_map:
            out.append("its map already asks for num_parallel_calls, yet ran on one thread at a time: the "
                       "machine's other cores were busy (more cores), or the map cannot overlap")
        else:
            why = (" (map_parallelization is off in its options)" if "map_parallelization" in off else
                   " (TensorFlow did not parallelise it: map_parallelization only rewrites stateless functions, "
                   "and a py_function is stateful)" if python else " (TensorFlow did not parallelise it)")
            tip = ("; a py_function holds the GIL while Python runs, so TensorFlow ops parallelise better"
                   if python else "")
            out.append(f"give its map num_parallel_calls=tf.data.AUTOTUNE{why}{tip}")
    elif p.parallel and (p.function or p.name in ("Map", "Interleave")):
        by_tf = (" (TensorFlow's map_parallelization parallelised the map written without num_parallel_calls)"
                 if shape is not None and shape.sequential_map and not shape.parallel_map else "")
        out.append(f"it already runs in parallel{by_tf}, so more num_parallel_calls cannot help: make its function "
                   "cheaper, vectorise it (batch before map), or give it more cores")
    if shape is not None and shape.threadpool_size == 1 and any(
            "num_parallel" in f or "interleave" in f or "in parallel" in f for f in out):
        out.append("its options limit tf.data to one thread (threading.private_threadpool_size=1): nothing in it "
                   "runs in parallel until that is raised")
    if shape is not None and shape.autotune_off and any("AUTOTUNE" in f for f in out):
        out.append("autotune is off in its options (autotune.enabled=False): give num_parallel_calls a number "
                   "rather than AUTOTUNE, or switch autotune back on")
    if repeats and (shape is None or not shape.caches):
        out.append("the pipeline's elements come again every epoch and this stage redoes its work for each: if its "
                   "output is the same every epoch, cache it (.cache() right after it, before any random step; in "
                   "memory, or .cache(filename) on disk)")
    if shape is not None and not shape.prefetches and "inject_prefetch" in off:
        out.append("inject_prefetch is off in its options and it has no prefetch, so the step and the pipeline "
                   "take turns: end it with .prefetch(tf.data.AUTOTUNE)")
    return out

"""The pace-setting tf.data stage read from a profile, and advice for that stage only: fakes shaped as TF 2.21 profiles.

The profiles below have the shapes measured on real pipelines here (benchmarks/input_diagnosis_cases.py):
a sequential source's stage holds its generator's time; an asynchronous stage's function runs on tf.data's
thread pool as "tf.data work" with no stage around it.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_tfperf.diagnoses import diagnostics
from pytest_tfperf.input_bound.diagnosis import ProfiledStages, input_bound
from pytest_tfperf.input_bound.stages import advice, describe_pace, read_stages
from pytest_tfperf.input_bound.pipeline_shape import PipelineShape
from pytest_tfperf.measuring.workload import InputSplit, RawRun, Workload
from pytest_tfperf.model import Timings
from pytest_tfperf.profiling.profile_model import Group, Profile


def _stage(path: str, ms: float, *, per_element_ms: float | None = None, parallel: bool = False) -> Group:
    return Group(key="stage:" + path, kind="stage", label=path, families=(), per_window=(ms / 1e3,) * 4,
                 per_element=None if per_element_ms is None else per_element_ms / 1e3, parallel=parallel)


def _work(family: str, ms: float) -> Group:
    return Group(key="tfdata:" + family, kind="tf.data work", label=f"{family} in tf.data functions",
                 families=(family,), per_window=(ms / 1e3,) * 4)


def _wait(ms: float) -> Group:
    return Group(key="wait:input", kind="input wait", label="input wait (consumer)", families=(),
                 per_window=(ms / 1e3,) * 4)


def _profile(wall_ms: float, wait_ms: float, *groups: Group) -> Profile:
    return Profile(name="pipeline", iterations=5, wall=(wall_ms / 1e3,) * 4, groups=(_wait(wait_ms), *groups),
                   other=(0.0,) * 4, smallest_kept=0.0, input_wait=(wait_ms / 1e3,) * 4, elements=1.0)


GENERATOR = _profile(36.0, 34.6, _stage("MapAndBatch/FlatMap/Generator", 35.0, per_element_ms=8.8),
                     _stage("MapAndBatch/FlatMap", 0.04, per_element_ms=0.01), _work("PyFunc", 34.1),
                     _work("Mul", 0.02), _stage("Root", 0.01, per_element_ms=0.01))
SEQUENTIAL_PYFUNC_MAP = _profile(35.7, 34.5, _stage("MapAndBatch/Map", 0.16, per_element_ms=0.04, parallel=True),
                                 _stage("MapAndBatch/Map/Range", 0.03, per_element_ms=0.01), _work("PyFunc", 33.9),
                                 _work("Cast", 0.06))
PARALLEL_PYFUNC_MAP = _profile(17.9, 16.7, _stage("MapAndBatch/Map", 0.11, per_element_ms=0.03, parallel=True),
                               _stage("MapAndBatch/Map/Range", 0.02, per_element_ms=0.01), _work("PyFunc", 33.8))


def test_a_sequential_generator_source_sets_the_pace_and_is_told_to_extract_in_parallel() -> None:
    reading = read_stages(GENERATOR)
    assert reading is not None and reading.chain == ("MapAndBatch", "FlatMap", "Generator")
    pace = reading.pace_setter
    assert pace is not None and pace.name == "Generator" and not pace.parallel
    assert pace.ms_per_element == pytest.approx(8.8)
    # the generator's py_function is the time the Generator stage waited for: not counted twice
    assert [c.name for c in reading.candidates if c.function] == []
    text = describe_pace(reading)
    assert text.startswith("the stage that sets the pace is the from_generator source [MapAndBatch/FlatMap/Generator]: "
                           "8.80 ms per element (35.0 ms per iteration), sequentially")
    assert "the step waited 34.6 ms per iteration (96% of it), which this stage's time covers" in text
    shape = PipelineShape(("generator", "map", "batch"))
    fixes = " ".join(advice(reading, shape, repeats=False))
    assert "interleave(..., num_parallel_calls=tf.data.AUTOTUNE)" in fixes
    assert "prefetch" not in fixes and "give its map" not in fixes and "cache" not in fixes


def test_a_sequential_py_function_map_is_told_num_parallel_calls_and_why_tensorflow_did_not_do_it() -> None:
    reading = read_stages(SEQUENTIAL_PYFUNC_MAP)
    assert reading is not None
    pace = reading.pace_setter
    assert pace is not None and pace.function and pace.name == "MapAndBatch" and not pace.parallel
    # the function work less the sequential stages' time (Range; the parallel Map's event is MapAndBatch waiting)
    assert pace.concurrency == pytest.approx((33.96 - 0.03) / 35.7, rel=1e-3)
    assert pace.families[0] == "PyFunc"
    fixes = " ".join(advice(reading, PipelineShape(("range", "map", "map", "batch")), repeats=False))
    assert fixes.startswith("give its map num_parallel_calls=tf.data.AUTOTUNE (TensorFlow did not parallelise it: "
                            "map_parallelization only rewrites stateless functions, and a py_function is stateful)")
    assert "prefetch" not in fixes


def test_a_map_already_parallel_is_never_told_num_parallel_calls() -> None:
    reading = read_stages(PARALLEL_PYFUNC_MAP)
    assert reading is not None and reading.pace_setter is not None
    assert reading.pace_setter.parallel and reading.pace_setter.concurrency == pytest.approx(1.88, abs=0.01)
    # counted at most at the wall time: its threads overlap
    assert reading.pace_setter.ms_per_iteration == pytest.approx(17.9)
    for shape in (PipelineShape(("range", "parallel_map", "batch")), PipelineShape(("range", "map", "batch"))):
        fixes = " ".join(advice(reading, shape, repeats=False))
        assert "already runs in parallel" in fixes and "give its map" not in fixes and "prefetch" not in fixes
    by_tf = " ".join(advice(reading, PipelineShape(("range", "map", "batch")), repeats=False))
    assert "TensorFlow's map_parallelization parallelised the map" in by_tf


def test_work_repeated_every_epoch_is_told_to_cache_unless_the_pipeline_caches() -> None:
    reading = read_stages(PARALLEL_PYFUNC_MAP)
    assert reading is not None
    assert "cache it (.cache() right after it" in " ".join(advice(reading, PipelineShape(("tensor_slice", "map",
                                                                                             "batch")), repeats=True))
    assert "cache" not in " ".join(advice(reading, PipelineShape(("tensor_slice", "map", "batch")), repeats=False))
    assert "cache it" not in " ".join(advice(reading, PipelineShape(("tensor_slice", "cache", "map", "batch")),
                                             repeats=True))


def test_prefetch_is_advised_only_where_tensorflow_does_not_inject_one() -> None:
    reading = read_stages(SEQUENTIAL_PYFUNC_MAP)
    assert reading is not None
    injected = PipelineShape(("range", "map", "batch"))
    assert not any("prefetch" in f for f in advice(reading, injected, repeats=False))
    off = PipelineShape(("range", "map", "batch"), ("map_parallelization", "inject_prefetch"))
    fixes = advice(reading, off, repeats=False)
    assert fixes[0].startswith("give its map num_parallel_calls=tf.data.AUTOTUNE (map_parallelization is off")
    assert fixes[-1].startswith("inject_prefetch is off in its options and it has no prefetch")


def test_options_that_forbid_parallelism_are_said_with_the_advice_they_defeat() -> None:
    reading = read_stages(SEQUENTIAL_PYFUNC_MAP)
    assert reading is not None
    one_thread = PipelineShape(("range", "map", "batch"), threadpool_size=1, autotune_off=True)
    fixes = advice(reading, one_thread, repeats=False)
    assert any("private_threadpool_size=1" in f for f in fixes)
    assert any("autotune is off in its options" in f for f in fixes)
    assert not any("private_threadpool_size" in f for f in advice(reading, PipelineShape(("range", "map")),
                                                                    repeats=False))


def test_a_sequential_map_stage_with_tensorflows_fixes_off_is_the_pace_setter() -> None:
    # map_and_batch_fusion and map_parallelization off: Batch/Map (the heavy map) and Batch/Map/Map run sequentially
    profile = _profile(20.0, 18.0, _stage("Batch/Map", 17.0, per_element_ms=2.1), _stage("Batch/Map/Map", 0.5),
                       _stage("Batch/Map/Map/Range", 0.01), _work("Sin", 9.0), _work("Cos", 8.0))
    reading = read_stages(profile)
    assert reading is not None and reading.pace_setter is not None
    assert reading.pace_setter.path == "Batch/Map" and not reading.pace_setter.function
    off = PipelineShape(("range", "map", "map", "batch"), ("map_parallelization", "inject_prefetch"))
    fixes = advice(reading, off, repeats=False)
    assert "num_parallel_calls=tf.data.AUTOTUNE (map_parallelization is off in its options)" in fixes[0]
    assert ".prefetch(tf.data.AUTOTUNE)" in fixes[-1]


def test_a_profile_without_tf_data_stages_reads_as_none() -> None:
    p = Profile(name="step", iterations=5, wall=(0.01,) * 4, groups=(), other=(0.0,) * 4, smallest_kept=0.0,
                input_wait=(0.0,) * 4, elements=0.0)
    assert read_stages(p) is None


# -- in the diagnosis ------------------------------------------------------------------------------


def _raw(wait_ms: float, step_ms: float, *, pipeline: PipelineShape | None = None, dataset_ms: float = 30.0,
         restarts: tuple[int, ...] = ()) -> RawRun:
    n = 40
    timings = Timings(samples_ns=(int((wait_ms + step_ms) * 1e6),) * n, round_sizes=(n,), items_per_iteration=1,
                      first_call_ns=1)
    alone = Timings(samples_ns=(int(dataset_ms * 1e6),) * 10, round_sizes=(10,), items_per_iteration=1,
                    first_call_ns=1)
    step = Timings(samples_ns=(int(step_ms * 1e6),) * 10, round_sizes=(10,), items_per_iteration=1, first_call_ns=1)
    return RawRun(timings=timings, memory=(), input_wait_ns=(int(wait_ms * 1e6),) * n,
                  input_split=InputSplit(dataset_alone=alone, step_alone=step), pipeline=pipeline,
                  input_restart_iterations=restarts)


def test_the_diagnosis_names_the_measured_stage_and_its_remedy() -> None:
    raw = _raw(34.0, 1.5, pipeline=PipelineShape(("generator", "map", "batch")))
    stages = ProfiledStages(read_stages(GENERATOR), logdir="/tmp/x/input", seconds=0.8, rounds_s=1.4)
    d, _ = input_bound(raw, stages)
    assert d.severity == "warning"
    # what the pass cost, beside the timed rounds that bound it
    assert dict(d.figures)["stages_profiled_pass_s"] == 0.8 and dict(d.figures)["stages_profiled_rounds_s"] == 1.4
    assert "Profiled, the stage that sets the pace is the from_generator source" in d.summary
    assert "To do: its Python generator yields one element at a time" in d.summary
    assert d.summary.endswith("(tensorboard --logdir /tmp/x/input)")
    assert ".prefetch(" not in d.summary
    figures = dict(d.figures)
    assert figures["pace_stage_ms_per_element"] == pytest.approx(8.8)
    assert figures["pace_stage_share_of_wait"] == 1.0


def test_a_pipeline_whose_stages_are_far_faster_than_the_step_is_not_warned() -> None:
    # a healthy model under load: the step waits 8% of its time, yet the pipeline's busiest stage takes 1 ms
    # of the step's 20: contention for the cores, not the pipeline
    fast = _profile(21.0, 1.6, _stage("Prefetch/Batch/Map/Cache", 0.3), _work("Mul", 1.0))
    raw = _raw(1.8, 20.0, pipeline=PipelineShape(("tensor_slice", "cache", "map", "batch")), dataset_ms=10.0)
    assert input_bound(raw)[0].severity == "warning"  # the split alone (2x headroom) would warn
    d, fraction = input_bound(raw, ProfiledStages(read_stages(fast)))
    assert d.severity == "info" and d.summary.startswith("waits for data, but not input-bound")
    assert "the pipeline is not what sets the pace" in d.summary
    assert dict(d.figures)["input_bound_fraction"] == fraction  # still gateable


def test_without_a_profile_one_line_says_why_and_the_shape_advice_skips_what_tensorflow_does() -> None:
    raw = _raw(30.0, 1.0, pipeline=PipelineShape(("range", "map", "batch")))
    d, _ = input_bound(raw, ProfiledStages(None, "no profile: another profiler session is running"))
    assert d.severity == "warning"
    assert "(stages not measured: no profile: another profiler session is running)" in d.summary
    assert ".prefetch(" not in d.summary  # TensorFlow injects one
    assert "if its function is stateful" in d.summary  # map_parallelization parallelises stateless ones itself


def test_the_shape_advice_names_prefetch_only_when_inject_prefetch_is_off() -> None:
    off = PipelineShape(("range", "map", "batch"), ("map_parallelization", "inject_prefetch"))
    d, _ = input_bound(_raw(30.0, 1.0, pipeline=off))
    assert "end it with .prefetch(tf.data.AUTOTUNE) (inject_prefetch is off in its options)" in d.summary
    d, _ = input_bound(_raw(30.0, 1.0, pipeline=PipelineShape(("range", "map", "batch"))))
    assert ".prefetch(" not in d.summary


def test_input_fired_is_the_warning_only() -> None:
    assert diagnostics.input_fired(diagnostics.analyse(_raw(30.0, 1.0))[1])
    assert not diagnostics.input_fired(diagnostics.analyse(_raw(0.01, 10.0))[1])


# -- the session's profiled pass ---------------------------------------------------------------------


def _workload() -> Workload:
    calls = []

    def fresh():  # noqa: ANN202
        return lambda: calls.append("pull") or 1.0

    return Workload(call=lambda: None, pull=lambda: 1.0, step=lambda e: calls.append("step"), fresh_pull=fresh,
                    pipeline=PipelineShape(("generator", "map", "batch")))


def test_the_profiled_pass_uses_a_fresh_iterator_and_reads_the_stages(tmp_path) -> None:  # noqa: ANN001
    from pytest_tfperf.input_bound.profiled_pass import profile_input

    seen = {}

    def profiler(step, logdir, **kw):  # noqa: ANN001, ANN003, ANN202
        seen.update(kw, logdir=logdir)
        step()
        return SimpleNamespace(profile=GENERATOR, reason=None)

    stages = profile_input(_workload(), _raw(34.0, 1.5), tmp_path, "t.py::test_a", profiler)
    assert stages.reading is not None and stages.reading.pace_setter.name == "Generator"
    assert seen["windows"] == seen["min_windows"] == 4 and seen["iterations"] == 7  # 0.25 s windows of 35.5 ms
    assert seen["warmup"] == 7  # a window's worth: the first window must not read buffered elements as free
    # the whole pass bounded by the timed rounds it follows: their iterations' times summed, over its three phases
    raw = _raw(34.0, 1.5)
    phases = (raw.timings, raw.input_split.dataset_alone, raw.input_split.step_alone)
    assert seen["budget_s"] == pytest.approx(sum(sum(t.samples_ns) for t in phases) / 1e9) == stages.rounds_s
    assert str(seen["logdir"]).endswith(".tfperf/profiles/t.py_test_a/input") and stages.logdir == str(seen["logdir"])


def test_profiler_trouble_is_a_note_never_an_error(tmp_path) -> None:  # noqa: ANN001
    from pytest_tfperf.input_bound.profiled_pass import profile_input

    def busy(step, logdir, **kw):  # noqa: ANN001, ANN003, ANN202
        return SimpleNamespace(profile=None, reason="another profiler session is running")

    def broken(step, logdir, **kw):  # noqa: ANN001, ANN003, ANN202
        raise RuntimeError("boom")

    assert profile_input(_workload(), _raw(1, 1), tmp_path, "t", busy).note == \
        "no profile: another profiler session is running"
    assert profile_input(_workload(), _raw(1, 1), tmp_path, "t", broken).note == \
        "the profiled pass raised RuntimeError: boom"
    no_step = Workload(call=lambda: None)
    assert profile_input(no_step, _raw(1, 1), tmp_path, "t", broken).note.startswith("the workload is not")
    python_iterable = Workload(call=lambda: None, pull=lambda: 1, step=lambda e: e, fresh_pull=lambda: lambda: 1)
    assert profile_input(python_iterable, _raw(1, 1), tmp_path, "t", broken).note == \
        "the dataset is not a tf.data pipeline, whose stages the profiler shows"

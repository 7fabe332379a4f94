"""Input-bound diagnosis from synthetic measurements: classified as TensorFlow's profiler does."""

from __future__ import annotations

import pytest

from pytest_tfperf.diagnoses import diagnostics
from pytest_tfperf.input_bound.diagnosis import back_to_back_per_s, elements_per_s, input_bound
from pytest_tfperf.model import Timings
from pytest_tfperf.measuring.workload import InputSplit, RawRun


def _timings(ns: int, n: int = 40, items: float = 1.0) -> Timings:
    return Timings(samples_ns=(ns,) * n, round_sizes=(n // 2, n - n // 2), items_per_iteration=items,
                   first_call_ns=ns * 10)


def _raw(step_ns: int, wait_ns: int, *, dataset_alone_ns: int | None = None,
         step_alone_ns: int | None = None) -> RawRun:
    split = None
    if dataset_alone_ns is not None and step_alone_ns is not None:
        split = InputSplit(dataset_alone=_timings(dataset_alone_ns), step_alone=_timings(step_alone_ns))
    return RawRun(timings=_timings(step_ns + wait_ns), memory=(), input_wait_ns=(wait_ns,) * 40, input_split=split)


@pytest.mark.parametrize(("step_ns", "wait_ns", "words", "severity"), [
    (360_000, 640_000, "highly input-bound", "warning"),  # 64% waiting
    (1_000_000, 250_000, "highly input-bound", "warning"),  # 20%
    (1_000_000, 60_000, "moderately input-bound", "warning"),  # 5.7%
    (1_000_000, 10_000, "not input-bound", "info"),  # 1%
])
def test_input_bound_uses_the_profilers_5_and_20_percent_thresholds(step_ns: int, wait_ns: int, words: str,
                                                                    severity: str) -> None:
    d, fraction = input_bound(_raw(step_ns, wait_ns))
    assert fraction == pytest.approx(wait_ns / (step_ns + wait_ns))
    assert d.summary.startswith(f"{words}: {fraction:.0%} of each step waits for data")
    assert d.severity == severity and d.kind == "input_bound"
    assert dict(d.figures)["input_bound_fraction"] == fraction


def test_the_boundaries_are_inclusive() -> None:
    assert input_bound(_raw(800_000, 200_000))[0].summary.startswith("highly")  # 20.0%
    assert input_bound(_raw(950_000, 50_000))[0].summary.startswith("moderately")  # 5.0%
    assert input_bound(_raw(950_001, 49_999))[0].summary.startswith("not input-bound")


def test_the_split_says_in_plain_words_which_side_is_slow() -> None:
    # together 2.44 ms per element, 64% of it waiting; the dataset alone 410/s, the step alone 1,220/s
    raw = _raw(880_000, 1_560_000, dataset_alone_ns=2_439_024, step_alone_ns=819_672)
    extras, diagnoses = diagnostics.analyse(raw)
    (d,) = diagnoses
    assert d.summary.startswith("highly input-bound: 64% of each step waits for data; the dataset alone delivers "
                                "410 elements/s, the step alone 1,220, the two together 410")
    assert "The input pipeline is the slower side" in d.summary
    metrics = dict(extras)
    assert metrics["input_bound_fraction"] == pytest.approx(0.639, abs=0.001)
    assert metrics["dataset_alone_elements_per_s"] == pytest.approx(410, rel=1e-3)
    assert metrics["step_alone_elements_per_s"] == pytest.approx(1220, rel=1e-3)


def test_a_waiting_step_with_a_fast_dataset_points_at_prefetching_not_at_the_dataset() -> None:
    raw = _raw(900_000, 100_000, dataset_alone_ns=50_000, step_alone_ns=900_000)
    d, _ = input_bound(raw)
    assert "moderately input-bound" in d.summary and "keeps up with the step, yet the step waits" in d.summary


def test_a_healthy_pipeline_is_not_flagged_and_gets_no_advice() -> None:
    raw = _raw(990_000, 10_000, dataset_alone_ns=20_000, step_alone_ns=990_000)
    d, fraction = input_bound(raw)
    assert fraction == pytest.approx(0.01)
    assert d.severity == "info" and d.summary.startswith("not input-bound: 1% of each step waits for data")
    assert "Try" not in d.summary and "slower side" not in d.summary and "yet the step waits" not in d.summary


def test_without_the_split_the_wait_and_step_are_given_per_iteration() -> None:
    d, _ = input_bound(_raw(750_000, 250_000))
    assert "(0.25 ms waiting, 0.75 ms in the step, per iteration)" in d.summary


def test_workloads_without_input_waits_get_no_input_diagnosis() -> None:
    raw = RawRun(timings=_timings(1000), memory=(), input_wait_ns=())
    assert diagnostics.analyse(raw) == ((), ())


def test_the_metric_is_gateable_by_the_marker_budget() -> None:
    from pytest_tfperf.gates.budgets import budgets_from_marker, check_budgets
    from pytest_tfperf.config import MarkerOptions
    from pytest_tfperf.measuring.workload import build_measurement

    options = MarkerOptions(max_input_bound_fraction=0.1)
    for wait, expected in ((640_000, 1), (10_000, 0)):
        raw = _raw(1_000_000 - wait, wait)
        extras, diagnoses = diagnostics.analyse(raw)
        m = build_measurement("t", "iterate", raw, extra_metrics=extras, diagnoses=diagnoses)
        violations = check_budgets(m, budgets_from_marker(options))
        assert len(violations) == expected
        assert all(v.metric == "input_bound_fraction" for v in violations)


# -- restarts, the handover floor, contention, advice that fits the pipeline -------------------------


def _split_raw(waits_ms: list[float], step_ms: float, *, restarts: tuple[int, ...] = (), floor_ms: float = 0.0,
               dataset_ms: float = 1.0, step_alone_ms: float | None = None, pipeline: object = None,
               dataset_restarts_ms: tuple[float, ...] = ()) -> RawRun:
    ns = [int((w + step_ms) * 1e6) for w in waits_ms]
    timings = Timings(samples_ns=tuple(ns), round_sizes=(len(ns),), items_per_iteration=1, first_call_ns=1)
    split = InputSplit(dataset_alone=_timings(int(dataset_ms * 1e6)),
                       step_alone=_timings(int((step_alone_ms or step_ms) * 1e6)),
                       handover_ns=(int(floor_ms * 1e6),) * 20,
                       dataset_restarts_ns=tuple(int(r * 1e6) for r in dataset_restarts_ms))
    return RawRun(timings=timings, memory=(), input_wait_ns=tuple(int(w * 1e6) for w in waits_ms),
                  input_split=split, input_restart_iterations=restarts, pipeline=pipeline)


def test_epoch_restarts_are_left_out_of_the_figure_and_reported_apart() -> None:
    from pytest_tfperf.input_bound.pipeline_shape import PipelineShape

    shape = PipelineShape(("tensor_slice", "cache", "shuffle", "parallel_map", "batch", "prefetch"))
    waits = [0.1] * 98 + [113.0, 120.0]  # two restarts among steady pulls
    raw = _split_raw(waits, 15.0, restarts=(98, 99), pipeline=shape, dataset_restarts_ms=(100.0,))
    extras, diagnoses = diagnostics.analyse(raw)
    bound, restart = diagnoses
    assert dict(extras)["input_bound_fraction"] == pytest.approx(0.1 / 15.1, rel=1e-3)
    assert bound.severity == "info" and "epoch restarts left out: 2 in the measured rounds" in bound.summary
    assert restart.kind == "epoch_restart" and restart.severity == "info"
    assert restart.summary.startswith("each new epoch costs 111 ms to restart the pipeline (mean of 3, worst 120 ms)")
    assert "refills its shuffle buffer" in restart.summary
    assert dict(restart.figures)["epoch_restart_share_of_waiting"] == pytest.approx(233 / (233 + 9.8), rel=1e-3)


def test_the_handover_floor_is_subtracted_and_shown() -> None:
    # 0.9 ms of each 15.9 ms iteration waits, 0.5 ms of it handing over a ready element: 2.5%, not 5.7%
    raw = _split_raw([0.9] * 50, 15.0, floor_ms=0.5)
    d, fraction = input_bound(raw)
    assert fraction == pytest.approx(0.4 / 15.9, rel=1e-3)
    assert d.severity == "info"
    assert "beyond the 0.50 ms it takes to hand over an element already made (6% with it)" in d.summary


def test_no_prefetch_advice_for_a_pipeline_that_prefetches() -> None:
    from pytest_tfperf.input_bound.pipeline_shape import PipelineShape

    prefetching = PipelineShape(("range", "parallel_map", "batch", "prefetch"))
    # the dataset alone (1 ms a batch) is 10x as fast as the step (10 ms): the wait is contention
    d, _ = input_bound(_split_raw([3.0] * 50, 10.0, dataset_ms=1.0, pipeline=prefetching))
    assert d.severity == "info" and d.summary.startswith("waits for data, but not input-bound: 23%")
    assert "10x as fast as the step and prefetches" in d.summary and "add .prefetch" not in d.summary
    # the dataset alone barely keeps up: a real input-bound pipeline, advice without prefetch
    d, _ = input_bound(_split_raw([3.0] * 50, 10.0, dataset_ms=8.0, pipeline=prefetching))
    assert d.severity == "warning" and ".prefetch(" not in d.summary and "num_parallel_calls" not in d.summary
    assert "compete for the same cores" in d.summary
    slow = _split_raw([3.0] * 50, 10.0, dataset_ms=12.0, pipeline=prefetching)
    d, _ = input_bound(slow)
    assert "slower side (pipeline: range -> parallel_map -> batch -> prefetch): nothing is missing" in d.summary
    # its elements never come again (no restart, no repeat): caching would change nothing
    assert "cache" not in d.summary
    repeating = _split_raw([3.0] * 50, 10.0, dataset_ms=12.0, restarts=(10,),
                           pipeline=PipelineShape(("range", "parallel_map", "batch", "prefetch")))
    assert "cache what does not change" in input_bound(repeating)[0].summary


def test_a_sequential_unprefetched_pipeline_is_told_both_fixes_and_why_tf_did_not_apply_them() -> None:
    from pytest_tfperf.input_bound.pipeline_shape import PipelineShape

    raw_mistake = PipelineShape(("range", "map", "batch"), ("map_parallelization", "inject_prefetch"))
    d, _ = input_bound(_split_raw([5.0] * 50, 10.0, dataset_ms=1.0, pipeline=raw_mistake))
    assert d.severity == "warning"
    assert ("give its map num_parallel_calls=tf.data.AUTOTUNE (map_parallelization is off in its options); "
            "end it with .prefetch(tf.data.AUTOTUNE) (inject_prefetch is off in its options)") in d.summary


def test_rates_count_elements_on_both_sides() -> None:
    # 32 elements per iteration: the dataset alone and the step alone are compared in elements/s
    t = Timings(samples_ns=(10_000_000,) * 10, round_sizes=(10,), items_per_iteration=32, first_call_ns=1)
    assert elements_per_s(t) == pytest.approx(3200)
    assert back_to_back_per_s(t) == pytest.approx(3200)


def test_steady_traces_become_a_retracing_warning_naming_the_function_and_a_healthy_run_none() -> None:
    from pytest_tfperf.model import TRACES_BETWEEN_ROUNDS, TRACES_EACH, TraceEvent

    event = TraceEvent(function="scaled", location="test_x.py:3", cause="arguments", changed="k: Python value",
                       detail="k: Python value 1.0 -> 2.0")
    healthy = RawRun(timings=_timings(1000), memory=(), input_wait_ns=(), traces_first_call=2, traces_steady=0,
                     trace_counting=TRACES_EACH)
    assert [d for d in diagnostics.analyse(healthy)[1] if d.kind == "retracing"] == []
    raw = RawRun(timings=_timings(1000), memory=(), input_wait_ns=(), traces_first_call=1, traces_steady=2,
                 trace_counting=TRACES_EACH, steady_trace_events=(event, event))
    (d,) = [d for d in diagnostics.analyse(raw)[1] if d.kind == "retracing"]
    assert d.severity == "warning" and "`scaled` (test_x.py:3) traced 2 times" in d.summary
    assert "k: Python value 1.0 -> 2.0" in d.summary
    old = RawRun(timings=_timings(1000), memory=(), input_wait_ns=(), traces_steady=3,
                 trace_counting=TRACES_BETWEEN_ROUNDS)
    (d,) = [d for d in diagnostics.analyse(old)[1] if d.kind == "retracing"]
    assert "which tf.function and why is not known" in d.summary

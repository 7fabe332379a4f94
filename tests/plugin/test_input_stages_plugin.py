"""The input-bound diagnosis on real pipelines, through pytest: the stage that sets the pace, measured, and its remedy.

Two textbook pipelines with one slow stage each (a Python generator source; a sequential py_function map)
and the same map with ``num_parallel_calls``: each step waits for its input, the diagnosis fires, and a
profiled pass of the pipeline (after the timed rounds) names the stage and gives the advice for it, never
what TensorFlow already does (an injected prefetch; a map already parallel). When the profiler is taken
(another profiler session running), one line says so and the advice comes from the pipeline's shape.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.filterwarnings("default")

PIPELINES = """
import time

import numpy as np
import pytest
import tensorflow as tf


def _step():
    w = tf.Variable(tf.ones([32, 32]))

    @tf.function
    def step(x):
        return tf.reduce_sum(tf.linalg.matmul(w, w)) + tf.reduce_sum(tf.cast(x, tf.float32))
    return step


def _records():
    i = 0
    while True:
        time.sleep(0.003)  # reading and parsing one record in Python
        yield np.float32(i)
        i += 1


def _parse(x):
    time.sleep(0.003)
    return x


def _py_parse(x):
    return tf.py_function(_parse, [tf.cast(x, tf.float32)], tf.float32)


@pytest.mark.tfperf(budget_s=0.4)
def test_generator_source(tfperf):
    ds = tf.data.Dataset.from_generator(_records, output_signature=tf.TensorSpec([], tf.float32))
    tfperf.iterate(ds.map(lambda x: x * 2.0).batch(4), step=_step())


@pytest.mark.tfperf(budget_s=0.4)
def test_sequential_map(tfperf):
    tfperf.iterate(tf.data.Dataset.range(1 << 30).map(_py_parse).batch(4), step=_step())


@pytest.mark.tfperf(budget_s=0.4)
def test_parallel_map(tfperf):
    ds = tf.data.Dataset.range(1 << 30).map(_py_parse, num_parallel_calls=tf.data.AUTOTUNE).batch(4)
    tfperf.iterate(ds, step=_step())
"""


def _diagnoses(path) -> dict[str, dict]:  # noqa: ANN001
    doc = json.loads(path.read_text())
    out = {}
    for test_id, entry in doc["tests"].items():
        (d,) = [d for d in entry["measurement"]["diagnoses"] if d["kind"] == "input_bound"]
        out[test_id.rsplit("::", 1)[-1]] = d
    return out


def test_the_diagnosis_names_the_slow_stage_and_only_its_remedy(pytester: pytest.Pytester,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    pytester.makepyfile(test_pipelines=PIPELINES)
    result = pytester.runpytest_subprocess("--tfperf", "--tfperf-json", "out.json", "-p", "no:cacheprovider",
                                           timeout=120)
    result.assert_outcomes(passed=3)
    found = _diagnoses(pytester.path / "out.json")

    source = found["test_generator_source"]
    assert source["severity"] == "warning", source["summary"]
    assert "the stage that sets the pace is the from_generator source [" in source["summary"], source["summary"]
    assert "interleave(..., num_parallel_calls=tf.data.AUTOTUNE)" in source["summary"]
    assert source["figures"]["pace_stage_ms_per_element"] > 2.0  # 3 ms of sleep per element

    sequential = found["test_sequential_map"]
    assert "the stage that sets the pace is the function of its map" in sequential["summary"], sequential["summary"]
    assert "give its map num_parallel_calls=tf.data.AUTOTUNE" in sequential["summary"]
    assert sequential["figures"]["pace_stage_concurrency"] < 1.3

    parallel = found["test_parallel_map"]
    assert "already runs in parallel" in parallel["summary"], parallel["summary"]
    assert "give its map num_parallel_calls" not in parallel["summary"]
    for d in found.values():
        # TensorFlow injects a prefetch into each of these pipelines: advising one would change nothing
        assert ".prefetch(" not in d["summary"], d["summary"]
        assert "tensorboard --logdir" in d["summary"]
    assert (pytester.path / ".tfperf" / "profiles" / "test_pipelines.py_test_sequential_map" / "input").is_dir()


def test_with_the_profiler_taken_one_line_says_so_and_the_shape_advice_stays_true(pytester: pytest.Pytester,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    pytester.makepyfile(test_taken=PIPELINES.split("@pytest.mark.tfperf(budget_s=0.4)\ndef test_generator")[0] + """
@pytest.mark.tfperf(budget_s=0.3)
def test_sequential_map_while_profiling(tfperf, tmp_path):
    tf.profiler.experimental.start(str(tmp_path))  # as Keras' TensorBoard callback does
    try:
        tfperf.iterate(tf.data.Dataset.range(1 << 30).map(_py_parse).batch(4), step=_step())
    finally:
        tf.profiler.experimental.stop()
""")
    result = pytester.runpytest_subprocess("--tfperf", "--tfperf-json", "out.json", "-p", "no:cacheprovider",
                                           timeout=120)
    result.assert_outcomes(passed=1)
    d = _diagnoses(pytester.path / "out.json")["test_sequential_map_while_profiling"]
    assert d["severity"] == "warning"
    assert "(stages not measured: no profile: another profiler session is running" in d["summary"], d["summary"]
    assert ".prefetch(" not in d["summary"]  # inject_prefetch is on
    assert "if its function is stateful" in d["summary"]

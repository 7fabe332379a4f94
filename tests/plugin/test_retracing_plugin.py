"""Every retrace seen and explained through the plugin: real TensorFlow and Keras in a pytest subprocess.

A tf.function built inside the step and a Keras model compiled before every call used to read 0 and one
trace a round (the functions were looked up between rounds, after they were gone); now each reads one
trace a call. The retracing diagnosis names the function (``file:line``) and what changed, in the
terminal, the failure message and the JSON; a healthy ``fit`` or ``train_on_batch`` loop draws none.
"""

from __future__ import annotations

import json

import pytest

from tests.fakes.growth_confirmation import SHORT_GROWTH_CONFIRMATION

pytestmark = pytest.mark.filterwarnings("default")

CASES = """
import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

x = np.ones((16, 8), "float32")
y = np.ones((16, 1), "float32")


def _model():
    m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(1)])
    m.compile(optimizer="sgd", loss="mse")
    return m


@pytest.mark.tfperf(rounds=2, budget_s=0.6)  # a few calls a round: one trace a call, not a round
def test_new_function_each_call(tfperf):
    def body(v):
        return tf.reduce_sum(v * 2.0)

    tfperf(lambda: tf.function(body)(tf.ones([8])))


@pytest.mark.tfperf(rounds=2, budget_s=1.5)
def test_recompiled_each_call(tfperf):
    model = _model()

    def step():
        model.compile(optimizer="sgd", loss="mse")
        return model.train_on_batch(x, y)

    tfperf(step)


@pytest.mark.tfperf(max_traces=0)
def test_python_float(tfperf):
    @tf.function
    def scaled(v, lr):
        return v * lr

    rates = itertools.count()
    tfperf(lambda: scaled(tf.ones([4]), float(next(rates))))


@pytest.mark.parametrize("reduce", [False, True])
def test_batch_shapes(tfperf, reduce):
    @tf.function(reduce_retracing=reduce)
    def total(v):
        return tf.reduce_sum(v)

    sizes = itertools.count(1)
    tfperf(lambda: total(tf.ones([next(sizes), 3])))


def test_healthy_fit(tfperf):
    model = _model()
    tfperf(lambda: model.fit(x, y, batch_size=8, epochs=1, verbose=0), items=16)


def test_healthy_train_on_batch(tfperf):
    model = _model()
    tfperf(lambda: model.train_on_batch(x, y), items=16)
"""


def _line(text: str) -> int:
    """The line of ``text`` in the test file pytester writes."""
    return next(i for i, line in enumerate(CASES.strip().splitlines(), 1) if text in line)


def test_every_retrace_is_counted_and_explained_and_healthy_loops_draw_no_warning(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    pytester.makepyfile(test_retrace_cases=CASES)
    pytester.makeconftest(SHORT_GROWTH_CONFIRMATION)  # traces are asserted here, not growth
    result = pytester.runpytest_subprocess("--tfperf", "--tfperf-budget=0.3", "--tfperf-rounds=3",
                                           "--tfperf-json=results.json", "-p", "no:cacheprovider", timeout=300)
    out = result.stdout.str()
    result.assert_outcomes(passed=6, failed=1)
    doc = json.loads((pytester.path / "results.json").read_text())
    by_test = {test_id.split("::")[1]: entry["measurement"] for test_id, entry in doc["tests"].items()}

    def retracing(test: str) -> list[str]:
        return [d["summary"] for d in by_test[test].get("diagnoses", []) if d["kind"] == "retracing"]

    def one_a_call(test: str) -> None:
        m = by_test[test]
        assert m["trace_counting"] == "each_trace"
        assert m["traces_steady"] == m["summary"]["iterations"], test

    one_a_call("test_new_function_each_call")
    for test in ("test_new_function_each_call", "test_recompiled_each_call"):  # not one a round
        assert by_test[test]["traces_steady"] > by_test[test]["summary"]["rounds"], test
    (line,) = retracing("test_new_function_each_call")
    assert line.startswith(f"retracing: `test_new_function_each_call.<locals>.body` (test_retrace_cases.py:{_line('def body')}) ")
    assert "a new tf.function object around the same Python function each time" in line

    one_a_call("test_recompiled_each_call")
    (line,) = retracing("test_recompiled_each_call")
    assert "one_step_on_data` (keras/" in line and "compile once, outside the loop" in line

    # The failure names the function and the Python value that changed, one line per finding.
    assert "FAILED test_retrace_cases.py::test_python_float" in out
    assert (f"diagnosis: retracing: `test_python_float.<locals>.scaled` (test_retrace_cases.py:"
            f"{_line('@tf.function')}) traced ") in out
    (line,) = retracing("test_python_float")
    assert "(lr: Python value " in line and "pass it as a tensor" in line

    one_a_call("test_batch_shapes[False]")
    (line,) = retracing("test_batch_shapes[False]")
    assert "(v: shape (" in line and "input_signature with None" in line
    # reduce_retracing generalised the shape during warm-up: no steady trace at all.
    assert by_test["test_batch_shapes[True]"]["traces_steady"] == 0 and not retracing("test_batch_shapes[True]")

    for test in ("test_healthy_fit", "test_healthy_train_on_batch"):
        assert by_test[test]["traces_steady"] == 0 and not retracing(test), test
    assert "test_healthy_fit: retracing" not in out and "test_healthy_train_on_batch: retracing" not in out


FALLBACK = """
import itertools

import tensorflow as tf

from pytest_tfperf.measuring import trace_recorder

# A TensorFlow without the tracing callback list: the plugin looks functions up between rounds.
trace_recorder.TraceRecorder.available = staticmethod(lambda: False)


@tf.function
def scaled(v, lr):
    return v * lr


def test_python_float(tfperf):
    rates = itertools.count()
    tfperf(lambda: scaled(tf.ones([4]), float(next(rates))))
"""


def test_without_the_tracing_callback_traces_are_counted_between_rounds_and_the_diagnosis_says_why_not_more(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    pytester.makepyfile(test_fallback=FALLBACK)
    pytester.makeconftest(SHORT_GROWTH_CONFIRMATION)  # traces are asserted here, not growth
    result = pytester.runpytest_subprocess("--tfperf", "--tfperf-budget=0.2", "--tfperf-json=results.json",
                                           "-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(passed=1)
    doc = json.loads((pytester.path / "results.json").read_text())
    m = doc["tests"]["test_fallback.py::test_python_float"]["measurement"]
    assert m.get("trace_counting", "between_rounds") == "between_rounds" and m["traces_steady"] > 0
    (line,) = [d["summary"] for d in m["diagnoses"] if d["kind"] == "retracing"]
    assert "which tf.function and why is not known: this TensorFlow has no tracing callback" in line
    assert result.stdout.str().count("retracing:") == 1

"""Every tf.function trace counted as it happens, with what made it trace: real TensorFlow (tiny functions).

The recorder hangs on TensorFlow's concrete-function callbacks, so these tests trace real functions;
each trace takes a few milliseconds. The wording of the diagnosis is tested without TensorFlow below.
"""

from __future__ import annotations

import gc

import pytest

from pytest_tfperf.diagnoses.retrace_diagnosis import retrace_diagnoses
from pytest_tfperf.measuring.trace_recorder import TraceRecorder
from pytest_tfperf.model import TraceEvent



@pytest.fixture
def tf():  # noqa: ANN201
    # Imported here, not at collection: a session that collects this file must not have TensorFlow
    # loaded for every other test (in-process plugin runs measure differently with it loaded).
    return pytest.importorskip("tensorflow")


@pytest.fixture
def recorder(tf):  # noqa: ANN001, ANN201
    r = TraceRecorder()
    assert r.install()
    yield r
    r.uninstall()


def _since(recorder: TraceRecorder, start: int) -> tuple[TraceEvent, ...]:
    return recorder.events(start, recorder.total())


def test_a_python_float_argument_names_the_function_the_argument_and_both_values(recorder: TraceRecorder, tf) -> None:
    @tf.function
    def scaled(x, lr):  # noqa: ANN001, ANN202
        return x * lr

    scaled(tf.ones([2]), 0.1)
    start = recorder.total()
    scaled(tf.ones([2]), 0.1)  # cached: no trace
    assert recorder.total() == start
    scaled(tf.ones([2]), 0.2)
    (event,) = _since(recorder, start)
    line = scaled.python_function.__code__.co_firstlineno
    assert event.function.endswith("<locals>.scaled") and event.location == f"tests/unit/test_trace_recorder.py:{line}"
    assert (event.cause, event.changed, event.detail) == ("arguments", "lr: Python value", "lr: Python value 0.1 -> 0.2")


def test_shape_and_dtype_changes_are_said_with_their_values(recorder: TraceRecorder, tf) -> None:
    @tf.function
    def f(x):  # noqa: ANN001, ANN202
        return x + 1

    f(tf.ones([2, 3]))
    start = recorder.total()
    f(tf.ones([5, 3]))
    f(tf.ones([5, 3], tf.float64))
    shape, dtype = _since(recorder, start)
    assert (shape.changed, shape.detail) == ("x: shape", "x: shape (2, 3) -> (5, 3)")
    assert (dtype.changed, dtype.detail) == ("x: dtype", "x: dtype float32 -> float64")


def test_reduce_retracing_says_the_general_shape_it_traced_for(recorder: TraceRecorder, tf) -> None:
    @tf.function(reduce_retracing=True)
    def f(x):  # noqa: ANN001, ANN202
        return x * 2

    f(tf.ones([2, 3]))
    start = recorder.total()
    for n in (3, 4, 5, 6):
        f(tf.ones([n, 3]))
    (event,) = _since(recorder, start)  # generalised once, then reused
    assert event.detail == "x: shape (2, 3) -> (3, 3); reduce_retracing traced it for x (None, 3)"


def test_a_new_tf_function_on_every_call_counts_every_call(recorder: TraceRecorder, tf) -> None:
    def body(x):  # noqa: ANN001, ANN202
        return x + 1

    tf.function(body)(tf.ones([2]))
    start = recorder.total()
    for _ in range(3):
        tf.function(body)(tf.ones([2]))  # the function is gone before anyone could look it up
    events = _since(recorder, start)
    assert [e.cause for e in events] == ["new_function"] * 3
    assert events[0].function.endswith("body")


def test_a_first_call_that_creates_variables_counts_once(recorder: TraceRecorder, tf) -> None:
    holder: list[object] = []

    @tf.function
    def f(x):  # noqa: ANN001, ANN202
        if not holder:
            holder.append(tf.Variable(1.0))
        return x * holder[0]

    start = recorder.total()
    f(tf.ones([2]))  # traced with variable creation, TF's initialize_variables, traced again without
    # One call that traced, as a person counts it (and a model recompiled per call reads one a call);
    # TensorFlow's own count says 2, one per cache entry.
    assert recorder.total() - start == 1 and f.experimental_get_tracing_count() == 2
    assert [e.cause for e in _since(recorder, start)] == ["first_call"]


def test_tf_data_building_its_pipeline_functions_is_not_a_retrace(recorder: TraceRecorder, tf) -> None:
    start = recorder.total()
    for _ in range(2):
        ds = tf.data.Dataset.range(4).map(lambda v: v * 2).batch(2)
        list(ds)
    assert recorder.total() == start


def test_keras_compiled_again_on_every_call_counts_one_trace_a_call_and_says_compile_once(
        recorder: TraceRecorder) -> None:
    keras = pytest.importorskip("keras")
    np = pytest.importorskip("numpy")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    x, y = np.ones((8, 4), "float32"), np.ones((8, 1), "float32")
    model.compile("sgd", "mse")
    model.train_on_batch(x, y)
    start = recorder.total()
    model.train_on_batch(x, y)
    assert recorder.total() == start  # a healthy step does not trace
    for _ in range(2):
        model.compile("sgd", "mse")
        model.train_on_batch(x, y)
    model.make_train_function(force=True)
    model.train_on_batch(x, y)
    events = _since(recorder, start)
    assert [e.cause for e in events] == ["new_function"] * 3
    assert events[0].function.endswith("one_step_on_data") and events[0].location.startswith("keras")
    (d,) = retrace_diagnoses(events, 3, 3, causes_known=True)
    assert "compile once, outside the loop" in d.summary


def test_uninstalled_it_sees_nothing_and_installs_once(tf) -> None:
    r = TraceRecorder()
    assert r.install() and r.install()
    from tensorflow.python.eager.polymorphic_function import transform

    assert transform.CONCRETE_FUNCTION_CALLBACKS.count(r._callback) == 1
    r.uninstall()
    assert r._callback not in transform.CONCRETE_FUNCTION_CALLBACKS
    tf.function(lambda v: v + 1)(tf.ones([1]))
    assert r.total() == 0


def test_a_trace_it_cannot_read_is_counted_as_unknown_and_never_raises() -> None:
    r = TraceRecorder()
    r._callback(object())  # no TensorFlow frames above: nothing to read
    assert r.total() == 1
    assert r.events(0, 1) == (TraceEvent(function="?", location="?", cause="unknown"),)


def test_causes_are_kept_up_to_a_cap_and_the_count_goes_on(recorder: TraceRecorder, tf) -> None:
    capped = TraceRecorder(max_events=2)
    capped.install()
    try:
        f = tf.function(lambda v, k: v * k)
        for k in range(4):
            f(tf.ones([1]), float(k))
    finally:
        capped.uninstall()
    assert capped.total() == 4 and len(capped.events(0, 4)) == 2
    gc.collect()


def test_a_trace_is_compared_with_a_bounded_number_of_earlier_ones(recorder: TraceRecorder, tf,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The callback runs inside the traced call, so its cost is measured with the workload: a function retraced on
    every call must not cost more with every trace (compared with all earlier traces, the 60th compared 59)."""
    from pytest_tfperf.measuring import trace_recorder

    from tensorflow.core.function.polymorphism.function_cache import FunctionCache

    compared: list[int] = []
    real = trace_recorder._differences
    monkeypatch.setattr(trace_recorder, "_differences", lambda *a, **k: compared.append(1) or real(*a, **k))
    read: list[int] = []  # TensorFlow's cache read whole: it hashes every entry's type
    values = FunctionCache.values
    monkeypatch.setattr(FunctionCache, "values", lambda self: read.append(len(self)) or values(self))
    f = tf.function(lambda v, k: v * k)
    per_trace = []
    for k in range(60):
        before = len(compared)
        f(tf.ones([1]), float(k))
        per_trace.append(len(compared) - before)
    assert max(per_trace) == trace_recorder._MAX_COMPARED  # the latest few, however many traces came before
    assert len(read) <= 1  # read once at most (the first trace), not on every trace
    (last,) = recorder.events(recorder.total() - 1, recorder.total())
    assert last.detail == "k: Python value 58.0 -> 59.0"  # the closest of them still names the change
    gc.collect()


def test_traces_made_before_it_was_installed_are_compared_with_too(tf) -> None:
    f = tf.function(lambda v, k: v * k)
    for k in range(3):
        f(tf.ones([1]), float(k))  # traced with no recorder installed
    r = TraceRecorder()
    assert r.install()
    try:
        f(tf.ones([1]), 3.0)
    finally:
        r.uninstall()
    (event,) = r.events(0, r.total())
    assert (event.cause, event.detail) == ("arguments", "k: Python value 2.0 -> 3.0")
    gc.collect()


# -- the diagnosis's words, without TensorFlow -------------------------------------------------------------

def _event(cause: str = "arguments", changed: str = "lr: Python value", detail: str = "lr: Python value 0.1 -> 0.2",
           function: str = "step.<locals>.scaled", location: str = "test_x.py:12") -> TraceEvent:
    return TraceEvent(function=function, location=location, cause=cause, changed=changed, detail=detail)


def test_no_steady_trace_no_diagnosis() -> None:
    assert retrace_diagnoses((), 0, 100, causes_known=True) == ()
    assert retrace_diagnoses((), None, 100, causes_known=False) == ()


def test_one_line_per_function_and_cause_with_its_count_first_example_and_fix() -> None:
    events = [_event(), _event(detail="lr: Python value 0.2 -> 0.3"),
              _event(cause="arguments", changed="x: shape", detail="x: shape (2, 3) -> (5, 3)")]
    first, second = retrace_diagnoses(events, 3, 4, causes_known=True)
    assert first.summary == (
        "retracing: `step.<locals>.scaled` (test_x.py:12) traced 2 times after warm-up: an argument changed "
        "(lr: Python value 0.1 -> 0.2, the first of them); a Python number or string is part of the trace key: "
        "pass it as a tensor (tf.constant) or fix it, so that one trace serves every value")
    assert dict(first.figures) == {"traces": 2.0, "traces_per_iteration": 0.5}
    assert first.kind == "retracing" and first.severity == "warning" and "\n" not in first.summary
    assert "once after warm-up" in second.summary and "input_signature with None" in second.summary


def test_a_new_function_each_call_says_build_it_once() -> None:
    (d,) = retrace_diagnoses([_event(cause="new_function", changed="", detail="")] * 5, 5, 5, causes_known=True)
    assert "traced 5 times" in d.summary and "build the tf.function once, outside the step" in d.summary


def test_without_a_tracing_callback_it_says_so_in_one_line() -> None:
    (d,) = retrace_diagnoses((), 4, 8, causes_known=False)
    assert d.summary.startswith("retracing: 4 times after warm-up (0.50 per iteration); which tf.function and why "
                                "is not known: this TensorFlow has no tracing callback")


def test_traces_whose_cause_was_not_kept_are_still_said() -> None:
    ds = retrace_diagnoses([_event()], 1500, 1500, causes_known=True)
    assert "1499 times more after warm-up whose cause was not kept" in ds[-1].summary

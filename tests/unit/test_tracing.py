"""Trace counting reaches Keras 3's compiled step functions: fakes shaped like Keras 3.15's closures."""

from __future__ import annotations

import functools
import gc

from pytest_tfperf.measuring.trace_count import TraceCounter, find_traced_functions, keras_step_functions


class FakeTfFunction:
    """What the counter needs of a ``tf.function``: a tracing count and its Python function."""

    def __init__(self, python_function: object, name: str) -> None:
        self.python_function = python_function
        self.__name__ = name
        self.traces = 0

    def experimental_get_tracing_count(self) -> int:
        return self.traces

    def __call__(self, *args: object) -> None:
        return None


def _do_not_convert(fn):  # noqa: ANN001, ANN202 - autograph's decorator: a wrapper around the function
    @functools.wraps(fn)
    def wrapper(*args: object) -> object:
        return fn(*args)

    return wrapper


class FakeKeras3Model:
    """``train_function`` built as Keras 3.15's ``TensorFlowTrainer._make_function`` builds it."""

    def __init__(self) -> None:
        self.train_function = None
        self.test_function = None
        self.predict_function = None

    def compile(self) -> None:
        # Names as in Keras: a closure's cells come in name order, so multi_step_on_iterator (whose own
        # Python function leads to one_step_on_data's wrapper the long way round) is walked first.
        model = self

        def one_step_on_data(data: object) -> object:
            return model, data

        traced_one_step = FakeTfFunction(_do_not_convert(one_step_on_data), "one_step_on_data")

        @functools.wraps(traced_one_step)  # Keras's _autoconvert_optionals wrapper
        def autoconverted(data: object) -> object:
            return traced_one_step(data)

        one_step_on_data = autoconverted  # noqa: F811 - Keras rebinds the name the same way

        def multi_step_on_iterator_py(iterator: object) -> object:
            return one_step_on_data(next(iterator))  # type: ignore[call-overload]

        multi_step_on_iterator = FakeTfFunction(_do_not_convert(multi_step_on_iterator_py), "multi_step_on_iterator")

        def function(iterator: object) -> object:
            if iterator is None:
                return multi_step_on_iterator(iterator)
            return one_step_on_data(iterator)

        assert function.__code__.co_freevars == ("multi_step_on_iterator", "one_step_on_data")
        self.train_function = function  # type: ignore[assignment]
        self.one_step, self.multi_step = traced_one_step, multi_step_on_iterator


def test_keras_3_one_step_on_data_is_found_behind_the_plain_train_function() -> None:
    model = FakeKeras3Model()
    model.compile()
    found = keras_step_functions(model)
    assert {f.__name__ for f in found} == {"one_step_on_data", "multi_step_on_iterator"}  # type: ignore[attr-defined]


def test_a_lambda_calling_train_on_batch_leads_to_the_step_functions() -> None:
    model = FakeKeras3Model()
    model.compile()

    def step() -> object:
        return model.train_function(1)  # type: ignore[misc]

    assert model.one_step in find_traced_functions([step])


def test_a_function_first_reached_at_the_end_of_a_long_path_is_walked_again_from_a_short_one() -> None:
    # multi_step's own Python function reaches the autoconvert wrapper four hops down; the closure of
    # train_function reaches it in one. Walked once at the end of the long path, it used to be skipped.
    model = FakeKeras3Model()
    model.compile()
    assert model.one_step in keras_step_functions(model, depth=4)


def test_recompiling_counts_the_new_functions_traces_as_steady_and_keeps_the_old_ones() -> None:
    model = FakeKeras3Model()
    model.compile()
    counter = TraceCounter(lambda: [model])
    counter.refresh()
    model.one_step.traces = 1
    assert counter.total() == 1
    model.compile()  # a new train_function: the old one is dropped by the model
    model.one_step.traces = 1
    gc.collect()
    counter.refresh()
    assert counter.total() == 2  # the old function's trace is kept even though it is gone


def test_the_counter_does_not_keep_functions_alive() -> None:
    model = FakeKeras3Model()
    model.compile()
    counter = TraceCounter(lambda: [model])
    counter.refresh()
    model.one_step.traces = 3
    counter.total()
    old = model.one_step
    import weakref

    ref = weakref.ref(old)
    del old
    model.compile()
    gc.collect()
    assert ref() is None  # the counter held only a weak reference
    counter.refresh()
    assert counter.total() == 3


def test_keras_2_train_function_that_is_itself_a_tf_function_is_found() -> None:
    # tf.keras (Keras 2): model.train_function = tf.function(train_function); not installed here, so a fake
    class Keras2Model:
        def __init__(self) -> None:
            self.train_function = FakeTfFunction(lambda it: it, "train_function")
            self.test_function = None
            self.predict_function = None

    model = Keras2Model()
    assert keras_step_functions(model) == [model.train_function]
    assert model.train_function in find_traced_functions([lambda: model.train_function(1)])

"""Count tf.function traces between rounds, so that retracing shows up as a number.

TensorFlow's own retracing warning is rate-limited (about twice per function
per process), so counting log records misses most retraces. Instead we find the
``tf.function`` objects a workload uses and read
``experimental_get_tracing_count()`` before and after each phase.

Found automatically: the workload itself, its positional and keyword
arguments, the functions its closure and globals reference by name (one level
deep), and Keras models' compiled train/test/predict functions. Users can name
more through ``tfperf(..., functions=[...])``.

Keras 3 hides its ``tf.function`` one level further than tf.keras did:
``model.train_function`` is a plain Python function whose closure holds
``multi_step_on_iterator`` (a ``tf.function``, used by ``fit``/``evaluate``)
and a ``functools.wraps`` wrapper whose closure holds ``one_step_on_data``
(the ``tf.function`` that ``train_on_batch`` and every step run). So a
model's compiled functions are walked through closures, ``__wrapped__`` and a
``tf.function``'s own Python function, a few levels deep, where the general
search stops at one.

That search sees only the functions a workload still reaches when it looks:
one built anew inside the step is gone by then. ``trace_recorder.TraceRecorder``
sees every trace instead, as it happens; the fixture falls back on
``TraceCounter`` where a TensorFlow lacks the callback it needs.
"""

from __future__ import annotations

import types
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

KERAS_FUNCTION_ATTRS = ("train_function", "test_function", "predict_function")
# model.train_function -> wrapper -> one_step_on_data is two hops in Keras 3.15;
# a tf.function's own Python function sits behind autograph's do_not_convert
# wrapper, two more. Six leaves room for a wrapper a later Keras adds.
KERAS_DEPTH = 6


def _is_traced_function(obj: object) -> bool:
    return callable(getattr(obj, "experimental_get_tracing_count", None))


def _closure_contents(fn: types.FunctionType) -> Iterator[object]:
    for cell in fn.__closure__ or ():
        try:
            yield cell.cell_contents
        except ValueError:  # an empty cell
            continue


def keras_step_functions(model: object, depth: int = KERAS_DEPTH) -> list[object]:
    """The tf.functions behind a Keras model's compiled train/test/predict functions (Keras 2 and 3)."""
    found: dict[int, object] = {}
    # Depth left when each object was walked: an object first reached at the
    # end of a long path is walked again when a shorter path reaches it.
    seen: dict[int, int] = {id(model): depth + 1}  # closures hold the model itself: never walk back into it

    def walk(obj: object, left: int) -> None:
        if seen.get(id(obj), -1) >= left:
            return
        seen[id(obj)] = left
        if _is_traced_function(obj):
            found.setdefault(id(obj), obj)
            # A tf.function may call other tf.functions that trace with it
            # (predict_function's one_step_on_data under jit_compile).
            inner = getattr(obj, "python_function", None)
            if inner is not None and left > 0:
                walk(inner, left - 1)
            return
        if left <= 0:
            return
        wrapped = getattr(obj, "__wrapped__", None)
        if wrapped is not None:
            walk(wrapped, left - 1)
        if isinstance(obj, types.FunctionType):
            for value in _closure_contents(obj):
                # Only functions lead to step functions; the rest of a closure
                # (the model, its strategy, optimizers) is not searched.
                if callable(value) and not isinstance(value, type):
                    walk(value, left - 1)

    for attr in KERAS_FUNCTION_ATTRS:
        fn = getattr(model, attr, None) if not isinstance(model, type) else None
        if fn is not None:
            walk(fn, depth)
    return list(found.values())


def _is_keras_model(obj: object) -> bool:
    if isinstance(obj, type):
        return False
    try:
        return any(attr in vars(obj) for attr in KERAS_FUNCTION_ATTRS)
    except TypeError:  # no __dict__
        return False


def _candidates(obj: object, depth: int) -> Iterable[object]:
    yield obj
    if depth <= 0:
        return
    owner = getattr(obj, "__self__", None)  # a bound method: look at its object too
    if owner is not None:
        yield from _candidates(owner, depth - 1)
    if _is_keras_model(obj):
        yield from keras_step_functions(obj)
    code_owner: Any = obj
    if isinstance(obj, types.MethodType):
        code_owner = obj.__func__
    if isinstance(code_owner, types.FunctionType):
        for value in _closure_contents(code_owner):
            yield from _candidates(value, depth - 1)
        glb = code_owner.__globals__
        for name in code_owner.__code__.co_names:
            if name in glb:
                yield from _candidates(glb[name], depth - 1)


def find_traced_functions(roots: Iterable[object], depth: int = 2) -> list[object]:
    """The distinct tf.function objects reachable from ``roots``."""
    seen: dict[int, object] = {}
    for root in roots:
        for obj in _candidates(root, depth):
            if _is_traced_function(obj) and id(obj) not in seen:
                seen[id(obj)] = obj
    return list(seen.values())


class TraceCounter:
    """Sums trace counts over a growing set of tf.functions.

    Keras builds ``train_function`` during the first call, so the set is
    re-discovered after warm-up; a function first seen then counts all its
    traces as warm-up traces. Keras builds a new one after ``compile()``: one
    first seen in the steady state counts its traces as steady-state traces,
    which is what recompiling in a loop costs. The runner refreshes between
    rounds, so a model recompiled on every call is seen once a round: its
    steady count is at least the number of rounds, not of calls (the catalog's
    quick check refreshes after every call and counts each one).

    Functions are held by weak reference, with their count as last read: a
    strong one would keep every recompiled model's graphs alive, a memory
    leak of the plugin's own making (about 600 KiB per recompile measured).
    A function that is gone keeps counting its last-read traces.
    """

    def __init__(self, roots: Callable[[], Iterable[object]]) -> None:
        self._roots = roots
        self._functions: dict[int, tuple[Callable[[], object | None], int]] = {}

    def refresh(self) -> None:
        for fn in find_traced_functions(self._roots()):
            entry = self._functions.get(id(fn))
            if entry is not None and entry[0]() is fn:
                continue
            self._functions[id(fn)] = (_reference(fn), self._count(fn, 0))
            # (an id reused by a new object after the old one died starts a new entry;
            # the old one's traces are kept under a key no live object can take)
            if entry is not None:
                self._functions[-len(self._functions)] = (lambda: None, entry[1])

    @staticmethod
    def _count(fn: object | None, last: int) -> int:
        if fn is None:
            return last
        return int(fn.experimental_get_tracing_count())  # type: ignore[attr-defined]

    def total(self) -> int:
        total = 0
        for key, (ref, last) in list(self._functions.items()):
            count = self._count(ref(), last)
            self._functions[key] = (ref, count)
            total += count
        return total

    @property
    def functions(self) -> tuple[object, ...]:
        return tuple(f for f in (ref() for ref, _ in self._functions.values()) if f is not None)


def _reference(obj: object) -> Callable[[], object | None]:
    try:
        return weakref.ref(obj)
    except TypeError:  # not weakly referenceable: hold it (a plain object costs nothing)
        return lambda: obj

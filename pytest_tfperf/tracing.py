"""Count tf.function traces, so that retracing shows up as a number.

TensorFlow's own retracing warning is rate-limited (about twice per function
per process), so counting log records misses most retraces. Instead we find the
``tf.function`` objects a workload uses and read
``experimental_get_tracing_count()`` before and after each phase.

Found automatically: the workload itself, its positional and keyword
arguments, the functions its closure and globals reference by name (one level
deep), and Keras models' compiled train/test/predict functions. Users can name
more through ``tfperf(..., functions=[...])``.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable
from typing import Any

_KERAS_FUNCTION_ATTRS = ("train_function", "test_function", "predict_function")


def _is_traced_function(obj: object) -> bool:
    return callable(getattr(obj, "experimental_get_tracing_count", None))


def _candidates(obj: object, depth: int) -> Iterable[object]:
    yield obj
    if depth <= 0:
        return
    owner = getattr(obj, "__self__", None)  # a bound method: look at its object too
    if owner is not None:
        yield from _candidates(owner, depth - 1)
    for attr in _KERAS_FUNCTION_ATTRS:
        fn = getattr(obj, attr, None) if not isinstance(obj, type) else None
        if fn is not None:
            yield fn
    code_owner: Any = obj
    if isinstance(obj, types.MethodType):
        code_owner = obj.__func__
    if isinstance(code_owner, types.FunctionType):
        for cell in code_owner.__closure__ or ():
            try:
                yield from _candidates(cell.cell_contents, depth - 1)
            except ValueError:  # empty cell
                continue
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
    traces as warm-up traces.
    """

    def __init__(self, roots: Callable[[], Iterable[object]]) -> None:
        self._roots = roots
        self._functions: list[object] = []

    def refresh(self) -> None:
        known = {id(f) for f in self._functions}
        for fn in find_traced_functions(self._roots()):
            if id(fn) not in known:
                self._functions.append(fn)

    def total(self) -> int:
        return sum(int(f.experimental_get_tracing_count()) for f in self._functions)  # type: ignore[attr-defined]

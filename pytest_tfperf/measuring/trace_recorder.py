"""Record every tf.function trace as it happens, with what made it trace.

``trace_count.TraceCounter`` sees only the functions a workload still reaches
when it looks: one built anew inside the step is gone by then.
``TraceRecorder`` sees every trace instead, as it happens: TensorFlow calls
each function in ``transform.CONCRETE_FUNCTION_CALLBACKS`` (the list its
debugger, ``tf.debugging.experimental.enable_dump_debug_info``, registers in)
when it makes a new concrete function, and never on a call that finds its
trace in the cache, so the recorder costs nothing on the calls the rounds
time. Being called while TensorFlow traces, it reads from the tracing frames
which ``tf.function`` traced and with what arguments, and compares them with
the function's earlier traces (``diagnoses.retrace_diagnosis.retrace_diagnoses`` words
the result). Where a TensorFlow lacks that list the fixture falls back on
``TraceCounter``.
"""

from __future__ import annotations

import bisect
import inspect
import os
import sys
import threading
import types
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence

from pytest_tfperf.model import TraceEvent


# Traces of TensorFlow's own machinery, not of a user's tf.function: tf.data traces the functions of a
# pipeline when the pipeline is built (model.fit on NumPy arrays builds one per call), and a tf.function
# that creates variables traces ``initialize_variables`` for them on its first call.
_TF_MACHINERY = (os.sep.join(("tensorflow", "python", "data", "")),
                 os.sep.join(("tensorflow", "python", "eager", "polymorphic_function", "")))
MAX_EVENTS = 1000  # causes kept per measurement; the count goes on past it
_MAX_FUNCTIONS = 256  # Python functions whose last trace is remembered (for "a new tf.function object")
_MAX_CHANGES = 3  # differences named per trace
# Earlier traces of the same tf.function that a new trace is compared with, the latest first, kept by the recorder
# itself. The callback runs inside the traced call, so its cost is measured with the workload: compared with every
# earlier trace, read from TensorFlow's cache on every trace (its ``values()`` hashes every entry's type, about
# 12 us each), a function retraced on every call cost the measurement quadratically (the catalog's retracing
# scenario, about 300 traces a variant: 181,000 comparisons and 360,000 hashes). The closest of the latest few
# names the change as well.
_MAX_COMPARED = 16
_MAX_CACHES = 256  # tf.functions whose latest traces are kept


class TraceRecorder:
    """Counts every ``tf.function`` trace while installed, and keeps what made each one trace.

    ``total()`` is the number of traces so far (the runner reads it between
    phases, as it reads ``TraceCounter``'s); ``events(a, b)`` the causes of
    the traces counted after reading ``a`` up to reading ``b``. A first call
    that creates variables traces its function twice (with variable creation,
    then without) and TensorFlow's ``initialize_variables`` once: one traced
    call here (``experimental_get_tracing_count()`` says 2, one per cache
    entry), so that a Keras model compiled again before every call counts one
    trace a call. tf.data's own functions are not counted (``_TF_MACHINERY``).
    """

    def __init__(self, *, max_events: int = MAX_EVENTS) -> None:
        self._count = 0
        self._max_events = max_events
        self._seqs: list[int] = []
        self._events: list[TraceEvent] = []
        self._last_by_code: dict[tuple[str, str], object] = {}
        self._latest = _LatestTraces()
        self._lock = threading.RLock()
        self._callbacks: list[Callable[[object], None]] | None = None

    @staticmethod
    def available() -> bool:
        """Whether this TensorFlow calls back on every new trace (``transform.CONCRETE_FUNCTION_CALLBACKS``)."""
        return _callback_list() is not None

    def install(self) -> bool:
        callbacks = _callback_list()
        if callbacks is None:
            return False
        if self._callback not in callbacks:
            callbacks.append(self._callback)
        self._callbacks = callbacks
        return True

    def uninstall(self) -> None:
        if self._callbacks is not None and self._callback in self._callbacks:
            self._callbacks.remove(self._callback)
        self._callbacks = None

    def total(self) -> int:
        return self._count

    def events(self, after: int, upto: int) -> tuple[TraceEvent, ...]:
        """The kept causes of traces number ``after + 1`` to ``upto``."""
        lo, hi = bisect.bisect_right(self._seqs, after), bisect.bisect_right(self._seqs, upto)
        return tuple(self._events[lo:hi])

    def _callback(self, concrete_function: object) -> None:
        # Called inside TensorFlow's tracing, on whichever thread traces: it must never raise, whatever
        # TensorFlow changed, and two threads tracing at once share ``_last_by_code`` under the lock.
        with self._lock:
            try:
                event = _describe_trace(concrete_function, sys._getframe(1), self._last_by_code, self._latest)
            except Exception:  # noqa: BLE001 - a trace we cannot read is still a trace
                event = TraceEvent(function="?", location="?", cause="unknown")
            if event is None:  # TensorFlow's own machinery, or the second half of a first call
                return
            self._count += 1
            if len(self._events) < self._max_events:
                self._seqs.append(self._count)
                self._events.append(event)


def _callback_list() -> list[Callable[[object], None]] | None:
    if "tensorflow" not in sys.modules:
        return None
    try:
        from tensorflow.python.eager.polymorphic_function import transform
    except ImportError:
        return None
    callbacks = getattr(transform, "CONCRETE_FUNCTION_CALLBACKS", None)
    return callbacks if isinstance(callbacks, list) else None


class _LatestTraces:
    """The latest ``_MAX_COMPARED`` traced types of each tf.function's cache, as the recorder saw them traced: the
    same as the cache's last entries, without reading the whole cache on every trace. Read from the cache once
    where the two disagree on how many traces there are (traces before the recorder was installed, an entry
    TensorFlow deleted, a cache's id reused)."""

    def __init__(self) -> None:
        self._by_cache: OrderedDict[int, tuple[int, deque[object]]] = OrderedDict()

    def before(self, cache: object) -> list[object]:
        """The cache's latest traced types, oldest first, before the trace being made now joins it."""
        size = len(cache)  # type: ignore[arg-type]
        kept = self._by_cache.get(id(cache))
        if kept is None or kept[0] != size:
            latest = list(cache.values())[-_MAX_COMPARED:]  # type: ignore[attr-defined]
            kept = (size, deque((t for t in (getattr(c, "function_type", None) for c in latest) if t is not None),
                                maxlen=_MAX_COMPARED))
        self._by_cache[id(cache)] = kept
        self._by_cache.move_to_end(id(cache))
        while len(self._by_cache) > _MAX_CACHES:
            self._by_cache.popitem(last=False)
        return list(kept[1])

    def add(self, cache: object, traced: object) -> None:
        """The trace being made now, once it is in the cache."""
        size, types_ = self._by_cache[id(cache)]
        if traced is not None:
            types_.append(traced)
        self._by_cache[id(cache)] = (size + 1, types_)


def _describe_trace(concrete_function: object, frame: types.FrameType | None,
                    last_by_code: dict[tuple[str, str], object],
                    latest: _LatestTraces) -> TraceEvent | None:
    """What traced and why, from the frames of TensorFlow's tracing (``tracing_compilation``)."""
    options = lookup = function = None
    first_call_frame = False
    while frame is not None:
        code = frame.f_code
        if options is None:
            if code.co_name == "_maybe_define_function" and "tracing_options" in frame.f_locals:
                options = frame.f_locals["tracing_options"]
                lookup = frame.f_locals.get("lookup_func_type")
        elif function is None and code.co_name == "_call":
            owner = frame.f_locals.get("self")
            if getattr(owner, "_function_cache", None) is getattr(options, "function_cache", False):
                function = owner
                first_call_frame = "initializers" in frame.f_locals
                break
        frame = frame.f_back
    if options is None:
        return TraceEvent(function="?", location="?", cause="unknown")
    python_function = getattr(function, "python_function", None) or getattr(options, "python_function", None)
    name, location, filename = _where(python_function, getattr(options, "name", "?"))
    if any(part in filename for part in _TF_MACHINERY) or any(
            part in _where(getattr(options, "python_function", None), "")[2] for part in _TF_MACHINERY):
        return None
    scope = getattr(getattr(options, "scope_type", None), "name", "")
    if first_call_frame and scope == "NO_VARIABLE_CREATION":
        # The first call made variables: TensorFlow traced it with variable creation, lifted their
        # initializers out, and traces it again without: one call that traced.
        return None
    if lookup is None:
        lookup = getattr(concrete_function, "function_type", None)
    key = (name, location)
    seen_before = last_by_code.pop(key, None)
    last_by_code[key] = lookup
    while len(last_by_code) > _MAX_FUNCTIONS:
        last_by_code.pop(next(iter(last_by_code)))
    cache = getattr(options, "function_cache", None)
    previous = latest.before(cache) if cache is not None else []
    if cache is not None:
        latest.add(cache, getattr(concrete_function, "function_type", None))
    generalised = ""
    if getattr(options, "reduce_retracing", False):
        traced = getattr(concrete_function, "function_type", None)
        spread = _differences(lookup, traced, captures=False)
        if spread:
            generalised = "; reduce_retracing traced it for " + ", ".join(
                d.split(" -> ")[0].split(": ", 1)[0] + " " + d.split(" -> ")[-1] for d in spread)
    if previous:
        # The closest of the latest earlier traces, the latest of equally close ones: what "changed" means to a
        # reader.
        best = min((_differences(p, lookup) for p in reversed(previous)), key=len)
        if best:
            return TraceEvent(name, location, "arguments", _changed(best), "; ".join(best) + generalised)
        return TraceEvent(name, location, "context", "", "the same arguments as an earlier trace" + generalised)
    if seen_before is not None:
        diffs = _differences(seen_before, lookup)
        return TraceEvent(name, location, "new_function", "", "; ".join(diffs) + generalised)
    return TraceEvent(name, location, "first_call", "", generalised.lstrip("; "))


def _where(python_function: object, fallback: str) -> tuple[str, str, str]:
    """(qualified name, ``file:line`` as a person reads it, the full file name)."""
    if python_function is None:
        return fallback, "?", ""
    fn = python_function
    try:
        fn = inspect.unwrap(fn)  # type: ignore[arg-type]
    except ValueError:  # a cycle of __wrapped__
        pass
    fn = getattr(fn, "__func__", fn)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or fallback
    code = getattr(fn, "__code__", None)
    if code is None:
        return name, "?", ""
    return name, f"{_short_path(code.co_filename)}:{code.co_firstlineno}", code.co_filename


def _short_path(filename: str) -> str:
    marker = os.sep + "site-packages" + os.sep
    if marker in filename:
        return filename.split(marker, 1)[1]
    try:
        rel = os.path.relpath(filename)
    except ValueError:  # another drive
        return filename
    return filename if rel.startswith(os.pardir) else rel


def _differences(before: object, after: object, *, captures: bool = True) -> list[str]:
    """What differs between two traces' types, argument by argument, in words (at most a few)."""
    if before is None or after is None:
        return []
    a_params = getattr(before, "parameters", None)
    b_params = getattr(after, "parameters", None)
    if a_params is None or b_params is None:
        return [] if before == after else [f"signature {_short(before)} -> {_short(after)}"]
    out: list[str] = []
    for pname in list(b_params):
        a, b = a_params.get(pname), b_params[pname]
        if a is None:
            out.append(f"{pname}: new argument")
        else:
            _diff(pname, a.type_constraint, b.type_constraint, out)
    for pname in a_params:
        if pname not in b_params:
            out.append(f"{pname}: argument gone")
    if captures and not out and getattr(before, "captures", None) != getattr(after, "captures", None):
        out.append("captured values: their types changed")
    return out[:_MAX_CHANGES] + ([f"{len(out) - _MAX_CHANGES} more"] if len(out) > _MAX_CHANGES else [])


def _diff(path: str, a: object, b: object, out: list[str]) -> None:
    if a == b or len(out) > _MAX_CHANGES:
        return
    if _is_tensor_spec(a) and _is_tensor_spec(b):
        if a.dtype != b.dtype:  # type: ignore[attr-defined]
            out.append(f"{path}: dtype {a.dtype.name} -> {b.dtype.name}")  # type: ignore[attr-defined]
        if a.shape != b.shape:  # type: ignore[attr-defined]
            out.append(f"{path}: shape {_shape(a.shape)} -> {_shape(b.shape)}")  # type: ignore[attr-defined]
        if a.dtype == b.dtype and a.shape == b.shape:  # type: ignore[attr-defined]
            out.append(f"{path}: {_short(a)} -> {_short(b)}")
        return
    if type(a) is type(b):
        if type(a).__name__ == "Literal":
            out.append(f"{path}: Python value {_value(a)} -> {_value(b)}")
            return
        parts_a, parts_b = _parts(a), _parts(b)
        if parts_a is not None and parts_b is not None:
            keys_a, keys_b = dict(parts_a), dict(parts_b)
            for key, x in parts_a:
                if key in keys_b:
                    _diff(f"{path}{key}", x, keys_b[key], out)
                else:
                    out.append(f"{path}{key}: element gone (was {_short(x)})")
            out.extend(f"{path}{key}: element added ({_short(y)})" for key, y in parts_b if key not in keys_a)
            return
    out.append(f"{path}: {_short(a)} -> {_short(b)}")


def _parts(t: object) -> list[tuple[str, object]] | None:
    """The components of a nested trace type (tuple, list, named tuple, dict), each with its path."""
    name = type(t).__name__
    if name == "Tuple":
        return [(f"[{i}]", c) for i, c in enumerate(t.components)]  # type: ignore[attr-defined]
    if name == "List":
        return [(f"[{i}]", c) for i, c in enumerate(t.components_tuple.components)]  # type: ignore[attr-defined]
    if name == "NamedTuple":
        return [(f".{n}", c) for n, c in zip(t.attribute_names, t.attributes.components, strict=False)]  # type: ignore[attr-defined]
    if name == "Dict":
        return [(f"[{k!r}]", v) for k, v in t.mapping.items()]  # type: ignore[attr-defined]
    return None


def _is_tensor_spec(t: object) -> bool:
    return hasattr(t, "shape") and hasattr(t, "dtype") and hasattr(getattr(t, "dtype"), "name")


def _shape(shape: object) -> str:
    dims = getattr(shape, "as_list", None)
    try:
        listed = dims() if dims is not None else None
    except ValueError:  # unknown rank
        return "(unknown rank)"
    if listed is None:
        return str(shape)
    return "(" + ", ".join("None" if d is None else str(d) for d in listed) + ("," if len(listed) == 1 else "") + ")"


def _value(literal: object) -> str:
    text = repr(getattr(literal, "value", literal))
    return text if len(text) <= 40 else text[:37] + "..."


def _short(t: object) -> str:
    if _is_tensor_spec(t):
        return f"tensor {t.dtype.name} {_shape(t.shape)}"  # type: ignore[attr-defined]
    if type(t).__name__ == "Literal":
        return f"Python value {_value(t)}"
    if type(t).__name__ == "Weakref":
        ref = getattr(t, "_ref", None)
        obj = ref() if callable(ref) else None
        return f"Python object {type(obj).__name__}" if obj is not None else "a Python object since deleted"
    text = str(t)
    return text if len(text) <= 60 else text[:57] + "..."


def _changed(differences: Sequence[str]) -> str:
    """What changed without its values: ``"lr: Python value"``, ``"x: shape"``: the key traces are grouped by."""
    keys = []
    for d in differences:
        head, _, rest = d.partition(": ")
        aspect = rest.split(" ", 1)[0] if rest.split(" ", 1)[0] in ("shape", "dtype") else (
            "Python value" if rest.startswith("Python value") else "type")
        keys.append(f"{head}: {aspect}" if rest else head)
    return ", ".join(keys)

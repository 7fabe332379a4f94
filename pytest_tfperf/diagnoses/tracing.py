"""Count tf.function traces, so that retracing shows up as a number.

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
one built anew inside the step is gone by then. ``TraceRecorder`` sees every
trace instead, as it happens: TensorFlow calls each function in
``transform.CONCRETE_FUNCTION_CALLBACKS`` (the list its debugger,
``tf.debugging.experimental.enable_dump_debug_info``, registers in) when it
makes a new concrete function, and never on a call that finds its trace in
the cache, so the recorder costs nothing on the calls the rounds time. Being
called while TensorFlow traces, it reads from the tracing frames which
``tf.function`` traced and with what arguments, and compares them with the
function's earlier traces (``retrace_diagnoses`` words the result). Where a
TensorFlow lacks that list the fixture falls back on ``TraceCounter``.
"""

from __future__ import annotations

import bisect
import inspect
import os
import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from pytest_tfperf.model import Diagnosis, TraceEvent

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


# -- every trace, as it happens ---------------------------------------------------------------------------

# Traces of TensorFlow's own machinery, not of a user's tf.function: tf.data traces the functions of a
# pipeline when the pipeline is built (model.fit on NumPy arrays builds one per call), and a tf.function
# that creates variables traces ``initialize_variables`` for them on its first call.
_TF_MACHINERY = (os.sep.join(("tensorflow", "python", "data", "")),
                 os.sep.join(("tensorflow", "python", "eager", "polymorphic_function", "")))
MAX_EVENTS = 1000  # causes kept per measurement; the count goes on past it
_MAX_FUNCTIONS = 256  # Python functions whose last trace is remembered (for "a new tf.function object")
_MAX_CHANGES = 3  # differences named per trace


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
                event = _describe_trace(concrete_function, sys._getframe(1), self._last_by_code)
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


def _describe_trace(concrete_function: object, frame: types.FrameType | None,
                    last_by_code: dict[tuple[str, str], object]) -> TraceEvent | None:
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
    previous = [getattr(c, "function_type", None) for c in (cache.values() if cache is not None else ())]
    previous = [p for p in previous if p is not None]
    generalised = ""
    if getattr(options, "reduce_retracing", False):
        traced = getattr(concrete_function, "function_type", None)
        spread = _differences(lookup, traced, captures=False)
        if spread:
            generalised = "; reduce_retracing traced it for " + ", ".join(
                d.split(" -> ")[0].split(": ", 1)[0] + " " + d.split(" -> ")[-1] for d in spread)
    if previous:
        # The closest earlier trace, the latest of equally close ones: what "changed" means to a reader.
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


# -- the retracing diagnosis ------------------------------------------------------------------------------

def retrace_diagnoses(events: Sequence[TraceEvent], traces_steady: int | None, iterations: int, *,
                      causes_known: bool) -> tuple[Diagnosis, ...]:
    """One ``retracing`` warning per function and cause that traced after warm-up; none without such traces."""
    if not traces_steady:
        return ()
    per_iteration = traces_steady / iterations if iterations > 0 else float(traces_steady)
    if not causes_known:
        return (Diagnosis(
            kind="retracing", severity="warning",
            summary=(f"retracing: {_times(traces_steady)} after warm-up ({per_iteration:.2f} per iteration); "
                     "which tf.function and why is not known: this TensorFlow has no tracing callback "
                     "(transform.CONCRETE_FUNCTION_CALLBACKS), so traces were counted between rounds"),
            figures=(("traces", float(traces_steady)), ("traces_per_iteration", per_iteration))),)
    groups: dict[tuple[str, str, str, str], list[TraceEvent]] = {}
    for e in events:
        groups.setdefault((e.function, e.location, e.cause, e.changed), []).append(e)
    out = []
    for (function, location, cause, changed), group in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        n = len(group)
        where = "an unknown tf.function" if function == "?" else f"`{function}` ({location})"
        out.append(Diagnosis(
            kind="retracing", severity="warning",
            summary=f"retracing: {where} traced {_times(n)} after warm-up: {_why(cause, changed, group)}",
            figures=(("traces", float(n)), ("traces_per_iteration", n / iterations if iterations > 0 else float(n)))))
    unkept = traces_steady - len(events)
    if unkept > 0:
        out.append(Diagnosis(
            kind="retracing", severity="warning",
            summary=(f"retracing: {_times(unkept)} more after warm-up whose cause was not kept "
                     f"(the first {MAX_EVENTS} a measurement are)"),
            figures=(("traces", float(unkept)),)))
    return tuple(out)


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def _why(cause: str, changed: str, group: Sequence[TraceEvent]) -> str:
    example = next((e.detail for e in group if e.detail), "")
    if cause == "arguments":
        first = f" ({example}{', the first of them' if len(group) > 1 else ''})" if example else ""
        if "Python value" in changed:
            fix = ("a Python number or string is part of the trace key: pass it as a tensor (tf.constant) "
                   "or fix it, so that one trace serves every value")
        elif "shape" in changed and "reduce_retracing traced it" in example:
            fix = ("reduce_retracing made this trace general, so shapes like it reuse it; an input_signature "
                   "with None in the dimension that varies avoids even this trace")
        elif "shape" in changed:
            fix = ("give the tf.function an input_signature with None in the dimension that varies, or "
                   "reduce_retracing=True, or keep the shapes fixed (pad or bucket them)")
        elif "dtype" in changed:
            fix = "cast the argument to one dtype before the call"
        else:
            fix = "keep the arguments' types the same from call to call"
        return f"an argument changed{first}; {fix}"
    if cause == "new_function":
        keras = "keras" in group[0].location.split(os.sep)[0].lower()
        fix = ("Keras makes a new step function on model.compile() or make_train_function(force=True): "
               "compile once, outside the loop" if keras else
               "build the tf.function once, outside the step, and call that one")
        return f"a new tf.function object around the same Python function each time, so it traces anew; {fix}"
    if cause == "first_call":
        return "its first call came after warm-up (a function made during the measurement)"
    if cause == "context":
        return f"{example or 'the same arguments'}, traced again for another context (device, graph or captures)"
    return "TensorFlow did not expose which tf.function traced or why"

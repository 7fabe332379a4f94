"""The ``retracing`` diagnosis: traces after warm-up, grouped by function and cause, in words with the fix.

The traces and their causes come from the measuring layer
(``measuring.trace_recorder.TraceRecorder``, or only a count from
``measuring.trace_count.TraceCounter`` where TensorFlow has no tracing
callback); this module says what they mean.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from pytest_tfperf.measuring.trace_recorder import MAX_EVENTS
from pytest_tfperf.model import Diagnosis, TraceEvent

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

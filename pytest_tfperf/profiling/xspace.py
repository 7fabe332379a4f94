"""Reading TensorFlow's XPlane profile (``*.xplane.pb``) into a compact ``Profile``, without TensorBoard.

The host plane (``/host:CPU``) has one line per thread; events on a line nest,
and an event's self time is its duration minus its children's on the same line
(as xprof computes it). Each event is put in a group:

- a TensorFlow op (``node:Type``): its layer scope, or its op family when it has
  no scope; on tf.data's threads, the tf.data stage it runs under, or "tf.data
  work" of its family when it runs on the private thread pool (parallel map
  functions);
- a tf.data stage (``Iterator::...``): the stage, except an asynchronous stage's
  time on the consumer's thread (``Prefetch``, ``ParallelMap``...), which is the
  consumer waiting for input;
- a ``tf.function`` call that traced (its ``tf_function_call`` stat says
  ``traced-...``): the retracing of that function;
- anything else (executor and eager wrappers) inherits its nearest grouped
  ancestor, or stays unattributed.

The caller marks each profiled window with a TraceMe event named ``marker``;
an event belongs to the window in which it starts. The protobuf module is
imported lazily and probed at the places TensorFlow versions put it.
"""

from __future__ import annotations

import bisect
import importlib
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from pytest_tfperf.profiling.model import Group, Profile
from pytest_tfperf.profiling.names import (
    is_async_stage, is_parallel_stage, is_stage, is_tf_data_thread, layer_scope, op_family, parse_op, stage_key,
)

WINDOW_MARKER = "tfperf_window"
HOST_PLANE = "/host:CPU"
XPLANE_MODULES = (
    "tensorflow.tsl.profiler.protobuf.xplane_pb2",  # TF 2.21 ships it here
    "tsl.profiler.protobuf.xplane_pb2",
    "tensorflow.core.profiler.protobuf.xplane_pb2",
    "xprof.protobuf.xplane_pb2",
    "tensorboard_plugin_profile.protobuf.xplane_pb2",
)
_GET_NEXT = ("IteratorGetNextOp::DoCompute", "IteratorGetNextAsOptionalOp::DoCompute")
_DEADLINE_EVERY = 4096  # events between two looks at the clock


class ProfileUnavailable(Exception):
    """Why there is no profile, in one line (the caller prints ``no profile: <message>``)."""


def xplane_module() -> Any:
    """The ``xplane_pb2`` module of whichever place this install has it, or ProfileUnavailable naming those tried."""
    for name in XPLANE_MODULES:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ProfileUnavailable("no XPlane protobuf module (tried " + ", ".join(XPLANE_MODULES) + ")")


def load_xspace(path: Path, *, max_bytes: int) -> Any:
    size = path.stat().st_size
    if size > max_bytes:
        raise ProfileUnavailable(f"profile {path.name} is {size / 2**20:.0f} MiB, over the "
                                 f"{max_bytes / 2**20:.0f} MiB read in time; profile fewer iterations")
    space = xplane_module().XSpace()
    space.ParseFromString(path.read_bytes())
    return space


def summarise(space: Any, *, name: str, iterations: int, top: int = 30, max_stages: int = 20,
              deadline: float | None = None, marker: str = WINDOW_MARKER, logdir: str | None = None,
              host_tracer_level: int = 2) -> Profile:
    """The compact profile of the windows marked in ``space`` (an ``XSpace``, read by attribute access only).

    ``deadline`` is a ``time.monotonic()`` value past which reading stops with
    ProfileUnavailable: a profile too large to read in time gives no profile,
    never a hung test.
    """
    plane = next((p for p in space.planes if p.name == HOST_PLANE), None)
    if plane is None:
        raise ProfileUnavailable(f"the profile has no {HOST_PLANE} plane")
    names = {mid: meta.name for mid, meta in plane.event_metadata.items()}
    stat_names = {mid: meta.name for mid, meta in plane.stat_metadata.items()}
    traced_stat = next((mid for mid, n in stat_names.items() if n == "tf_function_call"), None)

    windows = _windows(plane, names, marker)
    if not windows:
        raise ProfileUnavailable(f"no {marker!r} window in the profile (was the step run under the profiler?)")
    starts = [w[0] for w in windows]
    k = len(windows)

    self_time: dict[str, list[float]] = defaultdict(lambda: [0.0] * k)
    families: dict[str, Counter[str]] = defaultdict(Counter)
    kinds: dict[str, tuple[str, str]] = {}
    stage_events: Counter[str] = Counter()
    stage_threads: dict[str, set[str]] = defaultdict(set)
    stage_parallel: set[str] = set()
    input_wait = [0.0] * k
    get_next_calls = 0
    seen = 0

    for line in plane.lines:
        tf_data = is_tf_data_thread(line.name)
        base_ps = line.timestamp_ns * 1000
        events = sorted(line.events, key=lambda e: (e.offset_ps, -e.duration_ps))
        # stack of [end_ps, group key or None]; children's time is taken off their parent's self time
        stack: list[list[Any]] = []
        selfs: list[float] = []
        groups_of: list[str | None] = []
        windows_of: list[int] = []
        fams: list[str | None] = []
        for event in events:
            seen += 1
            if deadline is not None and seen % _DEADLINE_EVERY == 0 and time.monotonic() > deadline:
                raise ProfileUnavailable(f"reading the profile took longer than allowed ({seen} events read); "
                                         "profile fewer iterations")
            start = base_ps + event.offset_ps
            end = start + event.duration_ps
            while stack and stack[-1][0] <= start:
                stack.pop()
            parent = stack[-1][1] if stack else -1
            index = len(selfs)
            if parent >= 0:
                selfs[parent] -= min(end, stack[-1][0]) - start
            inherited = groups_of[parent] if parent >= 0 else None
            event_name = names.get(event.metadata_id, "")
            group = _classify(event, event_name, tf_data, inherited, stat_names, traced_stat, kinds,
                              stage_threads, stage_parallel, line.name)
            op = parse_op(event_name)
            selfs.append(float(event.duration_ps))
            groups_of.append(group)
            fams.append(op_family(op[1]) if op is not None else None)
            window = bisect.bisect_right(starts, start) - 1
            in_window = window >= 0 and start < windows[window][1]
            windows_of.append(window if in_window else -1)
            if in_window and group is not None and group.startswith("stage:") and kinds[group][0] == "stage" \
                    and is_stage(event_name):
                stage_events[group] += 1
            if in_window and not tf_data and event_name in _GET_NEXT:
                input_wait[window] += event.duration_ps
                get_next_calls += 1
            stack.append([end, index])
        for index, group in enumerate(groups_of):
            window = windows_of[index]
            if group is None or window < 0:
                continue
            own = max(selfs[index], 0.0)
            self_time[group][window] += own
            family = fams[index]
            if family is not None:
                families[group][family] += own

    per_iteration = 1e-12 / iterations  # ps per window -> seconds per iteration
    built: list[Group] = []
    for key, values in self_time.items():
        kind, label = kinds[key]
        per_window = tuple(v * per_iteration for v in values)
        per_element = None
        parallel = None
        if kind == "stage":
            count = stage_events[key]
            per_element = sum(values) * 1e-12 / count if count else None
            parallel = key in stage_parallel or len(stage_threads[key]) > 1
        fams = tuple(f for f, _ in families[key].most_common(3))
        built.append(Group(key=key, kind=kind, label=label, families=fams, per_window=per_window,
                           per_element=per_element, parallel=parallel))
    built.sort(key=lambda g: -g.mean)
    stages = [g for g in built if g.kind == "stage"][:max_stages]
    rest = [g for g in built if g.kind != "stage"]
    kept = rest[:top]
    dropped = rest[top:] + [g for g in built if g.kind == "stage"][max_stages:]
    other = tuple(sum(g.per_window[w] for g in dropped) for w in range(k))
    kept_all = sorted(kept + stages, key=lambda g: -g.mean)
    smallest = min((g.mean for g in kept), default=0.0) if dropped else 0.0
    wall = tuple((end - start) * per_iteration for start, end in windows)
    return Profile(name=name, iterations=iterations, wall=wall, groups=tuple(kept_all), other=other,
                   smallest_kept=smallest, input_wait=tuple(v * per_iteration for v in input_wait),
                   elements=get_next_calls / (k * iterations), host_tracer_level=host_tracer_level, logdir=logdir)


def _windows(plane: Any, names: dict[int, str], marker: str) -> list[tuple[int, int]]:
    ids = {mid for mid, n in names.items() if n == marker}
    out = []
    for line in plane.lines:
        base = line.timestamp_ns * 1000
        out += [(base + e.offset_ps, base + e.offset_ps + e.duration_ps) for e in line.events if e.metadata_id in ids]
    return sorted(out)


def _classify(event: Any, event_name: str, tf_data: bool, inherited: str | None, stat_names: dict[int, str],
              traced_stat: int | None, kinds: dict[str, tuple[str, str]], stage_threads: dict[str, set[str]],
              stage_parallel: set[str], line_name: str) -> str | None:
    if is_stage(event_name):
        if not tf_data and is_async_stage(event_name):
            return _register(kinds, "wait:input", "input wait", "input wait (consumer)")
        key = "stage:" + stage_key(event_name)
        _register(kinds, key, "stage", stage_key(event_name))
        stage_threads[key].add(line_name)
        if is_parallel_stage(event_name):
            stage_parallel.add(key)
        return key
    if event_name in _GET_NEXT and not tf_data:
        return _register(kinds, "wait:input", "input wait", "input wait (consumer)")
    op = parse_op(event_name)
    if op is not None:
        node, op_type = op
        family = op_family(op_type)
        if tf_data:
            if inherited is not None and inherited.startswith("stage:"):
                return inherited
            key = "tfdata:" + family
            _register(kinds, key, "tf.data work", f"{family} in tf.data functions")
            return key
        scope = layer_scope(node)
        if scope:
            key = "layer:" + scope
            _register(kinds, key, "layer", scope.rsplit("/", 1)[-1])
        else:
            key = "op:" + family
            _register(kinds, key, "op", f"{family} outside layers")
        return key
    if traced_stat is not None and not tf_data and len(event.stats):
        for stat in event.stats:
            if stat.metadata_id == traced_stat:
                value = stat.str_value or stat_names.get(stat.ref_value, "")
                if value.startswith("traced"):
                    key = "retracing:" + event_name
                    return _register(kinds, key, "retracing", f"retracing of {event_name}")
    return inherited


def _register(kinds: dict[str, tuple[str, str]], key: str, kind: str, label: str) -> str:
    kinds.setdefault(key, (kind, label))
    return key

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

The caller marks each profiled window with a TraceMe event named ``marker``
(with a ``side`` stat when the windows of several sides alternate); an event
belongs to the window in which it starts. Reading is one Python pass over the
host events: each event name is classified once, events outside the windows
are skipped before anything else is done with them. The protobuf module is
imported lazily and probed at the places TensorFlow versions put it.

A GPU has a plane of its own (``/device:GPU:N``), one line per CUDA stream: what
its events are (the op that launched each, its group, its launch's start) is
``xspace_device``'s; its kernels are read into the host's windows here.
"""

from __future__ import annotations

import bisect
import importlib
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_tfperf.profiling.names import (
    is_async_stage, is_parallel_stage, is_stage, is_tf_data_thread, layer_scope, op_family, parse_op, stage_key,
)
from pytest_tfperf.profiling.profile_model import Group, Profile
from pytest_tfperf.profiling.xspace_device import (
    CUPTI_PLANE, DEVICE_PLANE_PREFIX, STREAM_LINE_PREFIX, device_group, innermost_op, launch_starts, union_length,
)
from pytest_tfperf.profiling.xspace_functions import FunctionLinks, stage_functions, work_label

WINDOW_MARKER = "tfperf_window"
HOST_PLANE = "/host:CPU"
# Where CUPTI's driver calls (the launches) are: merged into the host plane by TensorFlow's post-processing,
# or in a plane of their own before it.
_LAUNCH_PLANES = (HOST_PLANE, CUPTI_PLANE)
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
              host_tracer_level: int = 2, side: str | None = None, max_device: int = 20) -> Profile:
    """The compact profile of the windows marked in ``space`` (an ``XSpace``, read by attribute access only).

    ``side`` keeps only the windows whose marker names that side (``side=...``
    stat, see ``summarise_sides``); None keeps every window. ``max_device``
    device groups are kept (the rest summed), so that a GPU profile with
    the most of each (30 host, 20 stage, 20 device groups, 6 windows) stays
    under 20 KB stored. ``deadline`` is a
    ``time.monotonic()`` value past which reading stops with ProfileUnavailable:
    a profile too large to read in time gives no profile, never a hung test.
    """
    read = _read_plane(space, marker=marker, deadline=deadline)
    _read_devices(space, read, deadline=deadline)
    chosen = [w for w, s in enumerate(read.sides) if side is None or s == side]
    if not chosen:
        raise ProfileUnavailable(f"no {marker!r} window of side {side!r} in the profile")
    return _build(read, chosen, name=name, iterations=iterations, top=top, max_stages=max_stages, logdir=logdir,
                  host_tracer_level=host_tracer_level, max_device=max_device)


def summarise_sides(space: Any, *, iterations: Mapping[str, int], top: int = 30, max_stages: int = 20,
                    deadline: float | None = None, marker: str = WINDOW_MARKER, logdir: str | None = None,
                    host_tracer_level: int = 2, max_device: int = 20) -> dict[str, Profile]:
    """One compact profile per side of a profile whose windows alternate between sides, read in one pass.

    Each window's marker carries a ``side`` stat (``Trace(marker, side=...)``);
    ``iterations`` gives each side's iterations per window.
    """
    read = _read_plane(space, marker=marker, deadline=deadline)
    _read_devices(space, read, deadline=deadline)
    out = {}
    for side, n in iterations.items():
        chosen = [w for w, s in enumerate(read.sides) if s == side]
        if not chosen:
            raise ProfileUnavailable(f"no {marker!r} window of side {side!r} in the profile")
        out[side] = _build(read, chosen, name=side, iterations=n, top=top, max_stages=max_stages, logdir=logdir,
                           host_tracer_level=host_tracer_level, max_device=max_device)
    return out


def window_costs(space: Any, *, marker: str = WINDOW_MARKER,
                 deadline: float | None = None) -> dict[str | None, tuple[int, int, float]]:
    """Per side: (windows, host events that start in them, their wall time in seconds), read as ``summarise``
    reads (so that timing this call times the reading): what ``profiling.profile_budget`` sizes a pass from."""
    read = _read_plane(space, marker=marker, deadline=deadline)
    out: dict[str | None, tuple[int, int, float]] = {}
    for w, side in enumerate(read.sides):
        windows, events, seconds = out.get(side, (0, 0, 0.0))
        start, end = read.windows[w]
        out[side] = (windows + 1, events + read.events[w], seconds + (end - start) * 1e-12)
    return out


# What an event's name makes of it, once per event name (and thread kind), never per event:
_INHERIT = 0  # wrappers: the nearest grouped ancestor's group
_FIXED = 1  # a group of its own (a stage, the consumer's wait, an op with its layer or family)
_TFDATA_OP = 2  # an op on tf.data's threads: its stage when it runs under one, else tf.data work of its family
_MAYBE_TRACED = 3  # a wrapper that may be a tf.function call that traced (its stats say so)
_SYNC_STAGE = 4  # a stage on the consumer's thread: its stage, and the consumer's input wait as well


@dataclass
class _Read:
    """Per-window sums over the whole plane, before windows are chosen for a side."""

    windows: list[tuple[int, int]]
    sides: list[str | None]
    self_time: dict[str, list[float]]  # group -> ps per window
    families: dict[str, list[Counter[str]]]  # group -> per window: family -> ps
    kinds: dict[str, tuple[str, str]]
    stage_events: dict[str, list[int]]  # stage group -> events per window
    stage_threads: dict[str, list[set[str]]]  # stage group -> per window: threads it ran on
    stage_parallel: dict[str, list[bool]]  # stage group -> per window: ran as a parallel transformation
    input_wait: list[float]  # ps per window
    get_next: list[int]  # per window
    events: list[int]  # host events that start in each window (what the profile's size grows with)
    # group -> per window: the op events with self time counted in it (how long one traced op took, on average:
    # see ``Group.per_event``)
    op_events: dict[str, list[int]] = field(default_factory=dict)
    device_busy: list[float] | None = None  # ps per window the busiest GPU ran anything; None without GPU planes
    # tf.data work group -> per window: the ps of it each stage's function ran (stage key; see xspace_functions)
    work_stages: dict[str, list[Counter[str]]] = field(default_factory=dict)


def _read_plane(space: Any, *, marker: str, deadline: float | None) -> _Read:
    plane = next((p for p in space.planes if p.name == HOST_PLANE), None)
    if plane is None:
        raise ProfileUnavailable(f"the profile has no {HOST_PLANE} plane")
    names = {mid: meta.name for mid, meta in plane.event_metadata.items()}
    stat_names = {mid: meta.name for mid, meta in plane.stat_metadata.items()}
    traced_stat = next((mid for mid, n in stat_names.items() if n == "tf_function_call"), None)

    windows, sides = _windows(plane, names, stat_names, marker)
    if not windows:
        raise ProfileUnavailable(f"no {marker!r} window in the profile (was the step run under the profiler?)")
    k = len(windows)
    first_start, last_end = windows[0][0], max(end for _, end in windows)
    read = _Read(windows=windows, sides=sides, self_time=defaultdict(lambda: [0.0] * k),
                 families=defaultdict(lambda: [Counter() for _ in range(k)]), kinds={},
                 stage_events=defaultdict(lambda: [0] * k), stage_threads=defaultdict(lambda: [set() for _ in range(k)]),
                 stage_parallel=defaultdict(lambda: [False] * k), input_wait=[0.0] * k, get_next=[0] * k,
                 events=[0] * k, op_events=defaultdict(lambda: [0] * k))
    tables: dict[bool, dict[int, tuple[int, str | None, str | None, bool, bool, bool]]] = {False: {}, True: {}}
    seen = 0
    links = FunctionLinks(names, stat_names)
    for line in plane.lines:
        tf_data = is_tf_data_thread(line.name)
        table = tables[tf_data]
        base_ps = line.timestamp_ns * 1000
        # Only (start, -duration, name id, index) per event: no per-event object beyond this tuple. Events that
        # end before the first window or start after the last cannot hold a window's time: skipped here.
        lo, hi = first_start - base_ps, last_end - base_ps
        events = line.events
        raw = sorted((e.offset_ps, -e.duration_ps, e.metadata_id, i) for i, e in enumerate(events)
                     if e.offset_ps < hi and e.offset_ps + e.duration_ps > lo)
        seen += len(raw)
        if deadline is not None and time.monotonic() > deadline:
            raise ProfileUnavailable(f"reading the profile took longer than allowed ({seen} events read); "
                                     "profile fewer iterations")
        n = len(raw)
        selfs = [0.0] * n
        groups_of: list[str | None] = [None] * n
        fams: list[str | None] = [None] * n
        windows_of = [-1] * n
        sync = [False] * n
        if links.active:
            links.new_line(n)
        stack_end: list[int] = []
        stack_index: list[int] = []
        window = 0
        for index, (offset, neg_duration, mid, event_index) in enumerate(raw):
            if deadline is not None and index % _DEADLINE_EVERY == _DEADLINE_EVERY - 1 \
                    and time.monotonic() > deadline:
                raise ProfileUnavailable(f"reading the profile took longer than allowed ({seen} events read); "
                                         "profile fewer iterations")
            start = base_ps + offset
            end = start - neg_duration
            while stack_end and stack_end[-1] <= start:
                stack_end.pop()
                stack_index.pop()
            parent = stack_index[-1] if stack_index else -1
            if parent >= 0:
                selfs[parent] -= min(end, stack_end[-1]) - start
            selfs[index] = float(-neg_duration)
            entry = table.get(mid)
            if entry is None:
                entry = table[mid] = _entry(names.get(mid, ""), tf_data, read)
            how, key, family, counts_as_stage, get_next, parallel = entry
            if links.active and (counts_as_stage or mid in links.watched
                                 or (parent >= 0 and links.under[parent] is not None)):
                links.see(index, parent, raw[parent][2] if parent >= 0 else -1, mid, events[event_index],
                          key if counts_as_stage else None, stack_index)
            if how == _FIXED or how == _SYNC_STAGE:
                group = key
                if how == _SYNC_STAGE:
                    sync[index] = True
            elif how == _INHERIT:
                group = groups_of[parent] if parent >= 0 else None
                sync[index] = parent >= 0 and sync[parent]  # wrappers under a stage on the consumer's thread
            elif how == _TFDATA_OP:
                inherited = groups_of[parent] if parent >= 0 else None
                if inherited is not None and inherited.startswith("stage:"):
                    group = inherited
                else:
                    group = (links.group(index, family) if links.active and family is not None else None) or key
            else:
                group = _traced(events[event_index], names.get(mid, ""), traced_stat, stat_names, read.kinds)
                if group is None:
                    group = groups_of[parent] if parent >= 0 else None
                    sync[index] = parent >= 0 and sync[parent]
            groups_of[index] = group
            fams[index] = family
            while window < k - 1 and start >= windows[window + 1][0]:
                window += 1
            if windows[window][0] <= start < windows[window][1]:
                windows_of[index] = window
                read.events[window] += 1
                if counts_as_stage:
                    read.stage_events[key][window] += 1  # type: ignore[index]
                    read.stage_threads[key][window].add(line.name)  # type: ignore[index]
                    if parallel:
                        read.stage_parallel[key][window] = True  # type: ignore[index]
                if get_next:
                    read.input_wait[window] += -neg_duration
                    read.get_next[window] += 1
            stack_end.append(end)
            stack_index.append(index)
        self_time, families, op_events = read.self_time, read.families, read.op_events
        for index in range(n):
            window = windows_of[index]
            group = groups_of[index]
            if group is None or window < 0:
                continue
            own = selfs[index]
            if own <= 0.0:
                continue
            self_time[group][window] += own
            if sync[index]:
                self_time["wait:input"][window] += own
            family = fams[index]
            if family is not None:
                families[group][window][family] += own
                op_events[group][window] += 1
    if links.active:
        links.resolve(read.self_time, read.op_events, read.families, read.work_stages, k,
                      lambda family: _register(read.kinds, "tfdata:" + family, "tf.data work",
                                               f"{family} in tf.data functions"))
    return read


def _read_devices(space: Any, read: _Read, *, deadline: float | None) -> None:
    """Kernel time per window of each device group, and each window's busy time, from the GPU planes (if any)."""
    planes = [p for p in space.planes if p.name.startswith(DEVICE_PLANE_PREFIX)]
    if not planes:
        return
    k = len(read.windows)
    starts = [start for start, _ in read.windows]
    launches = launch_starts(space, _LAUNCH_PLANES)
    busy = [0.0] * k
    seen = 0
    for plane in planes:
        names = {mid: meta.name for mid, meta in plane.event_metadata.items()}
        stat_names = {mid: meta.name for mid, meta in plane.stat_metadata.items()}
        stat_ids = {n: mid for mid, n in stat_names.items()}
        tf_op_stat = stat_ids.get("tf_op")
        annotation_stat = stat_ids.get("kernel_annotation")  # older collectors: the annotation stack itself
        correlation_stat = stat_ids.get("correlation_id")
        groups: dict[tuple[str, str], tuple[str, str | None]] = {}  # (op name, event name) -> group, family
        spans: list[list[tuple[int, int]]] = [[] for _ in range(k)]
        for line in plane.lines:
            if not line.name.startswith(STREAM_LINE_PREFIX):
                continue  # derived lines (TensorFlow Ops, XLA Ops, Steps...) repeat the streams' time
            base_ps = line.timestamp_ns * 1000
            for event in line.events:
                seen += 1
                if deadline is not None and seen % _DEADLINE_EVERY == 0 and time.monotonic() > deadline:
                    raise ProfileUnavailable(f"reading the profile took longer than allowed ({seen} device events "
                                             "read); profile fewer iterations")
                duration = event.duration_ps
                if duration <= 0:
                    continue
                start = base_ps + event.offset_ps
                op_name = ""
                correlation = None
                for stat in event.stats:
                    sid = stat.metadata_id
                    if sid == tf_op_stat:
                        op_name = stat.str_value or stat_names.get(stat.ref_value, "")
                    elif sid == annotation_stat and not op_name:
                        op_name = innermost_op(stat.str_value or stat_names.get(stat.ref_value, ""))
                    elif sid == correlation_stat:
                        correlation = stat.uint64_value or stat.int64_value
                at = launches.get(correlation, start) if correlation is not None else start
                window = bisect.bisect_right(starts, at) - 1
                if window < 0 or at >= read.windows[window][1]:
                    continue
                event_name = names.get(event.metadata_id, "")
                entry = groups.get((op_name, event_name))
                if entry is None:
                    key, family, kind, label = device_group(op_name, event_name)
                    entry = groups[(op_name, event_name)] = _register(read.kinds, key, kind, label), family
                key, family = entry
                read.self_time[key][window] += duration
                if family is not None:
                    read.families[key][window][family] += duration
                spans[window].append((start, start + duration))
        for w in range(k):
            busy[w] = max(busy[w], float(union_length(spans[w])))
    read.device_busy = busy


def _entry(event_name: str, tf_data: bool, read: _Read) -> tuple[int, str | None, str | None, bool, bool, bool]:
    """(how the event is grouped, its group, its op family, whether it counts as a stage's element, whether it
    is the consumer's get-next, whether it is a parallel transformation)."""
    kinds = read.kinds
    if is_stage(event_name):
        if not tf_data and is_async_stage(event_name):
            return _FIXED, _register(kinds, "wait:input", "input wait", "input wait (consumer)"), None, False, False, False
        key = "stage:" + stage_key(event_name)
        _register(kinds, key, "stage", stage_key(event_name))
        if not tf_data:
            # A stage run on the consumer's own thread (no prefetch between them): the consumer computes its
            # input itself, on the step's path. It counts as the consumer's input wait too (see _read_plane).
            _register(kinds, "wait:input", "input wait", "input wait (consumer)")
            return _SYNC_STAGE, key, None, True, False, is_parallel_stage(event_name)
        return _FIXED, key, None, True, False, is_parallel_stage(event_name)
    if event_name in _GET_NEXT and not tf_data:
        return _FIXED, _register(kinds, "wait:input", "input wait", "input wait (consumer)"), None, False, True, False
    op = parse_op(event_name)
    if op is not None:
        node, op_type = op
        family = op_family(op_type)
        if tf_data:
            key = "tfdata:" + family
            _register(kinds, key, "tf.data work", f"{family} in tf.data functions")
            return _TFDATA_OP, key, family, False, False, False
        scope = layer_scope(node)
        if scope:
            key = "layer:" + scope
            _register(kinds, key, "layer", scope.rsplit("/", 1)[-1])
        else:
            key = "op:" + family
            _register(kinds, key, "op", f"{family} outside layers")
        return _FIXED, key, family, False, False, False
    if not tf_data:
        return _MAYBE_TRACED, None, None, False, False, False
    return _INHERIT, None, None, False, False, False


def _traced(event: Any, event_name: str, traced_stat: int | None, stat_names: dict[int, str],
            kinds: dict[str, tuple[str, str]]) -> str | None:
    """``retracing:<function>`` for a tf.function call whose ``tf_function_call`` stat says it traced."""
    if traced_stat is None or not len(event.stats):
        return None
    for stat in event.stats:
        if stat.metadata_id == traced_stat:
            value = stat.str_value or stat_names.get(stat.ref_value, "")
            if value.startswith("traced"):
                return _register(kinds, "retracing:" + event_name, "retracing", f"retracing of {event_name}")
    return None


def _build(read: _Read, chosen: list[int], *, name: str, iterations: int, top: int, max_stages: int,
           logdir: str | None, host_tracer_level: int, max_device: int = 20) -> Profile:
    """The profile of the ``chosen`` windows; a group with no time in them is absent, as in a pass of its own."""
    per_iteration = 1e-12 / iterations  # ps per window -> seconds per iteration
    k = len(chosen)
    built: list[Group] = []
    functions = stage_functions(read.work_stages, chosen)
    for key, values in read.self_time.items():
        mine = [values[w] for w in chosen]
        if not any(mine):
            continue
        kind, label = read.kinds[key]
        if key in read.work_stages:
            by_stage: Counter[str] = Counter()
            for w in chosen:
                by_stage.update(read.work_stages[key][w])
            label = work_label(label, key[len("tfdata:"):], by_stage, sum(mine))
        per_window = tuple(v * per_iteration for v in mine)
        per_element = None
        parallel = None
        if kind == "stage":
            count = sum(read.stage_events[key][w] for w in chosen)
            per_element = sum(mine) * 1e-12 / count if count else None
            threads = set().union(*(read.stage_threads[key][w] for w in chosen))
            parallel = any(read.stage_parallel[key][w] for w in chosen) or len(threads) > 1
        fam: Counter[str] = Counter()
        for w in chosen:
            fam.update(read.families[key][w])
        fams = tuple(f for f, _ in fam.most_common(3))
        # the group's time (its ops with what ran inside them) over its op events: one op's time, on average
        ops = sum(read.op_events[key][w] for w in chosen) if key in read.op_events else 0
        op_time = sum(mine)
        built.append(Group(key=key, kind=kind, label=label, families=fams, per_window=per_window,
                           per_element=per_element, parallel=parallel,
                           per_event=op_time * 1e-12 / ops if ops else None,
                           events=ops / (iterations * k) if ops else None,
                           # a stage whose function ran no traced op: () where functions were linked at all
                           functions=functions.get(key, () if read.work_stages else None) if kind == "stage"
                           else None))
    built.sort(key=lambda g: -g.mean)
    stages = [g for g in built if g.kind == "stage"][:max_stages]
    rest = [g for g in built if g.kind != "stage" and not g.on_device]
    kept = rest[:top]
    dropped = rest[top:] + [g for g in built if g.kind == "stage"][max_stages:]
    other = tuple(sum(g.per_window[w] for g in dropped) for w in range(k))
    # Device groups are kept apart, ``max_device`` of them, with their own "other": another path's time.
    device = [g for g in built if g.on_device]
    device_other: tuple[float, ...] = ()
    device_busy: tuple[float, ...] = ()
    if read.device_busy is not None:
        device_other = tuple(sum(g.per_window[w] for g in device[max_device:]) for w in range(k))
        device_busy = tuple(read.device_busy[w] * per_iteration for w in chosen)
    kept_all = sorted(kept + stages + device[:max_device], key=lambda g: -g.mean)
    smallest = min((g.mean for g in kept), default=0.0) if dropped else 0.0
    wall = tuple((read.windows[w][1] - read.windows[w][0]) * per_iteration for w in chosen)
    calls = sum(read.get_next[w] for w in chosen)
    return Profile(name=name, iterations=iterations, wall=wall, groups=tuple(kept_all), other=other,
                   smallest_kept=smallest, input_wait=tuple(read.input_wait[w] * per_iteration for w in chosen),
                   elements=calls / (k * iterations), host_tracer_level=host_tracer_level, logdir=logdir,
                   device_busy=device_busy, device_other=device_other)


def _windows(plane: Any, names: dict[int, str], stat_names: dict[int, str],
             marker: str) -> tuple[list[tuple[int, int]], list[str | None]]:
    """The marked windows in time order, and each one's side (its ``side`` stat; None without one)."""
    ids = {mid for mid, n in names.items() if n == marker}
    side_stat = next((mid for mid, n in stat_names.items() if n == "side"), None)
    found = []
    for line in plane.lines:
        base = line.timestamp_ns * 1000
        for e in line.events:
            if e.metadata_id not in ids:
                continue
            side = None
            for stat in e.stats:
                if stat.metadata_id == side_stat:
                    side = stat.str_value or stat_names.get(stat.ref_value) or None
            found.append((base + e.offset_ps, base + e.offset_ps + e.duration_ps, side))
    found.sort(key=lambda w: (w[0], w[1]))
    return [(s, e) for s, e, _ in found], [side for _, _, side in found]


def _register(kinds: dict[str, tuple[str, str]], key: str, kind: str, label: str) -> str:
    kinds.setdefault(key, (kind, label))
    return key

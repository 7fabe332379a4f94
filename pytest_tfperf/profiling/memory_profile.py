"""Where the memory went: TensorFlow's allocator events in a profile, replayed into the peak's bytes by op.

TensorFlow 2.21's profiler records, on the host plane, a ``MemoryAllocation``
and a ``MemoryDeallocation`` event for each allocation of a tracked allocator
(stats ``allocator_name``, ``allocation_bytes``, ``addr``, ``bytes_allocated``,
``peak_bytes_in_use``; allocations also ``tf_op``, ``region_type``, ``shape``).
On the CPU: every allocation under ``TF_CPU_ALLOCATOR_USE_BFC=true`` (allocator
``bfc_cpu_allocator_for_gpu``); with oneDNN's default allocator (``mklcpu``) only
those of 256 KiB and more, as for the TF-allocator probe
(``docs/explanation/measuring.md``). A deallocation names no op: it is matched to its
allocation by address.

Each profiled window is replayed in time order (all threads merged). Within a
window, what is in use above the window's start is the bytes allocated in it and
still live, minus the bytes it freed that were allocated before it. At the
moment that sum peaks (the window's *added peak*, the figure the TF-allocator
probe takes per round), the live bytes are summed per group of the op that
allocated them (its layer scope, else its name without counters, as the time
profile groups ops: ``names``), and what was freed from before is a part of its
own. So a window's parts add up to its added peak exactly.

``attribute_memory`` splits a measured change of the added peak over the groups
whose bytes at the peak moved beyond their window-to-window spread, the
remainder stated. Pure reading: TensorFlow is not imported here.

On a GPU, the GPU's allocator (TensorFlow's BFC allocator of GPU N is named
``GPU_N_bfc``) records its ``MemoryAllocation`` events on the host plane too,
on the thread that allocated, with the same stats: ``device="GPU:0"`` reads
that allocator's events (and ``"CPU:0"`` the most active allocator that is not
a GPU's nor the GPU's pinned host memory, ``gpu_host_bfc``), so each device's
peak is explained from its own allocator. The device planes hold no allocator
events (CUPTI's memory records are driver allocations, not TensorFlow's, and
are not read). Not run on a real GPU here.
"""

from __future__ import annotations

import bisect
import glob
import math
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_tfperf import stats
from pytest_tfperf.profiling import bounded
from pytest_tfperf.profiling.names import layer_scope, op_family, parse_op, strip_counter
from pytest_tfperf.profiling.xspace import HOST_PLANE, WINDOW_MARKER, ProfileUnavailable, load_xspace

ALLOC, FREE = "MemoryAllocation", "MemoryDeallocation"
FREED_FROM_BEFORE = "freed:before"  # bytes allocated before a window and freed in it (a negative part)
NOISE_SE = 4.0  # a group moved when its change exceeds this many standard errors of the difference ...
NOISE_FLOOR_BYTES = 256 * 1024  # ... and this floor: BFC reuses buffers, so one small tensor (128 KiB here) moves between runs
MAX_CAUSES = 5
_DEADLINE_EVERY = 4096


@dataclass(frozen=True, slots=True)
class MemoryGroup:
    """Bytes live at each window's added peak that this group's ops allocated in that window."""

    key: str  # "layer:functional/planted_dense", "op:pow", "freed:before"
    label: str  # "planted_dense (MatMul family)"
    per_window: tuple[float, ...]

    @property
    def mean(self) -> float:
        return sum(self.per_window) / len(self.per_window) if self.per_window else 0.0


@dataclass(frozen=True, slots=True)
class MemoryProfile:
    """One side's allocations by op: each window's added peak and its split over groups (which add up to it)."""

    allocator: str
    peaks: tuple[float, ...]  # bytes above the window's start at its peak, per window
    groups: tuple[MemoryGroup, ...]  # largest first
    allocations: int  # allocation events read in the windows
    logdir: str | None = None

    @property
    def peak(self) -> float:
        return sum(self.peaks) / len(self.peaks) if self.peaks else 0.0


MEMORY_FORMAT = 1
STORED_GROUPS = 20  # groups a stored memory profile keeps; the rest are summed into one, so parts still add up


class MemoryFormatError(ValueError):
    """A stored memory profile this version cannot read, in one line."""


def memory_to_dict(profile: MemoryProfile, *, top: int = STORED_GROUPS) -> dict[str, Any]:
    """The compact JSON form a baseline stores (whole bytes; the ``top`` largest groups, the rest as one)."""
    kept = list(profile.groups[:top])
    rest = profile.groups[top:]
    if rest:
        k = len(profile.peaks)
        kept.append(MemoryGroup("other", "other ops", tuple(sum(g.per_window[w] for g in rest) for w in range(k))))
    return {"version": MEMORY_FORMAT, "allocator": profile.allocator, "peaks": [round(v) for v in profile.peaks],
            "groups": [{"key": g.key, "label": g.label, "per_window": [round(v) for v in g.per_window]}
                       for g in kept], "allocations": profile.allocations}


def memory_from_dict(data: Any, logdir: str | None = None) -> MemoryProfile:
    """A stored memory profile read back; MemoryFormatError naming what is wrong, never a guess."""
    version = data.get("version") if isinstance(data, Mapping) else None
    if version != MEMORY_FORMAT:
        raise MemoryFormatError(f"memory profile format version {version!r} is not {MEMORY_FORMAT}")
    try:
        peaks = tuple(float(v) for v in data["peaks"])
        groups = tuple(MemoryGroup(str(g["key"]), str(g["label"]), tuple(float(v) for v in g["per_window"]))
                       for g in data["groups"])
        if not peaks or any(len(g.per_window) != len(peaks) for g in groups):
            raise ValueError("window counts differ")
        return MemoryProfile(allocator=str(data["allocator"]), peaks=peaks, groups=groups,
                             allocations=int(data["allocations"]), logdir=logdir)
    except (KeyError, TypeError, ValueError) as exc:
        raise MemoryFormatError(f"stored memory profile is malformed: {type(exc).__name__}: {exc}") from None


@dataclass(frozen=True, slots=True)
class MemoryChange:
    key: str
    label: str
    how: str  # appeared, vanished, grew, shrank
    delta: float  # bytes at the peak, current - base
    noise: float


@dataclass(frozen=True, slots=True)
class MemoryAttribution:
    measured: float  # the verdict's change of the added peak, bytes
    profiled: float  # the profiled windows' change of it
    causes: tuple[MemoryChange, ...]
    remainder: float  # measured - sum(causes)
    within_noise: int
    allocator: str
    base_logdir: str | None
    current_logdir: str | None


def read_memory(space: Any, *, marker: str = WINDOW_MARKER, deadline: float | None = None,
                logdir: str | None = None, side: str | None = None, device: str | None = None) -> MemoryProfile:
    """The allocations by op of the windows marked in ``space`` (an ``XSpace``); ProfileUnavailable naming what
    was seen when it holds no allocation events to read. ``side`` keeps the windows whose marker names that side
    (a pair profiled in one session, its sides' windows alternating); None keeps every window. ``device``
    (``"GPU:0"``, ``"CPU:0"``) reads that device's allocator (``device_allocator``); None the most active one."""
    plane = next((p for p in space.planes if p.name == HOST_PLANE), None)
    if plane is None:
        raise ProfileUnavailable(f"the profile has no {HOST_PLANE} plane")
    names = {mid: meta.name for mid, meta in plane.event_metadata.items()}
    stat_names = {mid: meta.name for mid, meta in plane.stat_metadata.items()}
    windows = sorted(_window_spans(plane, names, stat_names, marker, side))
    if not windows:
        of_side = "" if side is None else f" of side {side!r}"
        raise ProfileUnavailable(f"no {marker!r} window{of_side} in the profile")
    events: list[tuple[int, int, str, int, float, str]] = []  # (time, order, kind, addr, bytes, op label key)
    seen = 0
    order = 0
    for line in plane.lines:
        base_ps = line.timestamp_ns * 1000
        ops = sorted((base_ps + e.offset_ps, base_ps + e.offset_ps + e.duration_ps, names.get(e.metadata_id, ""))
                     for e in line.events if parse_op(names.get(e.metadata_id, "")) is not None)
        op_starts = [o[0] for o in ops]
        for event in line.events:
            seen += 1
            if deadline is not None and seen % _DEADLINE_EVERY == 0 and time.monotonic() > deadline:
                raise ProfileUnavailable(f"reading the allocations took longer than allowed ({seen} events)")
            kind = names.get(event.metadata_id, "")
            if kind not in (ALLOC, FREE):
                continue
            stats = _stats(event, stat_names)
            at = base_ps + event.offset_ps
            size = float(stats.get("allocation_bytes") or stats.get("requested_bytes") or 0)
            op = ""
            if kind == ALLOC:
                # The op event around it names the type too (a family for the label); tf_op only the node.
                op = _enclosing_op(ops, op_starts, at) or str(stats.get("tf_op") or "")
            events.append((at, order, kind + "|" + str(stats.get("allocator_name", "")), int(stats.get("addr", 0)),
                           size, op))
            order += 1
    if not events:
        raise ProfileUnavailable("the profile holds no MemoryAllocation events (the profiler records them on the "
                                 "host plane for a tracked allocator: set TF_CPU_ALLOCATOR_USE_BFC=true before "
                                 "TensorFlow is imported)")
    events.sort()
    by_allocator = Counter(e[2].split("|", 1)[1] for e in events if e[2].startswith(ALLOC))
    allocator = device_allocator(by_allocator, device)
    return _replay(events, windows, allocator, logdir)


def device_allocator(by_allocator: Counter[str], device: str | None) -> str:
    """Which allocator's events are ``device``'s: ``GPU_N_bfc`` for ``GPU:N`` (TensorFlow's name for a GPU's BFC
    allocator), for another device the most active allocator that is no GPU's; None: the most active of all.
    ProfileUnavailable naming the allocators seen when the device's is not among them."""
    if device is None or not by_allocator:
        return by_allocator.most_common(1)[0][0] if by_allocator else ""
    kind, _, index = device.upper().partition(":")
    if kind == "GPU":
        wanted = f"GPU_{index or 0}_bfc"
        if by_allocator.get(wanted):
            return wanted
        raise ProfileUnavailable(f"the profile holds no allocation events of {device}'s allocator {wanted} "
                                 f"(allocators seen: {', '.join(sorted(by_allocator))})")
    host = Counter({name: n for name, n in by_allocator.items() if not name.startswith(("GPU_", "gpu_host"))})
    if not host:
        raise ProfileUnavailable(f"the profile holds no allocation events of a {device} allocator "
                                 f"(allocators seen: {', '.join(sorted(by_allocator))})")
    return host.most_common(1)[0][0]


def memory_from_logdir(logdir: str | Path, *, max_bytes: int = 256 * 2**20, timeout_s: float = 60.0,
                       side: str | None = None, device: str | None = None) -> tuple[MemoryProfile | None, str | None]:
    """The newest profile under ``logdir`` (as ``capture`` leaves it), read for allocations: (profile, None) or
    (None, why not in one line)."""
    found = sorted(glob.glob(str(Path(logdir) / "plugins" / "profile" / "*" / "*.xplane.pb")))
    if not found:
        return None, f"no .xplane.pb under {logdir}"
    path = Path(max(found, key=lambda p: Path(p).stat().st_mtime))

    def read() -> MemoryProfile:
        space = load_xspace(path, max_bytes=max_bytes)
        return read_memory(space, deadline=time.monotonic() + timeout_s, logdir=str(logdir), side=side,
                           device=device)

    try:  # the parse holds the GIL: only a child process it runs in can be stopped at the deadline
        return bounded.in_child(read, timeout_s, f"reading {path.name}"), None
    except bounded.DeadlineExceeded as exc:
        return None, str(exc)
    except ProfileUnavailable as exc:
        return None, str(exc)
    except Exception as exc:  # noqa: BLE001 - a malformed profile is profiler trouble, never the test's
        return None, f"the profile could not be read: {type(exc).__name__}: {exc}"


def attribute_memory(base: MemoryProfile, current: MemoryProfile, measured: float) -> MemoryAttribution:
    """Split ``measured`` (bytes, the added peak's change, current - base) over the groups that moved."""
    if not math.isfinite(measured):
        raise ValueError(f"measured change must be finite, got {measured!r}")
    b = {g.key: g for g in base.groups}
    c = {g.key: g for g in current.groups}
    moved, quiet = [], 0
    for key in list(c) + [k for k in b if k not in c]:
        gb, gc = b.get(key), c.get(key)
        before = gb.per_window if gb else (0.0,) * max(1, len(base.peaks))
        after = gc.per_window if gc else (0.0,) * max(1, len(current.peaks))
        delta = stats.mean(after) - stats.mean(before)
        noise = max(NOISE_SE * math.sqrt(_se2(before) + _se2(after)), NOISE_FLOOR_BYTES)
        if abs(delta) <= noise:
            quiet += 1
            continue
        how = ("appeared" if not any(before) else "vanished" if not any(after)
               else "grew" if delta > 0 else "shrank")
        moved.append(MemoryChange(key, (gc or gb).label, how, delta, noise))  # type: ignore[union-attr]
    moved.sort(key=lambda m: -abs(m.delta))
    causes = tuple(moved[:MAX_CAUSES])
    quiet += len(moved) - len(causes)
    return MemoryAttribution(measured=measured, profiled=current.peak - base.peak, causes=causes,
                             remainder=measured - sum(m.delta for m in causes), within_noise=quiet,
                             allocator=current.allocator, base_logdir=base.logdir, current_logdir=current.logdir)


def memory_dict(att: MemoryAttribution) -> dict[str, object]:
    """The JSON form (bytes), as the reports read it: causes, remainder, the lines as printed."""
    return {
        "measured_bytes": round(att.measured), "profiled_bytes": round(att.profiled),
        "causes": [{"key": m.key, "label": m.label, "how": m.how, "delta_bytes": round(m.delta),
                    "noise_bytes": round(m.noise)} for m in att.causes],
        "remainder_bytes": round(att.remainder), "within_noise": att.within_noise, "allocator": att.allocator,
        "base_logdir": att.base_logdir, "current_logdir": att.current_logdir, "lines": memory_lines(att),
    }


def memory_lines(att: MemoryAttribution) -> list[str]:
    """``where the memory went: ...``, one line per group that moved, the remainder."""
    lines = [f"where the memory went: {_mib(att.measured)} added peak measured (profiled windows "
             f"{_mib(att.profiled)}, allocator {att.allocator})"]
    if not att.causes:
        lines.append(f"  no op's bytes at the peak moved beyond their noise ({att.within_noise} groups compared)")
    for m in att.causes:
        lines.append(f"  {m.label} {m.how} {_mib(m.delta)} at the peak ±{_mib(m.noise, sign=False)}")
    lines.append(f"  remainder {_mib(att.remainder)} (groups within their noise, allocations the profiled pass "
                 "did not repeat, the difference between profiled windows and timed rounds)")
    return lines


# -- replay -----------------------------------------------------------------------------------------


def _replay(events: Sequence[tuple[int, int, str, int, float, str]], windows: Sequence[tuple[int, int]],
            allocator: str, logdir: str | None) -> MemoryProfile:
    k = len(windows)
    starts = [w[0] for w in windows]
    per_group: dict[str, list[float]] = defaultdict(lambda: [0.0] * k)
    labels: dict[str, str] = {}
    families: dict[str, Counter[str]] = defaultdict(Counter)
    peaks = [0.0] * k
    allocations = 0
    live: dict[int, tuple[float, str]] = {}  # addr -> (bytes, group) of allocations made in the current window
    totals: dict[str, float] = defaultdict(float)  # group -> live bytes now (freed from before: negative)
    running = 0.0
    current = -1
    for at, _, kind_allocator, addr, size, op in events:
        kind, _, name = kind_allocator.partition("|")
        if name != allocator:
            continue
        window = bisect.bisect_right(starts, at) - 1
        if window < 0 or at >= windows[window][1]:
            continue
        if window != current:  # a new window starts from what is in use at its start
            current, running = window, 0.0
            live.clear()
            totals.clear()
        if kind == ALLOC:
            allocations += 1
            key, label, family = _group(op)
            labels.setdefault(key, label)
            if family:
                families[key][family] += 1
            live[addr] = (size, key)
            totals[key] += size
            running += size
        else:
            held = live.pop(addr, None)
            if held is not None:
                totals[held[1]] -= held[0]
                running -= held[0]
            else:
                totals[FREED_FROM_BEFORE] -= size
                running -= size
        if running > peaks[window]:
            peaks[window] = running
            for key in per_group:
                per_group[key][window] = 0.0
            for key, value in totals.items():
                if value:
                    per_group[key][window] = value
    labels[FREED_FROM_BEFORE] = "freed from before the window"
    groups = []
    for key, values in per_group.items():
        if not any(values):
            continue
        label = labels.get(key, key)
        fams = families.get(key)
        if key.startswith("layer:") and fams:
            label = f"{label} ({fams.most_common(1)[0][0]} family)"
        groups.append(MemoryGroup(key, label, tuple(values)))
    groups.sort(key=lambda g: -abs(g.mean))
    return MemoryProfile(allocator=allocator, peaks=tuple(peaks), groups=tuple(groups), allocations=allocations,
                         logdir=logdir)


def _group(op: str) -> tuple[str, str, str]:
    """(key, label, family) of the op that allocated: ``node name`` or ``node name:Type``."""
    parsed = parse_op(op)
    node, family = (parsed[0], op_family(parsed[1])) if parsed is not None else (op, "")
    if not node:
        return "op:unknown", "allocations outside any op", ""
    scope = layer_scope(node)
    if scope:
        return "layer:" + scope, scope.rsplit("/", 1)[-1], family
    leaf = strip_counter(node.rsplit("/", 1)[-1])
    return "op:" + leaf, f"{leaf} outside layers", family


def _enclosing_op(ops: Sequence[tuple[int, int, str]], starts: Sequence[int], at: int) -> str:
    i = bisect.bisect_right(starts, at) - 1
    for j in range(i, max(-1, i - 8), -1):  # the innermost op around ``at`` starts shortly before it
        if ops[j][1] >= at:
            return ops[j][2]
    return ""


def _window_spans(plane: Any, names: Mapping[int, str], stat_names: Mapping[int, str], marker: str,
                  side: str | None = None) -> list[tuple[int, int]]:
    ids = {mid for mid, n in names.items() if n == marker}
    out = []
    for line in plane.lines:
        base = line.timestamp_ns * 1000
        out += [(base + e.offset_ps, base + e.offset_ps + e.duration_ps) for e in line.events
                if e.metadata_id in ids and (side is None or _stats(e, stat_names).get("side") == side)]
    return out


def _stats(event: Any, stat_names: Mapping[int, str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for stat in event.stats:
        name = stat_names.get(stat.metadata_id, "")
        which = stat.WhichOneof("value") if hasattr(stat, "WhichOneof") else None
        if which == "ref_value":
            out[name] = stat_names.get(stat.ref_value, "")
        elif which is not None:
            out[name] = getattr(stat, which)
        else:  # a fake without oneof: the first value set
            out[name] = stat.str_value or stat.int64_value or stat.uint64_value or stat.double_value or \
                stat_names.get(getattr(stat, "ref_value", 0), "")
    return out


def _se2(values: Sequence[float]) -> float:
    """The squared standard error of the values' mean; 0 for fewer than two."""
    return stats.variance(values) / len(values) if len(values) >= 2 else 0.0


def _mib(value: float, *, sign: bool = True) -> str:
    scaled, unit = (value / 2**20, "MiB") if abs(value) >= 2**20 else (value / 2**10, "KiB")
    return f"{scaled:+.2f} {unit}" if sign else f"{scaled:.2f} {unit}"

"""A compact profile of one step or pipeline: per-window time per iteration for each group of ops or tf.data stage.

What TensorFlow's profiler records (hundreds of thousands of events) is
reduced to what a comparison needs, a few KB, so that a baseline can store it
and review it in git:

- ``wall``: each profiled window's wall time per iteration;
- ``groups``: self time per iteration of each group (a layer's ops, an op
  family outside layers, a tf.data stage, the consumer's wait for input, the
  retracing of a ``tf.function``), one value per window, so that the
  window-to-window spread says how much a group moves by itself;
- ``other``: the groups beyond the ``top`` kept, summed;
- ``input_wait``: the consumer's ``IteratorGetNext`` time per iteration;
- on a GPU, ``device`` groups (key ``device:...``, kinds ``device layer`` and
  ``device op``): kernel time per iteration of the ops that launched them,
  ``device_other`` (device groups beyond the top kept, summed) and
  ``device_busy`` (the time per iteration the busiest GPU ran anything).
  A profile without device planes has none of them (empty tuples).

Times are seconds. ``to_dict``/``from_dict`` give the stored, versioned form
(microseconds, rounded); a form of another version is refused, not guessed at.
A profile without device groups is stored as version 1, as before they existed
(so a host-only baseline reads the same to an older pytest-tfperf); one with
them as version 2. Both are read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_tfperf import stats

FORMAT_VERSION = 2
HOST_ONLY_VERSION = 1  # the form without device fields, still written for host-only profiles and read
READ_VERSIONS = (HOST_ONLY_VERSION, FORMAT_VERSION)
DEVICE_KINDS = ("device layer", "device op")
GROUP_KINDS = ("layer", "op", "stage", "tf.data work", "input wait", "retracing") + DEVICE_KINDS


class ProfileFormatError(ValueError):
    """A stored profile that cannot be read: another version, or a field missing or malformed."""


@dataclass(frozen=True, slots=True)
class Group:
    """Self time per iteration of one group, per profiled window."""

    key: str  # what is compared between profiles: "layer:sequential/planted_conv", "stage:Prefetch/Map"
    kind: str  # one of GROUP_KINDS
    label: str  # how a person reads it: "planted_conv", "Prefetch/Map (tf.data stage)"
    families: tuple[str, ...]  # the op families in it, largest first ("Conv2D", "BiasAdd")
    per_window: tuple[float, ...]  # seconds of self time per iteration, one per window
    per_element: float | None = None  # stages: seconds per element they produced
    parallel: bool | None = None  # stages: whether it ran on more than one thread
    # Op groups: seconds one traced op event took, on average. At host tracer level 2 TensorFlow traces an op only
    # while its executor's cost model deems it expensive, so ops of a few microseconds are traced in some windows
    # and processes and not in others (noise.SHORT_EVENT_S). Optional in the stored form: older profiles lack it.
    per_event: float | None = None
    # Op groups: traced op events an iteration (their count over the iterations profiled). A whole number when every
    # op of the group was traced on every iteration; a fraction when TensorFlow traced some and not others.
    events: float | None = None
    # Stages: the op families their function ran (on tf.data's threads, linked to the stage by the call's id),
    # largest first; () where its function ran no traced op, None where no function was linked to any stage. What
    # tells two maps apart when the pipeline changed shape (``stage_alignment``). Optional in the stored form: older
    # profiles lack it.
    functions: tuple[str, ...] | None = None

    @property
    def mean(self) -> float:
        return stats.mean(self.per_window)

    def describe(self) -> str:
        if self.kind == "stage":
            mode = "parallel" if self.parallel else "sequential"
            return f"{self.label} (tf.data stage, {mode})"
        if self.kind in ("layer", "device layer") and self.families:  # an op group's label is its family already
            return f"{self.label} ({self.families[0]} family)"
        return self.label

    @property
    def on_device(self) -> bool:
        return self.kind in DEVICE_KINDS


@dataclass(frozen=True, slots=True)
class Profile:
    """One profiled pass: ``windows`` windows of ``iterations`` iterations each."""

    name: str
    iterations: int  # per window
    wall: tuple[float, ...]  # seconds per iteration, one per window
    groups: tuple[Group, ...]  # largest first
    other: tuple[float, ...]  # seconds per iteration of the groups not kept, per window
    smallest_kept: float  # seconds per iteration of the smallest group kept: a group absent was below it
    input_wait: tuple[float, ...]  # seconds per iteration the consumer spent in IteratorGetNext, per window
    elements: float  # tf.data elements the consumer took per iteration (0 for a step without input)
    host_tracer_level: int = 2
    logdir: str | None = None  # where ``tensorboard --logdir`` opens the raw profile
    # On a GPU (empty without device planes): seconds per iteration, per window, that the busiest GPU ran
    # kernels or copies (the union over its streams), and the device groups beyond the top kept, summed.
    device_busy: tuple[float, ...] = ()
    device_other: tuple[float, ...] = ()
    # Seconds per iteration, per window, of the process's own CPU clock (``time.process_time``: every thread) read
    # around each window, apart from the profile: what the groups' self times (which add up across threads) are
    # checked against (``profiling.attribution``'s CPU frame). Empty in profiles taken before it was measured.
    cpu: tuple[float, ...] = ()

    @property
    def windows(self) -> int:
        return len(self.wall)

    @property
    def wall_mean(self) -> float:
        return stats.mean(self.wall)

    @property
    def cpu_mean(self) -> float:
        return stats.mean(self.cpu)

    def group(self, key: str) -> Group | None:
        for group in self.groups:
            if group.key == key:
                return group
        return None

    def stages(self) -> tuple[Group, ...]:
        return tuple(g for g in self.groups if g.kind == "stage")

    @property
    def has_device(self) -> bool:
        return bool(self.device_busy)

    @property
    def device_busy_mean(self) -> float:
        return stats.mean(self.device_busy)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "version": FORMAT_VERSION if self.has_device else HOST_ONLY_VERSION,
            "name": self.name,
            "iterations": self.iterations,
            "host_tracer_level": self.host_tracer_level,
            "logdir": self.logdir,
            "unit": "us per iteration",
            "wall": _us(self.wall),
            "other": _us(self.other),
            "smallest_kept": round(self.smallest_kept * 1e6, 1),
            "input_wait": _us(self.input_wait),
            "elements": round(self.elements, 3),
            "groups": [_group_dict(g) for g in self.groups],
        }
        if self.cpu:
            out["cpu"] = _us(self.cpu)
        if self.has_device:
            out["device_busy"] = _us(self.device_busy)
            out["device_other"] = _us(self.device_other)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Profile:
        version = data.get("version") if isinstance(data, Mapping) else None
        # bool is an int to Python: ``True`` must not read as version 1
        if isinstance(version, bool) or version not in READ_VERSIONS:
            raise ProfileFormatError(f"profile format version {version!r} is not one of "
                                     f"{', '.join(map(str, READ_VERSIONS))}, those this pytest-tfperf reads; "
                                     "profile again to store one it reads")
        try:
            wall = _seconds(data["wall"])
            groups = tuple(_group_from(g, len(wall)) for g in data["groups"])
            other = _seconds(data["other"])
            input_wait = _seconds(data["input_wait"])
            if len(other) != len(wall) or len(input_wait) != len(wall) or not wall:
                raise ValueError("window counts differ")
            device_busy: tuple[float, ...] = ()
            device_other: tuple[float, ...] = ()
            if version == FORMAT_VERSION:
                device_busy = _seconds(data["device_busy"])
                device_other = _seconds(data["device_other"])
                if len(device_busy) != len(wall) or len(device_other) != len(wall):
                    raise ValueError("device window counts differ")
            cpu = _seconds(data.get("cpu", ()))
            if cpu and len(cpu) != len(wall):
                raise ValueError("cpu window count differs")
            if version == HOST_ONLY_VERSION and any(g.kind in DEVICE_KINDS for g in groups):
                raise ValueError("device groups in a version 1 profile")
            return cls(name=str(data["name"]), iterations=int(data["iterations"]), wall=wall, groups=groups,
                       other=other, smallest_kept=float(data["smallest_kept"]) / 1e6, input_wait=input_wait,
                       elements=float(data["elements"]), host_tracer_level=int(data["host_tracer_level"]),
                       logdir=data.get("logdir"), device_busy=device_busy, device_other=device_other,
                       cpu=cpu)
        except (KeyError, TypeError, ValueError) as exc:
            raise ProfileFormatError(f"stored profile is malformed: {type(exc).__name__}: {exc}") from None


def _us(values: Sequence[float]) -> list[float]:
    return [round(v * 1e6, 1) for v in values]


def _seconds(values: Any) -> tuple[float, ...]:
    out = tuple(float(v) / 1e6 for v in values)
    if not all(math.isfinite(v) for v in out):
        raise ValueError("a value is not finite")
    return out


def _group_dict(group: Group) -> dict[str, Any]:
    out: dict[str, Any] = {"key": group.key, "kind": group.kind, "label": group.label,
                           "families": list(group.families), "per_window": _us(group.per_window)}
    if group.per_element is not None:
        out["per_element"] = round(group.per_element * 1e6, 1)
    if group.parallel is not None:
        out["parallel"] = group.parallel
    if group.per_event is not None:
        out["per_event"] = round(group.per_event * 1e6, 2)
    if group.events is not None:
        out["events"] = round(group.events, 4)
    if group.functions is not None:
        out["functions"] = list(group.functions)
    return out


def _group_from(data: Mapping[str, Any], windows: int) -> Group:
    kind = str(data["kind"])
    if kind not in GROUP_KINDS:
        raise ValueError(f"unknown group kind {kind!r}")
    per_window = _seconds(data["per_window"])
    if len(per_window) != windows:
        raise ValueError(f"group {data['key']!r} has {len(per_window)} windows, the profile {windows}")
    per_element = data.get("per_element")
    parallel = data.get("parallel")
    per_event = data.get("per_event")
    events = data.get("events")
    functions = data.get("functions")
    return Group(key=str(data["key"]), kind=kind, label=str(data["label"]),
                 families=tuple(str(f) for f in data.get("families", ())), per_window=per_window,
                 per_element=None if per_element is None else float(per_element) / 1e6,
                 parallel=None if parallel is None else bool(parallel),
                 per_event=None if per_event is None else float(per_event) / 1e6,
                 events=None if events is None else float(events),
                 functions=None if functions is None else tuple(str(f) for f in functions))

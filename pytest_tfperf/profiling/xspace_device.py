"""What a GPU's events in TensorFlow's XPlane profile are: the op that launched each, its group, its launch time.

A GPU has a plane of its own (``/device:GPU:N``), one line per CUDA stream
(``Stream #N(...)``), one event per kernel, copy or memset, as TensorFlow's
CUPTI collector writes them (``xla/backends/profiler/gpu/cupti_collector.cc``):
its ``tf_op`` stat names the TensorFlow op whose annotation was open when it
was launched (``scope/name:Type``), its ``correlation_id`` the driver call that
launched it (``cuLaunchKernel`` and the like, on a host plane with the same
stat). Device events are read into groups of their own (``device:layer:...``,
``device:op:...``) by the host ops' scope and family rules: a kernel's time is
its duration (kernels of one stream do not nest). A kernel belongs to the
window in which its launch started when the launch is found by its correlation
id (a step's kernels may run after the host left the window), else to the
window in which it started itself. Lines xprof derives at display time
(``TensorFlow Ops``, ``XLA Ops``, ``Steps``...) are not streams and are not read,
so nothing is counted twice. None of this has run on a real GPU here: it is
written against the format and tested on synthetic planes.

The planes are read in ``xspace``'s pass over the profile; this module holds
what that pass asks of each device event.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pytest_tfperf.profiling.names import layer_scope, op_family, parse_op

DEVICE_PLANE_PREFIX = "/device:GPU:"
STREAM_LINE_PREFIX = "Stream #"
CUPTI_PLANE = "/host:CUPTI"  # CUPTI's driver calls before TensorFlow's post-processing merges them into the host's
_NO_OP_KEY = "device:op:(none)"


def launch_starts(space: Any, planes: Iterable[str]) -> dict[int, int]:
    """Correlation id -> start (ps) of the driver call that launched it (``cuLaunchKernel``, ``cuMemcpy...``),
    read from the ``planes`` named (where the driver calls are)."""
    launch_planes = set(planes)
    out: dict[int, int] = {}
    for plane in space.planes:
        if plane.name not in launch_planes:
            continue
        correlation_stat = next((mid for mid, meta in plane.stat_metadata.items() if meta.name == "correlation_id"),
                                None)
        if correlation_stat is None:
            continue
        driver = {mid for mid, meta in plane.event_metadata.items() if meta.name.startswith("cu")}
        for line in plane.lines:
            base_ps = line.timestamp_ns * 1000
            for event in line.events:
                if event.metadata_id not in driver:
                    continue
                for stat in event.stats:
                    if stat.metadata_id == correlation_stat:
                        out[stat.uint64_value or stat.int64_value] = base_ps + event.offset_ps
    return out


def innermost_op(annotation: str) -> str:
    """The op of an annotation stack ``outer::inner#k=v#``: the innermost part that names an op."""
    for part in reversed(annotation.split("::")):
        name = part.split("#", 1)[0].strip()
        if parse_op(name) is not None:
            return name
    return ""


def device_group(op_name: str, event_name: str) -> tuple[str, str | None, str, str]:
    """(group, op family, the group's kind, its label) of a device event: its op's layer scope, else its op family;
    a copy or a kernel that names no op is a group of its own (a host-to-device copy that appears is worth naming
    as one)."""
    op = parse_op(op_name) if op_name else None
    if op is not None:
        node, op_type = op
        family = op_family(op_type)
        scope = layer_scope(node)
        if scope:
            return "device:layer:" + scope, family, "device layer", scope.rsplit("/", 1)[-1] + " kernels"
        return "device:op:" + family, family, "device op", f"{family} kernels outside layers"
    if event_name.startswith(("Memcpy", "Memset")):
        kind = event_name.split("(", 1)[0].split(" ", 1)[0]
        return "device:op:" + kind, kind, "device op", f"{kind} with no TensorFlow op"
    return _NO_OP_KEY, None, "device op", "kernels with no TensorFlow op"


def union_length(spans: list[tuple[int, int]]) -> int:
    """Total length of the union of ``[start, end)`` spans (streams of one device overlap)."""
    total = 0
    reach = None
    for start, end in sorted(spans):
        if reach is None or start >= reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total

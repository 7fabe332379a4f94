"""Absolute limits on a measurement (``@pytest.mark.tfperf(max_peak_tf_bytes=..., ...)``).

A budget needs no baseline: it fails a test whose measured figure crosses a
fixed line. Pure: no pytest, no TensorFlow.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_tfperf.model import BudgetViolation, Measurement, MemoryPeak, MemorySource

_RSS_SOURCES = (MemorySource.RSS_HWM, MemorySource.RSS_SAMPLED)

# Marker arguments that are budgets on a named extra metric (diagnostics put
# these names into Measurement.extra_metrics).
_EXTRA_MARKER_BUDGETS = {
    "max_input_bound_fraction": ("max", "input_bound_fraction"),
    "max_memory_growth_bytes_per_iteration": ("max", "memory_growth_bytes_per_iteration"),
    "min_gpu_busy_fraction": ("min", "gpu_busy_fraction"),  # NVML, see gpu_busy
}
_NOT_EXTRA = {"max_peak_tf_bytes", "max_peak_rss_bytes", "max_peak_device_bytes", "min_throughput", "max_traces"}


@dataclass(frozen=True, slots=True)
class Budgets:
    """Fixed limits; ``None`` means no limit.

    ``max_extra`` / ``min_extra`` limit named ``Measurement.extra_metrics``
    (e.g. ``{"input_bound_fraction": 0.5}``); a mapping is accepted and stored
    as sorted ``(name, limit)`` pairs so the object stays immutable.
    """

    max_peak_tf_bytes: int | None = None
    max_peak_rss_bytes: int | None = None
    max_peak_device_bytes: int | None = None
    min_throughput_per_s: float | None = None
    max_traces_steady: int | None = None
    max_extra: tuple[tuple[str, float], ...] = ()
    min_extra: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        for name in ("max_peak_tf_bytes", "max_peak_rss_bytes", "max_peak_device_bytes", "min_throughput_per_s",
                     "max_traces_steady"):
            value = getattr(self, name)
            if value is not None:
                _check_number(f"Budgets.{name}", value, allow_zero=name == "max_traces_steady")
        for name in ("max_extra", "min_extra"):
            pairs = _pairs(getattr(self, name), f"Budgets.{name}")
            object.__setattr__(self, name, pairs)

    @property
    def empty(self) -> bool:
        return self == Budgets()


def _pairs(value: Mapping[str, float] | Iterable[tuple[str, float]], where: str) -> tuple[tuple[str, float], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    out: dict[str, float] = {}
    for item in items:
        try:
            key, limit = item
        except (TypeError, ValueError):
            raise ValueError(f"{where} must map metric names to limits, got the entry {item!r}") from None
        if not isinstance(key, str) or not key:
            raise ValueError(f"{where}: metric names must be non-empty strings, got {key!r}")
        _check_number(f"{where}[{key!r}]", limit, allow_zero=True, allow_negative=True)
        out[key] = float(limit)
    return tuple(sorted(out.items()))


def _check_number(where: str, value: Any, *, allow_zero: bool = False, allow_negative: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where} must be a finite number, got {value!r}")
    if not allow_negative and (value < 0 or (value == 0 and not allow_zero)):
        raise ValueError(f"{where} must be {'>= 0' if allow_zero else 'positive'}, got {value!r}")


def budgets_from_marker(options: object) -> Budgets:
    """Budgets from marker settings (``config.MarkerOptions`` or anything with the same attributes).

    ``max_input_bound_fraction`` and ``max_memory_growth_bytes_per_iteration``
    limit the extra metrics of the same name; so does any ``max_<name>`` /
    ``min_<name>`` key of ``options.extra``.
    """
    def get(name: str) -> Any:
        return getattr(options, name, None)

    max_extra: dict[str, float] = {}
    min_extra: dict[str, float] = {}
    for key, (kind, metric) in _EXTRA_MARKER_BUDGETS.items():
        if get(key) is not None:
            (max_extra if kind == "max" else min_extra)[metric] = get(key)
    extra = get("extra")
    if isinstance(extra, Mapping):
        for key, value in extra.items():
            if value is None or key in _NOT_EXTRA or not isinstance(key, str):
                continue
            if key in _EXTRA_MARKER_BUDGETS:
                kind, metric = _EXTRA_MARKER_BUDGETS[key]
            elif key.startswith(("max_", "min_")) and len(key) > 4:
                kind, metric = key[:3], key[4:]
            else:
                continue
            (max_extra if kind == "max" else min_extra)[metric] = value
    return Budgets(
        max_peak_tf_bytes=get("max_peak_tf_bytes"),
        max_peak_rss_bytes=get("max_peak_rss_bytes"),
        max_peak_device_bytes=get("max_peak_device_bytes"),
        min_throughput_per_s=get("min_throughput"),
        max_traces_steady=get("max_traces"),
        max_extra=tuple(max_extra.items()),
        min_extra=tuple(min_extra.items()),
    )


def extra_metric_unit(name: str) -> str:
    """The unit of a diagnostics metric, read from the suffix of its name."""
    if name.endswith("_bytes_per_iteration"):
        return "bytes/iteration"
    if name.endswith("_fraction"):
        return "fraction"
    if name.endswith("_per_s"):
        return "items/s"
    return ""


def check_budgets(m: Measurement, budgets: Budgets) -> tuple[BudgetViolation, ...]:
    """Every limit that ``m`` crosses. Limits that cannot be checked are listed by ``unchecked_budgets``."""
    out: list[BudgetViolation] = []
    for limit, sources in (
        (budgets.max_peak_tf_bytes, (MemorySource.TF_ALLOCATOR,)),
        (budgets.max_peak_rss_bytes, _RSS_SOURCES),
        (budgets.max_peak_device_bytes, (MemorySource.NVML,)),
    ):
        if limit is None:
            continue
        for peak in m.memory:
            if peak.source in sources and peak.peak_bytes is not None and peak.peak_bytes > limit:
                note = _device_budget_note(peak) if peak.source is MemorySource.NVML else ""
                out.append(BudgetViolation(metric=peak.metric_name, limit=limit, measured=peak.peak_bytes,
                                           unit="bytes", note=note))
    if budgets.min_throughput_per_s is not None and m.throughput_per_s < budgets.min_throughput_per_s:
        out.append(BudgetViolation(metric="throughput", limit=budgets.min_throughput_per_s,
                                   measured=m.throughput_per_s, unit="items/s"))
    if (budgets.max_traces_steady is not None and m.traces_steady is not None
            and m.traces_steady > budgets.max_traces_steady):
        out.append(BudgetViolation(metric="traces_steady", limit=budgets.max_traces_steady,
                                   measured=m.traces_steady, unit="traces"))
    for name, limit in budgets.max_extra:
        value = m.extra(name)
        if value is not None and value > limit:
            out.append(BudgetViolation(metric=name, limit=limit, measured=value, unit=extra_metric_unit(name)))
    for name, limit in budgets.min_extra:
        value = m.extra(name)
        if value is not None and value < limit:
            out.append(BudgetViolation(metric=f"{name} (minimum)", limit=limit, measured=value,
                                       unit=extra_metric_unit(name)))
    return tuple(out)


def _device_budget_note(peak: MemoryPeak) -> str:
    """What a device budget was compared with: NVML's absolute peak, whose figure, and what the test added.

    The absolute peak holds the CUDA context (about 500 MiB on an H200) and any
    allocator pool kept from earlier tests, so a reader needs the added figure
    beside it to tell a heavy test from a heavy process.
    """
    whose = {"process": "this process's NVML memory, CUDA context and allocator pool included",
             "device": "the whole device's NVML memory, all processes on it included"}.get(peak.scope, "NVML memory")
    added = peak.added_bytes
    text = f"the limit applies to the absolute peak: {whose}"
    if added is not None:
        text += f"; the test itself added {added / 2**20:,.1f} MiB above what was in use when its rounds began"
    return text


def unchecked_budgets(m: Measurement, budgets: Budgets) -> tuple[str, ...]:
    """Budgets ``m`` has no figure for, each with the reason, so a missing probe never passes silently."""
    out: list[str] = []
    for label, limit, sources in (
        ("max_peak_tf_bytes", budgets.max_peak_tf_bytes, (MemorySource.TF_ALLOCATOR,)),
        ("max_peak_rss_bytes", budgets.max_peak_rss_bytes, _RSS_SOURCES),
        ("max_peak_device_bytes", budgets.max_peak_device_bytes, (MemorySource.NVML,)),
    ):
        if limit is None:
            continue
        peaks = [p for p in m.memory if p.source in sources]
        if not any(p.available for p in peaks):
            reasons = "; ".join(p.unavailable or "" for p in peaks if p.unavailable)
            out.append(f"{label}: not checked: no {'/'.join(s.value for s in sources)} figure was measured"
                       + (f" ({reasons})" if reasons else ""))
    if budgets.max_traces_steady is not None and m.traces_steady is None:
        out.append("max_traces: not checked: the workload has no tf.function trace count")
    for kind, pairs in (("max", budgets.max_extra), ("min", budgets.min_extra)):
        for name, _ in pairs:
            if m.extra(name) is None:
                why = [g.unavailable for g in m.gpu_busy if g.unavailable] if name == "gpu_busy_fraction" else []
                if name == "gpu_busy_fraction" and not m.gpu_busy:
                    why = ["NVML read no GPU: no NVIDIA driver, no nvidia-ml-py, or no GPU visible"]
                out.append(f"{kind}_{name}: not checked: the measurement has no {name!r} figure"
                           + (f" ({'; '.join(why)})" if why else ""))
    return tuple(out)

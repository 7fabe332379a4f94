"""Two measurements of one test merged into one (``pool``): the re-measure of a borderline verdict.

Pure: no pytest, no TensorFlow, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_tfperf.model import GpuBusy, Measurement, MemoryPeak, Timings, same_environment


def pool(a: Measurement, b: Measurement) -> Measurement:
    """Merge two measurements of the same test (the confirmation re-measure) by concatenating rounds.

    Timings: rounds of ``a`` then ``b``; the first call is ``a``'s (the cold
    one). Memory: per (source, device) the larger peak and both rounds' peaks;
    a figure missing on one side is taken from the other. Traces: the larger
    steady-state counts added up, as the rounds and iterations are (a count that grows with either stays
    in proportion; a retrace in either is a retrace). Diagnoses: ``a``'s,
    then ``b``'s new ones. Extra metrics: ``a``'s, then names only ``b`` has.
    """
    if a.test_id != b.test_id:
        raise ValueError(f"pool() merges two measurements of one test, got {a.test_id!r} and {b.test_id!r}")
    if a.mode != b.mode:
        raise ValueError(f"{a.test_id}: cannot pool a {a.mode!r} measurement with a {b.mode!r} one")
    if a.timings.items_per_iteration != b.timings.items_per_iteration:
        raise ValueError(
            f"{a.test_id}: cannot pool measurements with {a.timings.items_per_iteration} and "
            f"{b.timings.items_per_iteration} items per iteration"
        )
    if not same_environment(a.environment_id, b.environment_id):
        raise ValueError(f"{a.test_id}: cannot pool measurements from different environments")
    timings = Timings(
        samples_ns=a.timings.samples_ns + b.timings.samples_ns,
        round_sizes=a.timings.round_sizes + b.timings.round_sizes,
        items_per_iteration=a.timings.items_per_iteration,
        first_call_ns=a.timings.first_call_ns,
        measured_iterations=(a.timings.iterations_measured + b.timings.iterations_measured
                             if a.timings.measured_iterations or b.timings.measured_iterations else 0),
    )
    if a.trace_counting != b.trace_counting:
        raise ValueError(f"{a.test_id}: cannot pool traces counted {a.trace_counting!r} and {b.trace_counting!r}")
    memory: list[MemoryPeak] = []
    for peak in a.memory:
        memory.append(_pool_peak(peak, b.memory_peak(peak.source, peak.device)))
    for peak in b.memory:
        if a.memory_peak(peak.source, peak.device) is None:
            memory.append(peak)
    # Diagnoses and derived metrics describe a whole measurement: the later one
    # stands for the pair (its figures are the freshest), the earlier fills gaps.
    later_kinds = {d.kind for d in b.diagnoses}
    later_extras = {name for name, _ in b.extra_metrics}
    return Measurement(
        test_id=a.test_id,
        mode=a.mode,
        timings=timings,
        memory=tuple(memory),
        traces_first_call=a.traces_first_call if a.traces_first_call is not None else b.traces_first_call,
        traces_steady=_sum_optional(a.traces_steady, b.traces_steady),
        diagnoses=b.diagnoses + tuple(d for d in a.diagnoses if d.kind not in later_kinds),
        extra_metrics=b.extra_metrics + tuple((k, v) for k, v in a.extra_metrics if k not in later_extras),
        environment_id=a.environment_id or b.environment_id,
        gpu_busy=pool_gpu_busy(a.gpu_busy, b.gpu_busy),
        trace_counting=a.trace_counting,
    )


def pool_gpu_busy(a: Sequence[GpuBusy], b: Sequence[GpuBusy]) -> tuple[GpuBusy, ...]:
    """Two measurements' GPU busy figures as one (rounds of ``a`` then ``b``), for ``pool``."""
    later = {g.device: g for g in b}
    out: list[GpuBusy] = []
    for g in a:
        other = later.pop(g.device, None)
        if other is None or not other.available:
            out.append(g)
        elif not g.available:
            out.append(other)
        else:
            process = g.per_round_process_fraction + other.per_round_process_fraction
            if not g.per_round_process_fraction or not other.per_round_process_fraction:
                process = ()  # one side has none: the rounds would no longer line up
            out.append(GpuBusy(
                device=g.device,
                per_round_fraction=g.per_round_fraction + other.per_round_fraction,
                per_round_process_fraction=process,
                process_unavailable=g.process_unavailable if not process else None,
                process_on_gpu=True if True in (g.process_on_gpu, other.process_on_gpu) else g.process_on_gpu,
                samples=g.samples + other.samples,
            ))
    return tuple(out) + tuple(later.values())


def _pool_peak(a: MemoryPeak, b: MemoryPeak | None) -> MemoryPeak:
    if b is None or b.peak_bytes is None:
        return a
    if a.peak_bytes is None:
        return b
    return MemoryPeak(
        source=a.source,
        device=a.device,
        peak_bytes=max(a.peak_bytes, b.peak_bytes),
        baseline_bytes=a.baseline_bytes,
        per_round_peak_bytes=a.per_round_peak_bytes + b.per_round_peak_bytes,
        per_round_start_bytes=(a.per_round_start_bytes + b.per_round_start_bytes
                               if a.per_round_start_bytes and b.per_round_start_bytes else ()),
        scope=a.scope if a.scope == b.scope else "", detail=a.detail,
    )


def _sum_optional(x: int | None, y: int | None) -> int | None:
    if x is None:
        return y
    if y is None:
        return x
    return x + y

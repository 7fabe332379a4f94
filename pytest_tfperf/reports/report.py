"""Formatters: they return lines, they never print (only ``plugin`` writes to the terminal)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_tfperf.model import GpuBusy, Measurement, MemorySource, readable_duration
from pytest_tfperf.gates.verdict import slowdown_text


@dataclass(frozen=True, slots=True)
class Row:
    """One test's line in the summary: its measurement and what was decided about it."""

    measurement: Measurement
    verdict: str  # "ok", "REGRESSED", "improved", "no baseline", "noisy", "BUDGET", ...
    catches: str = ""  # the smallest throughput slowdown the verdict's comparison catches here ("38%", "none")


def format_limit(limit: float | None) -> str:
    """A detection limit for a table cell: '38%', '3.0x' (a slowdown to 3x the time), 'none', '' (no comparison)."""
    if limit is None:
        return ""
    return slowdown_text(limit)


def format_bytes(value: int | float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value / 2**20:,.1f} MiB"


def format_rate(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:,.2f} M/s"
    if value >= 1e4:
        return f"{value / 1e3:,.1f} k/s"
    return f"{value:,.1f} /s"


def _host_peak(m: Measurement) -> str:
    for source in (MemorySource.RSS_HWM, MemorySource.RSS_SAMPLED):
        peak = m.memory_peak(source)
        if peak is not None:
            return format_bytes(peak.peak_bytes) if peak.available else "n/a"
    return "n/a"


def _tf_peak(m: Measurement) -> str:
    peaks = [p for p in m.memory if p.source is MemorySource.TF_ALLOCATOR]
    if not peaks:
        return "n/a"
    parts = []
    for p in peaks:
        # What the workload added above the memory in use when each round began.
        value = format_bytes(p.added_bytes)
        parts.append(value if len(peaks) == 1 else f"{p.device} {value}")
    return ", ".join(parts)


def _gpu_memory(m: Measurement) -> str:
    """NVML's peak per GPU and, in brackets, what the rounds added; ``*`` marks a whole-device figure."""
    peaks = [p for p in m.memory if p.source is MemorySource.NVML]
    if not peaks:
        return "-"
    parts = []
    for p in peaks:
        if p.peak_bytes is None:
            value = "n/a"
        else:
            added = p.added_bytes
            value = format_bytes(p.peak_bytes) + (f" (+{added / 2**20:,.1f})" if added is not None else "")
            value += "*" if p.scope == "device" else ""
        parts.append(value if len(peaks) == 1 else f"{p.device} {value}")
    return ", ".join(parts)


def _has_gpu_figures(rows: Sequence[Row]) -> bool:
    return any(p.source is MemorySource.NVML for r in rows for p in r.measurement.memory) or any(
        r.measurement.gpu_busy for r in rows)


def _gpu_busy(m: Measurement) -> str:
    return format_gpu_busy(m.gpu_busy) if m.gpu_busy else "-"


def format_gpu_busy(gpu_busy: Sequence[GpuBusy]) -> str:
    """The summary table's cell: ``98%``, ``11% (own 9%)``, ``GPU:0 98%, GPU:1 0%`` or ``n/a``."""
    parts = []
    for g in gpu_busy:
        if g.fraction is None:
            text = "n/a"
        else:
            text = f"{g.fraction:.0%}" + (f" (own {g.process_fraction:.0%})" if g.process_fraction is not None else "")
        parts.append(text if len(gpu_busy) == 1 else f"{g.device} {text}")
    return ", ".join(parts) if parts else "n/a"


def gpu_properties(m: Measurement) -> list[tuple[str, object]]:
    """JUnit properties for the GPU figures beyond the peaks themselves: which NVML figure, what was added, busy."""
    props: list[tuple[str, object]] = []
    for p in m.memory:
        if p.source is MemorySource.NVML and p.peak_bytes is not None:
            if p.scope:
                props.append((f"tfperf_{p.metric_name}_scope", p.scope))
            if p.added_bytes is not None:
                props.append((f"tfperf_{p.metric_name}_added_bytes", p.added_bytes))
    for g in m.gpu_busy:
        if g.fraction is not None:
            props.append((f"tfperf_gpu_busy[{g.device}]_fraction", round(g.fraction, 4)))
        if g.process_fraction is not None:
            props.append((f"tfperf_gpu_busy[{g.device}]_process_fraction", round(g.process_fraction, 4)))
    return props


def _traces(m: Measurement) -> str:
    if m.traces_first_call is None:
        return "-"
    return f"{m.traces_first_call}+{m.traces_steady or 0}"


def summary_table(rows: Sequence[Row]) -> list[str]:
    """The end-of-session table: test, throughput, first call, host and TF peaks, traces, verdict."""
    gpu = _has_gpu_figures(rows)  # the GPU columns appear only where NVML read something
    header: tuple[str, ...] = ("test", "throughput", "±cv", "first call", "peak RSS", "peak TF")
    header += ("GPU mem", "GPU busy") if gpu else ()
    header += ("traces", "catches", "verdict")
    body: list[tuple[str, ...]] = []
    for row in rows:
        m = row.measurement
        cells: tuple[str, ...] = (
            m.test_id,
            format_rate(m.throughput_per_s),
            f"{m.timings.cv * 100:.1f}%",
            readable_duration(m.first_call_s),
            _host_peak(m),
            _tf_peak(m),
        )
        cells += (_gpu_memory(m), _gpu_busy(m)) if gpu else ()
        body.append(cells + (_traces(m), row.catches or "-", row.verdict))
    widths = [max(len(str(r[i])) for r in [header, *body]) for i in range(len(header))]
    left = {0, len(header) - 1}

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    lines = [fmt(header), fmt(["-" * w for w in widths])]
    lines += [fmt(r) for r in body]
    lines.append("")
    lines.append("throughput: items/s at the median iteration; ±cv: robust spread of iteration times; "
                 "peak TF: allocator peak above what was live before measuring; traces: warm-up+steady; "
                 "catches: the smallest slowdown its comparison catches on this machine")
    if gpu:
        lines.append("GPU mem: NVML peak of this process (* the whole device: this process is not in NVML's list), "
                     "in brackets MiB the rounds added; GPU busy: share of the time a kernel ran (NVML, all "
                     "processes; own: this process's share); below 50% the GPU waits for the host")
    return lines


def markdown_summary(rows: Sequence[Row], verdicts: Sequence[object | None],
                     explanations: Sequence[str | None] = (), *, stored_gate: Sequence[str] = ()) -> list[str]:
    """A Markdown table for pull requests and ``$GITHUB_STEP_SUMMARY``: test, throughput, change, verdict.

    ``explanations`` (one per row, or none) are --tfperf-explain's one-line headlines, listed under the table.
    ``stored_gate``: what the stored gate could and could not see (``session.outputs.stored_gate_notes``), as the
    terminal says it: a reviewer reading only this summary learns which slowdowns went unseen.
    """
    gpu = _has_gpu_figures(rows)
    lines = ["### tfperf", "",
             "| test | throughput | change vs baseline | catches | peak TF | " + ("GPU mem | GPU busy | " if gpu else "")
             + "verdict |",
             "|---|---:|---:|---:|---:|" + ("---:|---:|" if gpu else "") + "---|"]
    for row, verdict in zip(rows, verdicts):
        m = row.measurement
        change = "–"
        metric = getattr(verdict, "metric", None)
        throughput = metric("throughput") if callable(metric) else None
        if throughput is not None and throughput.relative_change is not None:
            change = f"{throughput.relative_change * 100:+.1f}%"
            if throughput.ci_low is not None and throughput.ci_high is not None:
                change += f" [{throughput.ci_low * 100:+.1f}%, {throughput.ci_high * 100:+.1f}%]"
        test = m.test_id.replace("|", "\\|")
        gpu_cells = f"{_gpu_memory(m)} | {_gpu_busy(m)} | " if gpu else ""
        lines.append(f"| `{test}` | {format_rate(m.throughput_per_s)} | {change} | {row.catches or '–'} | "
                     f"{_tf_peak(m)} | {gpu_cells}{row.verdict} |")
    unconfirmed = [(row.measurement.test_id, str(getattr(v, "unconfirmed_reason", "")))
                   for row, v in zip(rows, verdicts) if str(getattr(v, "status", "")) == "unconfirmed"]
    if unconfirmed:
        lines += ["", "unconfirmed: a regression in this run's process that a fresh process could not measure "
                      "again; reported, not failed:", ""]
        # One line per test: a reason may carry the fresh process's last output lines.
        lines += [f"- `{test.replace('|', chr(92) + '|')}`: " + "; ".join(filter(None, map(str.strip, reason.splitlines())))
                  for test, reason in unconfirmed]
    explained = [(row.measurement.test_id, line) for row, line in zip(rows, explanations) if line]
    if explained:
        lines += ["", "where the time went (--tfperf-explain; the whole decomposition is in the failure message "
                      "and the JSON):", ""]
        lines += [f"- `{test.replace('|', chr(92) + '|')}`: {line}" for test, line in explained]
    if stored_gate:
        lines += ["", "stored baselines: what this run could and could not see:", ""]
        lines += ["- " + line.replace("|", "\\|") for line in stored_gate]
    if gpu:
        lines += ["", ("GPU mem: NVML peak of this process (* the whole device), in brackets MiB the rounds added; "
                       "GPU busy: share of the time a kernel ran (NVML).")]
    return lines

"""What the HTML report shows, as plain data: built from results, history rows and baseline runs.

Pure and typed: no pytest, no TensorFlow, no matplotlib, no file access (the
callers read the files: ``report_cli`` and the session). Every field read from
a verdict dict is optional here, because results files come from several
versions of the plugin (and from shards written by different jobs).

The figures a page draws:

- per test, the rounds' throughput of this run beside those of what it was
  compared with (the stored baseline's runs, the ``tfperf.compare`` reference
  variant, or the other version under ``--tfperf-against``);
- per test and memory source, the per-round peaks of both sides;
- per test and metric, its history over recorded runs of the same environment,
  with the baseline's level and prediction band (``prediction_band``) and the
  runs that refreshed the baseline marked.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pytest_tfperf import stats
from pytest_tfperf.reports.effect_lines import EffectRow, as_float, effect_row
from pytest_tfperf.reports.explain_headline import headline
from pytest_tfperf.storage.history_csv import HistoryRow, measurement_metrics
from pytest_tfperf.model import Measurement, MemorySource
from pytest_tfperf.reports.shards import ShardedResults, ShardedTest

BAND_CONFIDENCE = 0.99
# History metrics worth a panel, in this order; median_ns is the throughput's inverse, and the rest
# (cv, iterations) describe the measurement rather than the code: they stay in history.csv.
_HISTORY_FIXED = ("throughput_per_s", "first_call_ns")
_HISTORY_LAST = ("traces_steady",)
# median_ns and p95_ns follow the throughput, traces_first_call the code's tracing, cv and iterations the
# measurement: they stay in history.csv, undrawn, to keep the page light.
_SKIPPED = {"median_ns", "p95_ns", "cv", "iterations", "traces_first_call"}
# Verdict statuses, worst first: the overview lists failures first.
_SEVERITY = {"failed": 0, "regressed": 1, "unconfirmed": 2, "noisy": 2, "improved": 3, "unchanged": 4,
             "unavailable": 5, "": 6}
# A refresh writes the baseline and appends the history within seconds of each other (session.finish).
REFRESH_WINDOW_S = 120.0


@dataclass(frozen=True, slots=True)
class Band:
    """A baseline's level and its two-sided prediction band for one new run (None below 2 runs)."""

    level: float
    low: float | None
    high: float | None
    runs: int


def prediction_band(values: Sequence[float], confidence: float = BAND_CONFIDENCE) -> Band | None:
    """Where a new run of unchanged code should fall, from the baseline's runs of one metric.

    In logs (speeds and sizes vary by ratios): level = mean of the logs,
    bounds = level -/+ t(confidence, n-1) * sd * sqrt(1 + 1/n), the
    prediction interval for one more run, so each side alone is a one-sided
    ``confidence`` bound (the rule of issue #9; Bencher's t-test limit). A
    metric with a zero or negative value (a trace count) is not log-normal:
    its level is the plain mean and it gets no band. One run gives a level
    and no band: its spread is unknown.
    """
    finite = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return None
    n = len(finite)
    if min(finite) <= 0:
        return Band(sum(finite) / n, None, None, n)
    logs = [math.log(v) for v in finite]
    level = sum(logs) / n
    if n < 2:
        return Band(math.exp(level), None, None, n)
    half = stats.t_quantile(confidence, n - 1) * stats.stdev(logs) * math.sqrt(1 + 1 / n)
    return Band(math.exp(level), math.exp(level - half), math.exp(level + half), n)


@dataclass(frozen=True, slots=True)
class BaselineFigures:
    """What the stored baseline of one test holds, as the report needs it.

    ``measurements``: runs whose rounds are drawn beside this run's;
    ``values``: metric (as history.csv names it) -> its value in each of the
    baseline's runs, for the level and band; ``recorded_at``: when each run was
    recorded. ``reports.sources.baseline_figures`` fills it from the baseline store.
    """

    measurements: tuple[Measurement, ...] = ()
    values: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    recorded_at: tuple[str, ...] = ()
    # metric -> (low, level, high): the bound the stored gate applies (``gates.stored.baseline_bands``), drawn
    # instead of a band of our own so the picture is the rule that judged.
    gate_bands: Mapping[str, tuple[float, float, float]] = field(default_factory=dict)

    @classmethod
    def from_measurements(cls, measurements: Sequence[Measurement], recorded_at: Sequence[str] = ()) -> BaselineFigures:
        values: dict[str, list[float]] = {}
        for run in measurements:
            for metric, value, _ in measurement_metrics(run):
                values.setdefault(metric, []).append(value)
        return cls(tuple(measurements), {k: tuple(v) for k, v in values.items()}, tuple(recorded_at))


@dataclass(frozen=True, slots=True)
class HistoryPoint:
    run_id: str
    recorded_at: str
    git_commit: str
    value: float
    kind: str = ""  # "refresh" or "record" where the history says (HistoryRow.kind), else unknown

    @property
    def label(self) -> str:
        """``11-26 ab12cd3``: the date and the commit, short enough for an axis."""
        day = self.recorded_at[5:10] if len(self.recorded_at) >= 10 else self.recorded_at
        return f"{day} {self.git_commit[:7]}".strip()


@dataclass(frozen=True, slots=True)
class MetricHistory:
    metric: str
    unit: str
    points: tuple[HistoryPoint, ...]  # oldest first
    band: Band | None
    refreshes: tuple[int, ...]  # indices into points


@dataclass(frozen=True, slots=True)
class MemorySeries:
    name: str  # "tf_allocator CPU:0 (added above round start)"
    current: tuple[float, ...]
    reference: tuple[tuple[float, ...], ...]  # one tuple per reference run


@dataclass(frozen=True, slots=True)
class ExplanationPart:
    """One line of an explanation's table: a group that moved (or the common factor, or the remainder)."""

    group: str  # "planted (MatMul family)", "every group x1.35", "remainder"
    how: str  # "appeared", "grew", ... ; "" for the common factor and the remainder
    delta: float  # in the explanation's unit, per iteration
    noise: float | None  # the noise it was compared with; None where none applies


@dataclass(frozen=True, slots=True)
class ExplanationView:
    """What ``--tfperf-explain`` said about one verdict: the additive parts, or why there are none.

    ``unit`` is "ms" (time per iteration) or "bytes" (a peak's change); ``parts`` add up to ``measured``
    (the common factor and the remainder included).
    """

    what: str  # "time" or "memory"
    unit: str
    measured: float | None
    parts: tuple[ExplanationPart, ...]
    notes: tuple[str, ...]  # what the table does not hold: the stage behind a wait, "nothing moved"
    commands: tuple[tuple[str, str], ...]  # (side, "tensorboard --logdir ...")
    reason: str | None  # why there is no explanation
    headline: str = ""  # the answer, first: the cause (``explain_headline``), not the symptom


def explanation_views(data: Mapping[str, Any] | None) -> tuple[ExplanationView, ...]:
    """The explanations of one test from its results entry's ``"explanation"`` (time; a ``"memory"`` key inside
    it holds the memory one). Every field is optional: results come from several versions of the plugin."""
    if not isinstance(data, Mapping):
        return ()
    out = [_explanation_view(data, "time")]
    memory = data.get("memory")
    if isinstance(memory, Mapping):
        out.append(_explanation_view(memory, "memory"))
    return tuple(v for v in out if v is not None)


def _explanation_view(data: Mapping[str, Any], what: str) -> ExplanationView | None:
    unit = "bytes" if what == "memory" else "ms"
    suffix = "_bytes" if unit == "bytes" else "_ms"
    if "causes" not in data:
        lines = data.get("lines")
        reason = data.get("reason")
        if reason is None and "memory" not in data:  # an older form: its first line says why
            reason = lines[0] if isinstance(lines, list) and lines else None
        if reason is None:
            return None
        cost = tuple(str(c) for c in data.get("cost") or [])  # a pass over its budget, said even without a profile
        return ExplanationView(what, unit, None, (), cost, (), str(reason))
    parts = []
    factor_delta = as_float(data.get("common_factor" + suffix))
    factor = as_float(data.get("common_factor"))
    if factor_delta and factor is not None:
        parts.append(ExplanationPart(f"every group x{factor:.2f}", "", factor_delta, None))
    input_delta = as_float(data.get("input_factor" + suffix))
    input_factor = as_float(data.get("input_factor"))
    if input_delta and input_factor is not None:
        parts.append(ExplanationPart(f"the whole pipeline x{input_factor:.2f} (the consumer's wait)", "",
                                     input_delta, None))
    causes = data.get("causes")
    for c in causes if isinstance(causes, list) else ():
        if isinstance(c, Mapping) and as_float(c.get("delta" + suffix)) is not None:
            parts.append(ExplanationPart(str(c.get("label", c.get("key", "?"))), str(c.get("how", "")),
                                         float(c["delta" + suffix]), as_float(c.get("noise" + suffix))))
    remainder = as_float(data.get("remainder" + suffix))
    if remainder is not None:
        parts.append(ExplanationPart("remainder", "", remainder, None))
    notes = []
    if not causes:
        notes.append(f"no {'op' if what == 'memory' else 'op or stage'} moved beyond its noise"
                     f" ({data.get('within_noise', 0)} groups compared)")
    paced = data.get("paced_by")
    if isinstance(paced, Mapping) and paced.get("label"):
        notes.append(f"the wait for input is behind {paced['label']} ({paced.get('how', '')})")
    for stage in data.get("reshaped") or []:
        if isinstance(stage, Mapping) and stage.get("label"):
            was, now = (("parallel" if stage.get(k) else "sequential") for k in ("base_parallel", "current_parallel"))
            notes.append(f"tf.data runs differently: {stage['label']} {now}, was {was}")
    notes += [str(c) for c in data.get("cost") or []]
    commands = tuple((side, f"tensorboard --logdir {data[key]}")
                     for side, key in (("baseline", "base_logdir"), ("current", "current_logdir"))
                     if isinstance(data.get(key), str) and data[key])
    if isinstance(data.get("baseline_profile_command"), str):  # the stored baseline's raw profile is elsewhere
        commands += (("baseline: its raw profile is not in this checkout; profiles both sides here",
                      data["baseline_profile_command"]),)
    return ExplanationView(what, unit, as_float(data.get("measured" + suffix)), tuple(parts), tuple(notes),
                           commands, None, headline(data) if what == "time" else "")


@dataclass(frozen=True, slots=True)
class TestView:
    test_id: str
    anchor: str
    status: str  # "regressed", "failed", "noisy", "improved", "unchanged", "unavailable", "" (no verdict)
    compared_with: str
    throughput: float | None
    change: float | None
    ci: tuple[float, float] | None
    detection_limit: float | None  # minimum_detectable_change of the throughput verdict
    peaks: tuple[tuple[str, float], ...]  # (name, bytes)
    traces: str
    diagnoses: tuple[tuple[str, str, str], ...]  # (kind, severity, summary)
    messages: tuple[str, ...]  # what moved, from the verdict's metrics
    rounds_current: tuple[float, ...]
    rounds_reference: tuple[tuple[float, ...], ...]  # one tuple per reference run
    reference_label: str
    memory: tuple[MemorySeries, ...]
    gpu_busy: float | None
    history: tuple[MetricHistory, ...]
    environment: str  # fingerprint
    source: str
    explanations: tuple[ExplanationView, ...] = ()  # --tfperf-explain's, for a failed verdict

    @property
    def failed(self) -> bool:
        return self.status in ("regressed", "failed")

    @property
    def severity(self) -> int:
        return _SEVERITY.get(self.status, 6)

    @property
    def notable_diagnoses(self) -> tuple[str, ...]:
        """What the terminal summary also prints: warnings, failures, and input-bound findings."""
        return tuple(text for kind, severity, text in self.diagnoses if severity != "info" or kind == "input_bound")


@dataclass(frozen=True, slots=True)
class Report:
    title: str
    generated_at: str
    sources: tuple[str, ...]
    environments: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]  # (fingerprint, hard keys)
    tests: tuple[TestView, ...]  # failures first
    effects: tuple[EffectRow, ...]

    def count(self, status: str) -> int:
        return sum(t.status == status for t in self.tests)


def anchor_for(test_id: str, taken: set[str]) -> str:
    """An HTML id for a test: readable, unique, and made of characters that need no escaping."""
    base = re.sub(r"[^A-Za-z0-9_-]+", "-", test_id.split("::")[-1]).strip("-")[:60] or "test"
    anchor, n = f"t-{base}", 1
    while anchor in taken:
        n += 1
        anchor = f"t-{base}-{n}"
    taken.add(anchor)
    return anchor


def _throughput_verdict(verdict: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    metrics = verdict.get("metrics") if verdict else None
    if isinstance(metrics, list):
        for m in metrics:
            if isinstance(m, Mapping) and m.get("metric") == "throughput":
                return m
    return None


def _messages(verdict: Mapping[str, Any] | None) -> tuple[str, ...]:
    if not verdict:
        return ()
    if verdict.get("status") == "failed":
        return (str(verdict.get("summary", "")),)
    metrics = verdict.get("metrics")
    out = []
    if verdict.get("status") == "unconfirmed":
        out.append(f"unconfirmed, not failed: {verdict.get('unconfirmed_reason', '')}")
    if isinstance(metrics, list):
        for m in metrics:
            if isinstance(m, Mapping) and m.get("status") in ("regressed", "noisy", "improved"):
                out.append(str(m.get("message", "")))
    return tuple(out)


def _memory_rounds(m: Measurement) -> dict[str, tuple[float, ...]]:
    out: dict[str, tuple[float, ...]] = {}
    for peak in m.memory:
        if not peak.available or not peak.per_round_peak_bytes:
            continue
        name = source_name(peak.source, peak.device)
        if peak.source is MemorySource.TF_ALLOCATOR:
            # What each round added: the figure the summary table and the gate use for TF.
            out[f"{name}, added per round"] = tuple(map(float, peak.per_round_added_bytes))
        else:
            out[f"{name} peak per round"] = tuple(map(float, peak.per_round_peak_bytes))
    return out


_SOURCE_NAMES = {MemorySource.TF_ALLOCATOR: "TF {device}", MemorySource.RSS_HWM: "RSS",
                 MemorySource.RSS_SAMPLED: "RSS (sampled)", MemorySource.NVML: "NVML {device}"}


def source_name(source: MemorySource, device: str) -> str:
    """A memory source as the summary table names it: "TF CPU:0", "RSS", "NVML GPU:0"."""
    return _SOURCE_NAMES.get(source, f"{source.value} {{device}}").format(device=device)


def _peaks(m: Measurement) -> tuple[tuple[str, float], ...]:
    out = []
    for peak in m.memory:
        if peak.available:
            value = peak.added_bytes if peak.source is MemorySource.TF_ALLOCATOR else peak.peak_bytes
            if value is not None:
                out.append((source_name(peak.source, peak.device), float(value)))
    return tuple(out)


def gpu_busy_fraction(m: Measurement) -> float | None:
    """The GPU busy figure among the extra metrics, if a probe recorded one (issue #11 adds it)."""
    for name, value in m.extra_metrics:
        lowered = name.lower()
        if "gpu" in lowered and ("busy" in lowered or "util" in lowered) and math.isfinite(value):
            return value / 100 if value > 1 else value
    return None


def _sibling(test_id: str, variant: str, known: Mapping[str, ShardedTest]) -> str | None:
    """The id of ``variant`` beside ``test_id`` (``t[case-fix]`` -> ``t[case-anti]``), if it was measured."""
    for i in range(len(test_id) - 2, -1, -1):
        if test_id[i] in "[-" and test_id.endswith("]"):
            candidate = f"{test_id[:i + 1]}{variant}]"
            if candidate in known and candidate != test_id:
                return candidate
    return None


def _reference(entry: ShardedTest, results: ShardedResults,
               baseline: BaselineFigures) -> tuple[tuple[Measurement, ...], str]:
    if entry.reference is not None:
        return (entry.reference,), entry.compared_with or "the other version"
    found = re.match(r"paired with '(.+)'$", entry.compared_with)
    if found:
        sibling = _sibling(entry.test_id, found.group(1), results.tests)
        m = results.measurement(sibling) if sibling else None
        return ((m,) if m is not None else ()), f"variant '{found.group(1)}'"
    if baseline.measurements:
        runs = max(len(baseline.recorded_at), len(baseline.measurements))
        return baseline.measurements, "stored baseline" + (f" ({runs} runs)" if runs > 1 else "")
    return (), ""


def is_refresh(point: HistoryPoint, baseline_times: Sequence[datetime]) -> bool:
    """Whether a history run refreshed the baseline.

    The row's own kind when the history records it; otherwise, a run recorded
    beside one of the current baseline's runs (older refreshes left no trace).
    """
    if point.kind:
        return point.kind == "refresh"
    when = _parse_time(point.recorded_at)
    return when is not None and any(abs((when - t).total_seconds()) <= REFRESH_WINDOW_S for t in baseline_times)


def _parse_time(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _history_order(metrics: Iterable[str]) -> list[str]:
    present = set(metrics) - _SKIPPED
    # Where the history has what a round added above its start (what the memory gate compares), that
    # is drawn rather than the absolute peak.
    present -= {m for m in present if f"added_{m}" in present}
    middle = sorted(m for m in present if m not in _HISTORY_FIXED and m not in _HISTORY_LAST)
    return ([m for m in _HISTORY_FIXED if m in present] + middle + [m for m in _HISTORY_LAST if m in present])


def metric_histories(rows: Sequence[HistoryRow], baseline: BaselineFigures | None = None) -> tuple[MetricHistory, ...]:
    """One test's history (rows of one environment), metric by metric, with the baseline's band."""
    baseline = baseline or BaselineFigures()
    by_metric: dict[str, dict[str, HistoryRow]] = {}
    for row in rows:
        by_metric.setdefault(row.metric, {})[row.run_id] = row  # a run recorded twice keeps its last row
    times = [t for t in (_parse_time(s) for s in baseline.recorded_at) if t is not None]
    out = []
    for metric in _history_order(by_metric):
        ordered = sorted(by_metric[metric].values(), key=lambda r: (r.recorded_at, r.run_id))
        points = tuple(HistoryPoint(r.run_id, r.recorded_at, r.git_commit, r.value, str(getattr(r, "kind", "")))
                       for r in ordered)
        refreshes = tuple(i for i, p in enumerate(points) if is_refresh(p, times))
        gated = baseline.gate_bands.get(metric)
        band = (Band(gated[1], gated[0], gated[2], len(baseline.values.get(metric, ()))) if gated is not None
                else prediction_band(baseline.values.get(metric, ())))
        out.append(MetricHistory(metric, ordered[-1].unit, points, band, refreshes))
    return tuple(out)


def build_report(
    results: ShardedResults,
    history: Sequence[HistoryRow] = (),
    baselines: Mapping[str, BaselineFigures] | None = None,
    *,
    title: str = "pytest-tfperf report",
    generated_at: str = "",
) -> Report:
    """The report's data. ``baselines``: test id -> what its stored baseline holds for its environment."""
    baselines = baselines or {}
    rows_by_test: dict[tuple[str, str], list[HistoryRow]] = {}
    for row in history:
        rows_by_test.setdefault((row.test_id, row.fingerprint), []).append(row)
    taken: set[str] = set()
    views = []
    for test_id in results.test_ids:
        entry = results.tests[test_id]
        m = entry.measurement
        verdict = entry.verdict
        throughput = _throughput_verdict(verdict)
        figures = baselines.get(test_id, BaselineFigures())
        references, reference_label = _reference(entry, results, figures)
        ci_low, ci_high = (as_float(throughput.get("ci_low")), as_float(throughput.get("ci_high"))) \
            if throughput else (None, None)
        mine = _memory_rounds(m) if m is not None else {}
        theirs = [_memory_rounds(r) for r in references]
        fingerprint = entry.environment.fingerprint
        diagnoses = tuple((d.kind, d.severity, d.summary) for d in m.diagnoses) if m is not None else ()
        if verdict and verdict.get("status") == "failed" and verdict.get("summary"):
            diagnoses += ((str(verdict.get("kind", "")), "failure", str(verdict["summary"])),)
        views.append(TestView(
            test_id=test_id,
            anchor=anchor_for(test_id, taken),
            status=str(verdict.get("status", "")) if verdict else "",
            compared_with=entry.compared_with,
            throughput=m.throughput_per_s if m is not None else None,
            change=as_float(throughput.get("relative_change")) if throughput else None,
            ci=(ci_low, ci_high) if ci_low is not None and ci_high is not None else None,
            detection_limit=as_float(throughput.get("minimum_detectable_change")) if throughput else None,
            peaks=_peaks(m) if m is not None else (),
            traces="-" if m is None or m.traces_first_call is None else f"{m.traces_first_call}+{m.traces_steady or 0}",
            diagnoses=tuple(dict.fromkeys(diagnoses)),
            messages=_messages(verdict),
            rounds_current=m.timings.round_throughputs_per_s if m is not None else (),
            rounds_reference=tuple(r.timings.round_throughputs_per_s for r in references),
            reference_label=reference_label,
            memory=tuple(MemorySeries(name, values, tuple(t[name] for t in theirs if name in t))
                         for name, values in mine.items()),
            gpu_busy=gpu_busy_fraction(m) if m is not None else None,
            history=metric_histories(rows_by_test.get((test_id, fingerprint), []), figures),
            environment=fingerprint,
            source=entry.source,
            explanations=explanation_views(entry.explanation),
        ))
    views.sort(key=lambda v: (v.severity, v.test_id))
    return Report(
        title=title,
        generated_at=generated_at,
        sources=results.sources,
        environments=tuple((e.fingerprint, e.hard) for e in results.environments),
        tests=tuple(views),
        effects=tuple(effect_row(e) for e in results.effects),
    )

"""The model <-> plain dicts: the only place where the model meets JSON.

Every stored document (baselines, ``--tfperf-json`` results) goes through the
functions here, so a field is named, typed and validated in one place (each
value read through ``fields``, strictly; whole documents are ``documents``').

Conventions of the stored form:

- mappings (hard/soft environment keys, extra metrics, diagnosis figures) are
  JSON objects; they load back sorted by name;
- floats that JSON cannot hold (NaN, +/-inf) are stored as the strings
  ``"nan"``, ``"inf"`` and ``"-inf"``;
- per-iteration samples are stored per round (``rounds_ns``), bounded to
  ``max_samples`` by ``subsample_timings``; ``iterations_measured`` keeps the
  true count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_tfperf import stats
from pytest_tfperf.model import (
    TRACE_COUNTING_UNITS,
    TRACES_BETWEEN_ROUNDS,
    Diagnosis,
    Environment,
    GpuBusy,
    Measurement,
    MemoryPeak,
    MemorySource,
    Timings,
)
from pytest_tfperf.storage.fields import (
    Field,
    JsonDict,
    describe_value,
    read_float,
    read_float_map,
    read_int,
    read_list,
    read_object,
    read_optional_int,
    read_optional_str,
    read_str,
    read_str_map,
    write_float,
)
from pytest_tfperf.storage.runs import RECORD, REFRESH, RunSummary


def _float_map_to_dict(pairs: Sequence[tuple[str, float]], what: str) -> JsonDict:
    out: JsonDict = {}
    for name, value in pairs:
        if name in out:
            raise ValueError(f"{what} has the name {name!r} twice; names must be unique to be stored")
        out[name] = write_float(value)
    return out


# --------------------------------------------------------------------------- samples


def subsample_timings(timings: Timings, max_samples: int) -> Timings:
    """At most ``max_samples`` samples, keeping every round and its order.

    The gate's statistics resample whole rounds, so rounds are what must
    survive: each round keeps a share of ``max_samples`` proportional to its
    size (at least one sample), taken at evenly spaced positions, which keeps
    slow episodes in proportion. Dropping whole rounds instead would not bound
    the size (one round can hold a million fast iterations) and would leave
    fewer rounds to resample. Only when there are more rounds than
    ``max_samples`` are whole rounds dropped, evenly spaced.
    """
    if max_samples < 1:
        raise ValueError(f"max_samples must be at least 1, got {max_samples}")
    if timings.iterations <= max_samples:
        return timings
    rounds = [r for r in timings.rounds if r]
    if len(rounds) > max_samples:
        step = len(rounds) / max_samples
        rounds = [rounds[int(i * step)] for i in range(max_samples)]
    total = sum(len(r) for r in rounds)
    quotas = [min(len(r), max(1, len(r) * max_samples // total)) for r in rounds]
    while sum(quotas) > max_samples:
        largest = max(range(len(quotas)), key=lambda i: quotas[i])
        quotas[largest] -= 1
    kept: list[tuple[int, ...]] = []
    for r, k in zip(rounds, quotas):
        n = len(r)
        kept.append(tuple(r[(2 * j + 1) * n // (2 * k)] for j in range(k)))
    return Timings(
        samples_ns=tuple(s for r in kept for s in r),
        round_sizes=tuple(len(r) for r in kept),
        items_per_iteration=timings.items_per_iteration,
        first_call_ns=timings.first_call_ns,
        measured_iterations=timings.iterations_measured,  # what was measured, not what is kept
    )


# --------------------------------------------------------------------------- model <-> dict


def timings_to_dict(timings: Timings, *, max_samples: int | None = None) -> JsonDict:
    stored = timings if max_samples is None else subsample_timings(timings, max_samples)
    return {
        "first_call_ns": timings.first_call_ns,
        "items_per_iteration": write_float(timings.items_per_iteration),
        "iterations_measured": timings.iterations_measured,
        "rounds_ns": [list(r) for r in stored.rounds],
    }


def timings_from_dict(value: object, where: Field) -> Timings:
    data = read_object(value, where, ("first_call_ns", "items_per_iteration", "iterations_measured", "rounds_ns"))
    rounds: list[tuple[int, ...]] = []
    for i, raw_round in enumerate(read_list(data["rounds_ns"], where.key("rounds_ns"))):
        round_field = where.key("rounds_ns").index(i)
        samples = read_list(raw_round, round_field)
        rounds.append(tuple(read_int(s, round_field.index(j)) for j, s in enumerate(samples)))
    kept = sum(len(r) for r in rounds)
    if kept == 0:
        raise where.key("rounds_ns").error("holds no samples")
    measured = read_int(data["iterations_measured"], where.key("iterations_measured"), minimum=1)
    if measured < kept:
        raise where.key("iterations_measured").error(f"is {measured}, fewer than the {kept} samples stored")
    items = read_float(data["items_per_iteration"], where.key("items_per_iteration"))
    if not (items > 0 and math.isfinite(items)):
        raise where.key("items_per_iteration").error(f"must be a positive number, found {items}")
    return Timings(
        samples_ns=tuple(s for r in rounds for s in r),
        round_sizes=tuple(len(r) for r in rounds),
        items_per_iteration=items,
        first_call_ns=read_int(data["first_call_ns"], where.key("first_call_ns")),
        # Kept: a rate per iteration (the trace verdict's) needs the iterations run, not the samples kept.
        measured_iterations=measured if measured > kept else 0,
    )


def memory_peak_to_dict(peak: MemoryPeak) -> JsonDict:
    out = _memory_peak_core(peak)
    if peak.per_round_start_bytes:  # optional within schema 1: files without it stay byte-identical
        out["per_round_start_bytes"] = list(peak.per_round_start_bytes)
    if peak.scope:  # NVML only (optional, as above): which figure it is, this process's or the whole device's
        out["scope"] = peak.scope
    if peak.detail:
        out["detail"] = peak.detail
    return out


def _memory_peak_core(peak: MemoryPeak) -> JsonDict:
    return {
        "baseline_bytes": peak.baseline_bytes,
        "device": peak.device,
        "peak_bytes": peak.peak_bytes,
        "per_round_peak_bytes": list(peak.per_round_peak_bytes),
        "source": peak.source.value,
        "unavailable": peak.unavailable,
    }


def memory_peak_from_dict(value: object, where: Field) -> MemoryPeak:
    data = read_object(value, where, ("device", "peak_bytes", "source"),
                       ("baseline_bytes", "per_round_peak_bytes", "per_round_start_bytes", "unavailable",
                        "scope", "detail"))
    source_text = read_str(data["source"], where.key("source"))
    try:
        source = MemorySource(source_text)
    except ValueError:
        known = ", ".join(repr(s.value) for s in MemorySource)
        raise where.key("source").error(f"unknown memory source {source_text!r} (known: {known})") from None
    per_round_field = where.key("per_round_peak_bytes")
    per_round = read_list(data.get("per_round_peak_bytes", []), per_round_field)
    starts_field = where.key("per_round_start_bytes")
    starts = read_list(data.get("per_round_start_bytes", []), starts_field)
    peak = read_optional_int(data["peak_bytes"], where.key("peak_bytes"))
    unavailable = read_optional_str(data.get("unavailable"), where.key("unavailable"))
    if (peak is None) == (unavailable is None):
        raise where.error("needs exactly one of 'peak_bytes' and 'unavailable'")
    return MemoryPeak(
        source=source,
        device=read_str(data["device"], where.key("device")),
        peak_bytes=peak,
        baseline_bytes=read_optional_int(data.get("baseline_bytes"), where.key("baseline_bytes")),
        per_round_peak_bytes=tuple(read_int(v, per_round_field.index(i)) for i, v in enumerate(per_round)),
        unavailable=unavailable,
        # Added in 0.1.0 within schema 1 (optional, so older files still load).
        per_round_start_bytes=tuple(read_int(v, starts_field.index(i)) for i, v in enumerate(starts)),
        scope=_read_scope(data.get("scope", ""), where.key("scope")),
        detail=read_str(data.get("detail", ""), where.key("detail"), non_empty=False),
    )


def _read_scope(value: object, where: Field) -> str:
    text = read_str(value, where, non_empty=False)
    if text not in ("", "process", "device"):
        raise where.error(f"expected 'process' or 'device', found {text!r}")
    return text


def gpu_busy_to_dict(busy: GpuBusy) -> JsonDict:
    out: JsonDict = {
        "device": busy.device,
        "fraction": None if busy.fraction is None else _readable(busy.fraction),  # informational, like "summary"
        "per_round_fraction": [write_float(v) for v in busy.per_round_fraction],
        "per_round_process_fraction": [None if v is None else write_float(v) for v in busy.per_round_process_fraction],
        "process_fraction": None if busy.process_fraction is None else _readable(busy.process_fraction),
        "process_on_gpu": busy.process_on_gpu,
        "samples": busy.samples,
    }
    if busy.unavailable is not None:
        out["unavailable"] = busy.unavailable
    if busy.process_unavailable is not None:
        out["process_unavailable"] = busy.process_unavailable
    return out


def gpu_busy_from_dict(value: object, where: Field) -> GpuBusy:
    data = read_object(value, where, ("device",), ("fraction", "per_round_fraction", "per_round_process_fraction",
                                                   "process_fraction", "process_on_gpu", "samples", "unavailable",
                                                   "process_unavailable"))
    rounds_field, process_field = where.key("per_round_fraction"), where.key("per_round_process_fraction")
    rounds = read_list(data.get("per_round_fraction", []), rounds_field)
    process = read_list(data.get("per_round_process_fraction", []), process_field)
    on_gpu = data.get("process_on_gpu")
    if on_gpu is not None and not isinstance(on_gpu, bool):
        raise where.key("process_on_gpu").error(f"expected true, false or null, found {describe_value(on_gpu)}")
    try:
        return GpuBusy(
            device=read_str(data["device"], where.key("device")),
            per_round_fraction=tuple(read_float(v, rounds_field.index(i)) for i, v in enumerate(rounds)),
            per_round_process_fraction=tuple(None if v is None else read_float(v, process_field.index(i))
                                             for i, v in enumerate(process)),
            unavailable=read_optional_str(data.get("unavailable"), where.key("unavailable")),
            process_unavailable=read_optional_str(data.get("process_unavailable"), where.key("process_unavailable")),
            process_on_gpu=on_gpu,
            samples=read_int(data.get("samples", 0), where.key("samples")),
        )
    except ValueError as exc:
        raise where.error(str(exc)) from None


def diagnosis_to_dict(diagnosis: Diagnosis) -> JsonDict:
    return {
        "figures": _float_map_to_dict(diagnosis.figures, f"diagnosis {diagnosis.kind!r} figures"),
        "kind": diagnosis.kind,
        "severity": diagnosis.severity,
        "summary": diagnosis.summary,
    }


def diagnosis_from_dict(value: object, where: Field) -> Diagnosis:
    data = read_object(value, where, ("kind", "severity", "summary"), ("figures",))
    return Diagnosis(
        kind=read_str(data["kind"], where.key("kind")),
        severity=read_str(data["severity"], where.key("severity")),
        summary=read_str(data["summary"], where.key("summary"), non_empty=False),
        figures=read_float_map(data.get("figures", {}), where.key("figures")),
    )


@dataclass(frozen=True, slots=True)
class TimingsSummary:
    """The headline figures of ``Timings``, from all of its samples."""

    iterations: int
    rounds: int
    median_ns: float
    p95_ns: float
    cv: float
    throughput_per_s: float
    round_throughputs_per_s: tuple[float, ...]


def summarize_timings(timings: Timings) -> TimingsSummary:
    """Same figures as ``Timings``' properties (same definitions as ``stats``), sorting the samples once.

    A fast workload leaves hundreds of thousands of samples, and baselines,
    results and history each need these figures for every test; the
    properties sort the samples five times, this sorts them once (about 25 ms
    for 200,000 samples instead of 160 ms). Not cached: a cache would keep
    every session's samples alive.
    """
    ordered = sorted(timings.samples_ns)
    median = stats.sorted_percentile(ordered, 50.0)
    mad = stats.sorted_mad(ordered, median)
    return TimingsSummary(
        iterations=len(ordered),
        rounds=len(timings.round_sizes),
        median_ns=median,
        p95_ns=stats.sorted_percentile(ordered, 95.0),
        cv=0.0 if median == 0 else 1.4826 * mad / abs(median),
        throughput_per_s=math.inf if median == 0 else timings.items_per_iteration * 1e9 / median,
        round_throughputs_per_s=timings.round_throughputs_per_s,
    )


def measurement_summary(measurement: Measurement) -> JsonDict:
    """Figures a reviewer reads in a diff, computed from all samples (not the stored subset).

    Informational only: loading ignores them and recomputes from the samples.
    """
    t = summarize_timings(measurement.timings)
    return {
        "cv": _readable(t.cv),
        "iterations": t.iterations,
        "median_ns": _readable(t.median_ns),
        "p95_ns": _readable(t.p95_ns),
        "round_throughputs_per_s": [_readable(v) for v in t.round_throughputs_per_s],
        "rounds": t.rounds,
        "throughput_per_s": _readable(t.throughput_per_s),
    }


def _readable(value: float) -> float | int | str:
    # Six significant digits: the summary is read by people, the samples keep full precision.
    if not math.isfinite(value) or value == 0:
        return write_float(value)
    return write_float(round(value, 5 - math.floor(math.log10(abs(value)))))


def measurement_to_dict(measurement: Measurement, *, max_samples: int | None = None) -> JsonDict:
    """The stored form of a measurement; ``max_samples`` bounds the per-iteration samples kept."""
    out = {
        "diagnoses": [diagnosis_to_dict(d) for d in measurement.diagnoses],
        "environment_id": measurement.environment_id,
        "extra_metrics": _float_map_to_dict(measurement.extra_metrics, f"{measurement.test_id}: extra_metrics"),
        "memory": [memory_peak_to_dict(p) for p in measurement.memory],
        "mode": measurement.mode,
        "summary": measurement_summary(measurement),
        "test_id": measurement.test_id,
        "timings": timings_to_dict(measurement.timings, max_samples=max_samples),
        "traces_first_call": measurement.traces_first_call,
        "traces_steady": measurement.traces_steady,
    }
    if measurement.gpu_busy:  # optional within schema 1, like per_round_start_bytes: CPU-only files are unchanged
        out["gpu_busy"] = [gpu_busy_to_dict(g) for g in measurement.gpu_busy]
    if measurement.trace_counting != TRACES_BETWEEN_ROUNDS:
        # Optional as above: every file so far was counted between rounds; a reader that does not know
        # another way of counting refuses the file rather than judge its traces in the wrong unit.
        out["trace_counting"] = measurement.trace_counting
    return out


_MEASUREMENT_KEYS = ("environment_id", "mode", "test_id", "timings")
_MEASUREMENT_OPTIONAL_KEYS = ("diagnoses", "extra_metrics", "gpu_busy", "memory", "summary", "trace_counting",
                              "traces_first_call", "traces_steady")


def measurement_from_dict(value: object, where: Field) -> Measurement:
    data = read_object(value, where, _MEASUREMENT_KEYS, _MEASUREMENT_OPTIONAL_KEYS)
    if not isinstance(data.get("summary", {}), dict):
        raise where.key("summary").error("expected an object")
    memory = read_list(data.get("memory", []), where.key("memory"))
    diagnoses = read_list(data.get("diagnoses", []), where.key("diagnoses"))
    counting = read_str(data.get("trace_counting", TRACES_BETWEEN_ROUNDS), where.key("trace_counting"))
    if counting not in TRACE_COUNTING_UNITS:
        raise where.key("trace_counting").error(
            f"is {counting!r}, a way of counting traces this pytest-tfperf does not know "
            f"({', '.join(sorted(TRACE_COUNTING_UNITS))}): it was written by a newer version")
    return Measurement(
        test_id=read_str(data["test_id"], where.key("test_id")),
        mode=read_str(data["mode"], where.key("mode")),
        timings=timings_from_dict(data["timings"], where.key("timings")),
        memory=tuple(memory_peak_from_dict(p, where.key("memory").index(i)) for i, p in enumerate(memory)),
        traces_first_call=read_optional_int(data.get("traces_first_call"), where.key("traces_first_call")),
        traces_steady=read_optional_int(data.get("traces_steady"), where.key("traces_steady")),
        diagnoses=tuple(diagnosis_from_dict(d, where.key("diagnoses").index(i)) for i, d in enumerate(diagnoses)),
        extra_metrics=read_float_map(data.get("extra_metrics", {}), where.key("extra_metrics")),
        environment_id=read_str(data["environment_id"], where.key("environment_id"), non_empty=False),
        gpu_busy=tuple(gpu_busy_from_dict(g, where.key("gpu_busy").index(i))
                       for i, g in enumerate(read_list(data.get("gpu_busy", []), where.key("gpu_busy")))),
        trace_counting=counting,
    )


def run_summary_to_dict(run: RunSummary) -> JsonDict:
    return {
        "git_commit": run.git_commit,
        "kind": run.kind,
        "memory_added_bytes": {name: value for name, value in run.memory_added_bytes},
        "recorded_at": run.recorded_at,
        "run_id": run.run_id,
        "throughput_per_s": write_float(run.throughput_per_s),
        "traces_steady": run.traces_steady,
    }


def run_summary_from_dict(value: object, where: Field) -> RunSummary:
    data = read_object(value, where, ("kind", "recorded_at", "run_id", "throughput_per_s"),
                       ("git_commit", "memory_added_bytes", "traces_steady"))
    kind = read_str(data["kind"], where.key("kind"))
    if kind not in (REFRESH, RECORD):
        raise where.key("kind").error(f"expected {REFRESH!r} or {RECORD!r}, found {describe_value(kind)}")
    memory = data.get("memory_added_bytes", {})
    if not isinstance(memory, dict):
        raise where.key("memory_added_bytes").error("expected an object of byte counts")
    return RunSummary(
        run_id=read_str(data["run_id"], where.key("run_id")),
        recorded_at=read_str(data["recorded_at"], where.key("recorded_at"), non_empty=False),
        kind=kind,
        throughput_per_s=read_float(data["throughput_per_s"], where.key("throughput_per_s")),
        memory_added_bytes=tuple(sorted((str(k), read_int(v, where.key("memory_added_bytes").key(str(k)), minimum=None))
                                        for k, v in memory.items())),
        traces_steady=read_optional_int(data.get("traces_steady"), where.key("traces_steady")),
        git_commit=read_str(data.get("git_commit", ""), where.key("git_commit"), non_empty=False),
    )


def environment_to_dict(environment: Environment) -> JsonDict:
    hard = dict(environment.hard)
    soft = dict(environment.soft)
    if len(hard) != len(environment.hard) or len(soft) != len(environment.soft):
        raise ValueError("an environment has the same key twice; keys must be unique to be stored")
    return {"fingerprint": environment.fingerprint, "hard": hard, "soft": soft}


def environment_from_dict(value: object, where: Field) -> Environment:
    data = read_object(value, where, ("fingerprint", "hard"), ("soft",))
    environment = Environment(
        hard=read_str_map(data["hard"], where.key("hard")),
        soft=read_str_map(data.get("soft", {}), where.key("soft")),
    )
    stored = read_str(data["fingerprint"], where.key("fingerprint"))
    if stored != environment.fingerprint:
        raise where.key("fingerprint").error(
            f"is {stored!r} but the hard keys hash to {environment.fingerprint!r}: the hard keys were edited"
            " by hand or the file comes from an incompatible pytest-tfperf"
        )
    return environment



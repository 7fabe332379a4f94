"""Immutable results of a measurement.

Everything here is plain data: no pytest, no TensorFlow, no I/O. Units live in
field names (``_ns``, ``_bytes``, ``_per_s``) so that no unit-less float crosses
a module boundary. Dicts appear only at the serialisation edge (``results_json``
and ``baseline_store``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from pytest_tfperf import stats


class Direction(str, enum.Enum):
    """Which way a metric gets worse."""

    HIGHER_IS_BETTER = "higher_is_better"  # throughput
    LOWER_IS_BETTER = "lower_is_better"  # memory, time, traces


class MemorySource(str, enum.Enum):
    """Where a peak-memory figure comes from; each has its own precision."""

    TF_ALLOCATOR = "tf_allocator"  # exact for tensors >= 256 KiB on the default CPU allocator
    RSS_HWM = "rss_hwm"  # Linux VmHWM after clear_refs: exact, includes Python and numpy
    RSS_SAMPLED = "rss_sampled"  # psutil polling thread: can miss short spikes
    NVML = "nvml"  # device memory used, sampled: includes the allocator's pool


@dataclass(frozen=True, slots=True)
class MemoryPeak:
    """Peak memory of one device, measured over the steady-state phase.

    ``peak_bytes`` is ``None`` when the probe could not measure; ``unavailable``
    then says why (stats disabled, no NVML driver, ...), so a missing figure is
    reported, never silently zero.
    """

    source: MemorySource
    device: str  # "CPU:0", "GPU:0", "host"
    peak_bytes: int | None
    baseline_bytes: int | None = None  # in use when the first round began
    per_round_peak_bytes: tuple[int, ...] = ()
    unavailable: str | None = None
    per_round_start_bytes: tuple[int, ...] = ()  # in use when each round began (the peak was reset)
    # Which figure it is, for sources that can measure more than this process: NVML reads this process's
    # memory when its pid is in the driver's list, else the whole device's (all processes). "" otherwise.
    scope: str = ""  # "process", "device" or ""
    detail: str = ""  # the probe's own words on what it measured (which figure, how sampled)

    def __post_init__(self) -> None:
        if (self.peak_bytes is None) == (self.unavailable is None):
            raise ValueError("MemoryPeak needs exactly one of peak_bytes or unavailable")
        if self.scope not in ("", "process", "device"):
            raise ValueError(f"MemoryPeak scope must be 'process', 'device' or '', got {self.scope!r}")

    @property
    def metric_name(self) -> str:
        return f"peak_{self.source.value}[{self.device}]"

    @property
    def available(self) -> bool:
        return self.peak_bytes is not None

    @property
    def per_round_added_bytes(self) -> tuple[int, ...]:
        """What each round added above the memory in use when it began.

        This is the workload's own peak: unlike the absolute peak it does not
        depend on what earlier tests, or another variant interleaved with this
        one, left alive. Old records without per-round starts fall back to
        the first round's start.
        """
        if self.per_round_start_bytes and len(self.per_round_start_bytes) == len(self.per_round_peak_bytes):
            return tuple(p - s for p, s in zip(self.per_round_peak_bytes, self.per_round_start_bytes))
        if self.baseline_bytes is not None:
            return tuple(p - self.baseline_bytes for p in self.per_round_peak_bytes)
        return self.per_round_peak_bytes

    @property
    def added_bytes(self) -> int | None:
        """The largest per-round peak above the round's starting point (None if unavailable)."""
        if self.peak_bytes is None:
            return None
        added = self.per_round_added_bytes
        if added:
            return max(added)
        return self.peak_bytes - (self.baseline_bytes or 0)


@dataclass(frozen=True, slots=True)
class GpuBusy:
    """How busy one GPU was during the measured rounds, from NVML's utilisation counter.

    ``per_round_fraction`` is, per round, the mean of NVML's device-wide
    "a kernel was running" percentage (``nvmlDeviceGetUtilizationRates().gpu``,
    all processes), read by the memory probe's sampler. The counter covers a
    trailing window of 1/6 s to 1 s depending on the board, so a round shorter
    than that partly reads the time before it. ``per_round_process_fraction``
    is this process's SM share (``nvmlDeviceGetProcessUtilization``), ``None``
    for a round where NVML held no sample of this process. Either is empty,
    with the reason in ``unavailable`` / ``process_unavailable``, when NVML
    cannot say.
    """

    device: str  # "GPU:0"
    per_round_fraction: tuple[float, ...] = ()
    per_round_process_fraction: tuple[float | None, ...] = ()
    unavailable: str | None = None
    process_unavailable: str | None = None
    # True: this process was in NVML's list of compute processes on this GPU during a round; False: the
    # list was empty (no process had a CUDA context there); None: unknown (not listed among others, which
    # is also what a container without --pid=host shows).
    process_on_gpu: bool | None = None
    samples: int = 0  # device-wide readings over all rounds

    def __post_init__(self) -> None:
        if bool(self.per_round_fraction) == (self.unavailable is not None):
            raise ValueError("GpuBusy needs exactly one of per_round_fraction or unavailable")
        for value in (*self.per_round_fraction, *(v for v in self.per_round_process_fraction if v is not None)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"GpuBusy fractions must lie in [0, 1], got {value!r}")

    @property
    def available(self) -> bool:
        return self.unavailable is None

    @property
    def fraction(self) -> float | None:
        """The median round's device-wide busy fraction (None if unavailable)."""
        return stats.median(self.per_round_fraction) if self.per_round_fraction else None

    @property
    def process_fraction(self) -> float | None:
        """The median round's share of this process, over the rounds that have one (None if none has)."""
        values = [v for v in self.per_round_process_fraction if v is not None]
        return stats.median(values) if values else None


@dataclass(frozen=True, slots=True)
class Timings:
    """Per-iteration wall times of the steady state, in nanoseconds.

    Iterations are grouped in rounds (``round_sizes``); the statistics of the
    gate resample whole rounds, because TensorFlow's slow episodes last longer
    than one iteration.
    """

    samples_ns: tuple[int, ...]
    round_sizes: tuple[int, ...]
    items_per_iteration: float
    first_call_ns: int
    # Iterations measured, where the samples are a subsample of them (a stored file keeps at most a few
    # thousand, serialization.subsample_timings); 0: every measured iteration is here.
    measured_iterations: int = 0

    def __post_init__(self) -> None:
        if not self.samples_ns:
            raise ValueError("Timings needs at least one sample")
        if sum(self.round_sizes) != len(self.samples_ns):
            raise ValueError("round_sizes must add up to the number of samples")
        if self.measured_iterations and self.measured_iterations < len(self.samples_ns):
            raise ValueError("measured_iterations cannot be fewer than the samples kept")
        if self.items_per_iteration <= 0:
            raise ValueError("items_per_iteration must be positive")
        if any(s < 0 for s in self.samples_ns):
            raise ValueError("a sample is negative: the clock went backwards")

    @property
    def iterations(self) -> int:
        """Samples held: every iteration measured, or the subsample a stored file kept."""
        return len(self.samples_ns)

    @property
    def iterations_measured(self) -> int:
        """Iterations the measurement ran, including those a stored file dropped from its samples."""
        return self.measured_iterations or len(self.samples_ns)

    @property
    def median_ns(self) -> float:
        return stats.median(self.samples_ns)

    @property
    def throughput_per_s(self) -> float:
        """Items per second at the median iteration time."""
        med = self.median_ns
        return float("inf") if med == 0 else self.items_per_iteration * 1e9 / med

    @property
    def rounds(self) -> tuple[tuple[int, ...], ...]:
        out: list[tuple[int, ...]] = []
        start = 0
        for size in self.round_sizes:
            out.append(self.samples_ns[start : start + size])
            start += size
        return tuple(out)

    @property
    def round_throughputs_per_s(self) -> tuple[float, ...]:
        """Throughput of each round (items / summed round time)."""
        out = []
        for r in self.rounds:
            total = sum(r)
            out.append(float("inf") if total == 0 else self.items_per_iteration * len(r) * 1e9 / total)
        return tuple(out)

    @property
    def cv(self) -> float:
        """Robust coefficient of variation of per-iteration times (1.4826 MAD / median)."""
        return stats.robust_cv(self.samples_ns)

    def latency_percentile_ns(self, q: float) -> float:
        return stats.percentile(self.samples_ns, q)


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """A finding about why a workload behaves as it does, in words and numbers.

    ``summary`` is the plain-words sentence shown first; ``figures`` carries the
    numbers behind it (keys carry their unit).
    """

    kind: str  # "input_bound", "memory_growth", "stall", "oom", "non_finite", "retracing", ...
    severity: str  # "info", "warning", "failure"
    summary: str
    figures: tuple[tuple[str, float], ...] = ()


# How the harness counts a measurement's steady-state traces (``Measurement.trace_counting``), and so what
# the count grows with, which the trace verdict (compare._judge_traces) scales by:
# - "between_rounds": the tf.functions a workload reaches are found before and after each round
#   (runner._timed_round, trace_count.TraceCounter). A function that retraces itself is counted on every
#   trace (a count per iteration); one replaced on every call (model.compile() in the loop) is seen once
#   a round, its predecessors never (a count per round); one that traces a fixed number of times, once
#   (a count per process). The same workload counts differently with another budget or round count.
# - "each_trace": every trace is counted as it happens (trace_recorder.TraceRecorder, a callback TensorFlow
#   calls when it makes a new concrete function; it costs nothing on calls that do not trace). A function
#   replaced on every call counts once a call like one that retraces itself (a count per iteration); one
#   that traces a fixed number of times, once (a count per process). Rounds play no part.
TRACES_BETWEEN_ROUNDS = "between_rounds"
TRACES_EACH = "each_trace"
TRACE_COUNTING_UNITS: dict[str, tuple[str, ...]] = {
    TRACES_BETWEEN_ROUNDS: ("process", "round", "iteration"),
    TRACES_EACH: ("process", "iteration"),
}


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One trace of a ``tf.function`` after warm-up, and what TensorFlow said made it trace.

    ``function`` is the Python function's qualified name, ``location`` its ``file:line``;
    ``cause`` is one of ``TRACE_CAUSES``; ``changed`` names what changed without its values
    (``"x: shape"``, the key traces are grouped by) and ``detail`` says it with them
    (``"x: shape (2, 3) -> (5, 3)"``); both empty where TensorFlow does not expose it.
    """

    function: str
    location: str
    cause: str
    changed: str = ""
    detail: str = ""


# "arguments": an argument's shape, dtype or Python value differs from the function's previous trace;
# "new_function": a new tf.function object around a Python function traced before (built in the step);
# "first_call": a tf.function called for the first time after warm-up;
# "context": the same arguments, traced again for another context (device, graph, captured values);
# "unknown": TensorFlow did not expose which function traced or why.
TRACE_CAUSES = ("arguments", "new_function", "first_call", "context", "unknown")


@dataclass(frozen=True, slots=True)
class Measurement:
    """Everything one ``tfperf`` call measured for one test."""

    test_id: str
    mode: str  # "call" or "iterate"
    timings: Timings
    memory: tuple[MemoryPeak, ...] = ()
    traces_first_call: int | None = None  # tf.function traces during the warm-up
    traces_steady: int | None = None  # traces during the measured phase: should be 0
    diagnoses: tuple[Diagnosis, ...] = ()
    # Gateable scalar metrics found by diagnostics (e.g. "input_bound_fraction",
    # "memory_growth_bytes_per_iteration"), with their units in the name.
    extra_metrics: tuple[tuple[str, float], ...] = ()
    environment_id: str = ""  # hash of the hard keys of the environment fingerprint
    gpu_busy: tuple[GpuBusy, ...] = ()  # one per GPU that NVML sampled; empty without NVML
    trace_counting: str = TRACES_BETWEEN_ROUNDS  # how traces_steady was counted: see TRACE_COUNTING_UNITS

    @property
    def throughput_per_s(self) -> float:
        """Items per second at the median iteration time."""
        return self.timings.throughput_per_s

    @property
    def throughput(self) -> float:
        """Items per second (alias of ``throughput_per_s``, the name users reach for)."""
        return self.timings.throughput_per_s

    @property
    def first_call_s(self) -> float:
        """Wall time of the first call, where tracing and compilation happen."""
        return self.timings.first_call_ns / 1e9

    @property
    def median_s(self) -> float:
        return self.timings.median_ns / 1e9

    def latency_s(self, q: float) -> float:
        """Per-iteration latency percentile ``q`` (0-100), in seconds."""
        return self.timings.latency_percentile_ns(q) / 1e9

    def memory_peak(self, source: MemorySource, device: str | None = None) -> MemoryPeak | None:
        for peak in self.memory:
            if peak.source is source and (device is None or peak.device == device):
                return peak
        return None

    def extra(self, name: str) -> float | None:
        for key, value in self.extra_metrics:
            if key == name:
                return value
        return None


@dataclass(frozen=True, slots=True)
class Environment:
    """Where a measurement was taken.

    ``hard`` keys must match for two results to be compared (device model, TF
    version, CPU model, cores, Python minor, threads); ``soft`` keys are shown
    when they differ but never block a comparison (kernel, host name).
    """

    hard: tuple[tuple[str, str], ...]
    soft: tuple[tuple[str, str], ...] = ()

    @property
    def fingerprint(self) -> str:
        import hashlib

        text = "\n".join(f"{k}={v}" for k, v in sorted(self.hard))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def hard_dict(self) -> dict[str, str]:
        return dict(self.hard)

    def soft_dict(self) -> dict[str, str]:
        return dict(self.soft)

    def differences(self, current: Environment, *, hard: bool) -> tuple[KeyDifference, ...]:
        """The hard (or soft) keys whose values differ from ``current``'s, sorted by key; absent keys as None.

        The one comparison of two environments: the baseline store's match,
        ``tfperf-compare``'s environment lines and the fingerprint tests use it.
        """
        stored, now = (self.hard_dict(), current.hard_dict()) if hard else (self.soft_dict(), current.soft_dict())
        return tuple(KeyDifference(key, stored.get(key), now.get(key))
                     for key in sorted(stored.keys() | now.keys()) if stored.get(key) != now.get(key))


@dataclass(frozen=True, slots=True)
class KeyDifference:
    """One environment key that differs between a stored environment and the current one (``None``: absent)."""

    key: str
    stored: str | None
    current: str | None

    def describe(self, stored_label: str = "there", current_label: str = "here") -> str:
        return f"{self.key} ({_shown(self.stored)} {stored_label}, {_shown(self.current)} {current_label})"


def _shown(value: str | None) -> str:
    return "absent" if value is None else repr(value)


def same_environment(a: str, b: str) -> bool:
    """Whether two environment fingerprints allow comparing what was measured in them: equal, or one unknown ("")."""
    return not a or not b or a == b


@dataclass(frozen=True, slots=True)
class BudgetViolation:
    """An absolute limit from the marker that a measurement crossed."""

    metric: str
    limit: float
    measured: float
    unit: str
    note: str = ""  # what the limit was compared with, when that is not obvious (absolute peak vs added)

    def message(self) -> str:
        measured, limit = format_value(self.measured, self.unit), format_value(self.limit, self.unit)
        text = f"{self.metric}: measured {measured}, limit {limit}"
        return f"{text} ({self.note})" if self.note else text


def format_value(value: float, unit: str) -> str:
    """A figure with its unit as the reports write it: MiB for bytes, a percentage for a fraction."""
    if unit == "bytes":
        return f"{value / 2**20:,.1f} MiB"
    if unit == "items/s":
        return f"{value:,.1f} items/s"
    if unit == "bytes/iteration":
        return f"{value / 2**10:,.1f} KiB/iteration"
    if unit == "fraction":
        return f"{value:.1%}"
    return f"{value:g} {unit}".strip()


def readable_bytes(value: float) -> str:
    """Bytes in the largest binary unit they reach: '1.5 GiB', '300.0 KiB', '12 B'."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= scale:
            return f"{value / scale:,.1f} {unit}"
    return f"{value:,.0f} B"


def readable_duration(seconds: float, *, microsecond_digits: int = 1) -> str:
    """A duration in the unit that reads best: '1.25 s', '3.4 ms', '120.0 µs' (``microsecond_digits``
    after the point)."""
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.{microsecond_digits}f} µs"

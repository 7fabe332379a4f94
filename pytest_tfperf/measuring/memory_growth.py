"""Memory growth across measured iterations: a slope with its confidence, and when to call it a leak.

The runner reads memory *in use* (not a peak) between chunks of measured
iterations: the process RSS and, where TensorFlow keeps statistics, each
device's allocator ``current``. A pipeline that keeps what it no longer needs
(a list of step outputs, a cache that never evicts, variables created in the
loop) shows a steady slope; one that releases it shows none.

Readings come round by round, and other variants (or the input-bound split's
extra phases) run between two rounds of the same variant, so their growth
would appear as jumps between rounds. The slope is therefore fitted *within*
rounds, each round with its own intercept, and pooled: only the growth during
this variant's own iterations counts.

A flat pipeline must not be flagged, yet RSS creeps a little even then (about
0.2 KiB per iteration measured for a clean eager loop, research Q3e), and the
allocator's pool can grow once in a step. A growth is therefore flagged only
when it is (1) statistically significant (the 95% interval of the slope
excludes zero), (2) at least ``GROWTH_FLOOR_BYTES`` per iteration (1 MiB per
iteration of retained tensors measured 1,071 KiB against 0.2 for the fix, so
64 KiB separates them cleanly), and (3) steady: more than half of the rounds
grow on their own, which a one-time step of the pool never does.

Warm-up is not a leak. A real model's RSS rises for its first tens to
hundreds of steps (allocator arenas, oneDNN primitive caches, autotuning:
2,112 KiB per iteration over steps 2-25 of EfficientNetB0, 4 KiB per
iteration over steps 201-1,200), and a measurement of a few seconds can lie
entirely inside that rise. So the verdict reads the *later half* of the
readings (``GrowthVerdict.late``) and asks that growth persist there at no
less than half the early rate (a leak keeps its pace; a warm-up slows down).
When the data so far would accuse, the runner first measures longer
(``confirmation_iterations``): as many untimed iterations again as it ran
(at least ``CONFIRM_MIN_ITERATIONS``, and on to ``CONFIRM_PAST_ITERATIONS``
since the first call), so that the later half lies after them, and the
verdict is taken on everything. Growth before the later half
is reported as warm-up ("process RSS grew 27 MiB in the first 212
iterations, then flat").

The gateable metric (``memory_growth_bytes_per_iteration``) is the later
half's slope where it persists, else 0: the same number the diagnosis
judges, so a budget and the diagnosis never disagree.

Pure computation, except the two readers at the end, which read
``/proc/self/statm`` and TensorFlow's counters (TensorFlow only when the
workload already imported it).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pytest_tfperf import stats
from pytest_tfperf.model import MemorySource

GROWTH_FLOOR_BYTES = 64 * 1024  # per iteration: below this, growth is creep, not a leak
TARGET_READINGS = 64  # per variant: enough for the slope, few enough to cost nothing (~2 us a reading)
CONFIDENCE = 0.95
# A leak keeps its pace; warm-up slows down. The later half must grow at no
# less than this share of the earlier half's rate to count as persistent.
PERSISTENCE = 0.5
# Measuring longer before accusing: at least this many untimed iterations,
# and as many again as were measured, within the time below.
CONFIRM_MIN_ITERATIONS = 100
# ...and on to this many iterations since the first call, so that the later half starts past step 150: a
# keras.applications EfficientNetB0 train_on_batch (64 px, batch 16) grows its RSS for about 125 steps here
# (2.6 MiB a step over steps 1-25, 0.5 over 50-75, 0.1 over 100-125, flat from 150 to 1,200), and a
# confirmation that ended near step 160 read that rise as a leak in one main-job process of six.
CONFIRM_PAST_ITERATIONS = 300
CONFIRM_MIN_S = 45.0  # 300 steps of that model at 0.13 s each: 39 s
CONFIRM_BUDGET_MULTIPLE = 5.0
# A real leak needs no more proof once the confirmation alone has grown a counter this much; the machine is
# spared the rest (1 MiB a step over 300 steps would be 300 MiB).
CONFIRM_MAX_GROWTH_BYTES = 256 * 1024 * 1024
CONFIRM_READINGS = 32
# The confirming run is read as this many rounds, so that "steady" (most
# rounds grow on their own) means the same there as in the timed rounds:
# Keras's allocator creep comes in steps that leave most segments flat.
CONFIRM_SEGMENTS = 4


class MemoryReader(Protocol):
    """Reads memory in use now; ``None`` when it cannot (the series is then dropped)."""

    source: str  # "rss", "tf_allocator[CPU:0]": a metric-friendly name
    label: str  # "process RSS", "TF allocator on CPU:0": words for the report

    def read(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class MemorySeries:
    """Readings of one counter, each taken between two measured iterations of one variant."""

    source: str
    label: str
    iterations: tuple[int, ...]  # measured iterations of this variant done when read
    rounds: tuple[int, ...]  # the round each reading belongs to
    bytes_in_use: tuple[int, ...]
    # Read after the first call (tracing done), before the warm-up iterations:
    # the start of what the report calls warm-up growth. None: not read.
    after_first_call_bytes: int | None = None
    warmup_iterations: int = 0  # iterations between that reading and the first measured one
    confirmation_iterations: int = 0  # untimed iterations run at the end to confirm a growth

    def __post_init__(self) -> None:
        if not len(self.iterations) == len(self.rounds) == len(self.bytes_in_use):
            raise ValueError("MemorySeries needs as many iterations and rounds as readings")


@dataclass(frozen=True, slots=True)
class GrowthFit:
    """The pooled within-round slope of one series."""

    source: str
    label: str
    slope_bytes_per_iteration: float
    ci_low_bytes_per_iteration: float | None  # None: too few readings for an interval
    ci_high_bytes_per_iteration: float | None
    iterations: int  # measured iterations the readings span, all rounds together
    readings: int
    rounds: int  # rounds with at least two readings
    rounds_growing: int  # rounds whose own slope reaches half the floor

    @property
    def significant(self) -> bool:
        """The interval excludes zero on the growing side."""
        return self.ci_low_bytes_per_iteration is not None and self.ci_low_bytes_per_iteration > 0

    @property
    def steady(self) -> bool:
        return self.rounds > 0 and 2 * self.rounds_growing > self.rounds

    def leaking(self, floor_bytes: float = GROWTH_FLOOR_BYTES) -> bool:
        """Significant, large enough to matter, and steady: what the diagnosis flags."""
        return self.significant and self.slope_bytes_per_iteration >= floor_bytes and self.steady


def fit_growth(series: MemorySeries, *, floor_bytes: float = GROWTH_FLOOR_BYTES,
               confidence: float = CONFIDENCE) -> GrowthFit | None:
    """Slope of ``series`` over iterations, fitted within rounds; ``None`` without two readings in a round."""
    by_round: dict[int, list[tuple[int, int]]] = {}
    for x, r, y in zip(series.iterations, series.rounds, series.bytes_in_use):
        by_round.setdefault(r, []).append((x, y))
    rounds = [points for points in by_round.values() if len(points) >= 2 and len({x for x, _ in points}) >= 2]
    if not rounds:
        return None
    # Centre each round on its own means: the pooled slope of the centred
    # points is the within-round slope, and between-round jumps drop out.
    xs: list[float] = []
    ys: list[float] = []
    growing = 0
    for points in rounds:
        mx = math.fsum(x for x, _ in points) / len(points)
        my = math.fsum(y for _, y in points) / len(points)
        cx = [x - mx for x, _ in points]
        cy = [y - my for _, y in points]
        xs += cx
        ys += cy
        own = math.fsum(a * b for a, b in zip(cx, cy)) / math.fsum(a * a for a in cx)
        if own >= floor_bytes / 2:
            growing += 1
    fit = stats.linear_fit(xs, ys)
    n = len(xs)
    # linear_fit counts 2 fitted parameters; the within-round fit has one
    # intercept per round plus the slope.
    df = n - len(rounds) - 1
    ci_low = ci_high = None
    if df >= 1 and math.isfinite(fit.slope_stderr):
        stderr = fit.slope_stderr * math.sqrt((n - 2) / df) if n > 2 else math.inf
        if math.isfinite(stderr):
            half = stats.t_quantile(0.5 + confidence / 2, df) * stderr
            ci_low, ci_high = fit.slope - half, fit.slope + half
    span = sum(max(x for x, _ in points) - min(x for x, _ in points) for points in rounds)
    return GrowthFit(source=series.source, label=series.label, slope_bytes_per_iteration=fit.slope,
                     ci_low_bytes_per_iteration=ci_low, ci_high_bytes_per_iteration=ci_high, iterations=span,
                     readings=n, rounds=len(rounds), rounds_growing=growing)


@dataclass(frozen=True, slots=True)
class GrowthVerdict:
    """One counter judged: the whole slope, the early and the later half, and the warm-up growth."""

    whole: GrowthFit
    early: GrowthFit | None  # readings before the middle iteration
    late: GrowthFit  # readings from the middle iteration on (the whole fit when the half has too few)
    warmup_growth_bytes: int | None  # from after the first call to the start of the later half
    warmup_iterations: int  # iterations in that span (warm-up and measured)
    confirmation_iterations: int

    @property
    def source(self) -> str:
        return self.whole.source

    @property
    def label(self) -> str:
        return self.whole.label

    @property
    def persistent(self) -> bool:
        """The later half grows, significantly, in most of its rounds, at no less than half the early rate."""
        late = self.late
        if not (late.significant and late.steady):
            return False
        if self.early is None or self.early.slope_bytes_per_iteration <= 0:
            return True
        return late.slope_bytes_per_iteration >= PERSISTENCE * self.early.slope_bytes_per_iteration

    @property
    def metric_bytes_per_iteration(self) -> float:
        """What ``memory_growth_bytes_per_iteration`` reads: the persistent slope, else 0."""
        return self.late.slope_bytes_per_iteration if self.persistent else 0.0

    def leaking(self, floor_bytes: float = GROWTH_FLOOR_BYTES) -> bool:
        return self.persistent and self.late.slope_bytes_per_iteration >= floor_bytes

    @property
    def warm_up_growth(self) -> bool:
        """Growth early on that did not persist: what a warm-up looks like."""
        return (not self.persistent and self.early is not None and self.early.significant
                and self.early.slope_bytes_per_iteration > max(0.0, self.late.slope_bytes_per_iteration))


def judge_growth(series: MemorySeries, *, floor_bytes: float = GROWTH_FLOOR_BYTES) -> GrowthVerdict | None:
    """Fit the whole series and its two halves (by iteration); ``None`` when nothing can be fitted."""
    whole = fit_growth(series, floor_bytes=floor_bytes)
    if whole is None:
        return None
    first, last = min(series.iterations), max(series.iterations)
    middle = first + (last - first) / 2
    late = fit_growth(_subset(series, lambda x: x >= middle), floor_bytes=floor_bytes)
    early = fit_growth(_subset(series, lambda x: x <= middle), floor_bytes=floor_bytes)
    if late is None or late.ci_low_bytes_per_iteration is None:
        late = whole  # too few readings to split: the whole series is all there is
        early = None
    warmup_bytes: int | None = None
    warmup_iterations = series.warmup_iterations
    if series.after_first_call_bytes is not None:
        # RSS at the start of the later half, against RSS after the first call.
        start_of_late = min((x, i) for i, x in enumerate(series.iterations) if x >= middle)[1] if early else 0
        warmup_bytes = series.bytes_in_use[start_of_late] - series.after_first_call_bytes
        warmup_iterations += series.iterations[start_of_late]
    return GrowthVerdict(whole=whole, early=early, late=late, warmup_growth_bytes=warmup_bytes,
                         warmup_iterations=warmup_iterations,
                         confirmation_iterations=series.confirmation_iterations)


def _subset(series: MemorySeries, keep: Callable[[int], bool]) -> MemorySeries:
    idx = [i for i, x in enumerate(series.iterations) if keep(x)]
    return MemorySeries(source=series.source, label=series.label,
                        iterations=tuple(series.iterations[i] for i in idx),
                        rounds=tuple(series.rounds[i] for i in idx),
                        bytes_in_use=tuple(series.bytes_in_use[i] for i in idx))


def needs_confirmation(series: Sequence[MemorySeries], *, floor_bytes: float = GROWTH_FLOOR_BYTES) -> bool:
    """Would the readings so far accuse a leak? Then measure longer before doing so."""
    for s in series:
        verdict = judge_growth(s, floor_bytes=floor_bytes)
        if verdict is not None and verdict.leaking(floor_bytes):
            return True
    return False


def confirmation_plan(iterations_so_far: int) -> tuple[int, int]:
    """(iterations, chunk) of the confirming run: as many iterations again as so far, at least the minimum, and
    on to ``CONFIRM_PAST_ITERATIONS`` since the first call."""
    n = max(CONFIRM_MIN_ITERATIONS, iterations_so_far, CONFIRM_PAST_ITERATIONS - iterations_so_far)
    return n, max(1, n // CONFIRM_READINGS)


def chunk_size(total_iterations: int, target_readings: int = TARGET_READINGS) -> int:
    """Iterations between two readings, so that a variant gets about ``target_readings`` in all."""
    if total_iterations <= 0:
        return 1
    return max(1, -(-total_iterations // max(1, target_readings)))


class GrowthRecorder:
    """Collects one variant's readings; the runner calls ``record`` between chunks of iterations."""

    __slots__ = ("readers", "iterations", "rounds", "values", "after_first_call", "warmup_iterations",
                 "confirmation_iterations")

    def __init__(self, readers: Sequence[MemoryReader]) -> None:
        self.readers = tuple(readers)
        self.iterations: list[int] = []
        self.rounds: list[int] = []
        self.values: list[list[int | None]] = [[] for _ in self.readers]
        self.after_first_call: list[int | None] = [None for _ in self.readers]
        self.warmup_iterations = 0
        self.confirmation_iterations = 0

    def record_after_first_call(self) -> None:
        self.after_first_call = [reader.read() for reader in self.readers]

    def record(self, iteration: int, round_index: int) -> None:
        self.iterations.append(iteration)
        self.rounds.append(round_index)
        for values, reader in zip(self.values, self.readers):
            values.append(reader.read())

    def grown_since(self, start: int) -> int:
        """The most any counter grew from reading ``start`` to the last one (read in place: nothing allocated
        between the confirmation's chunks but the generator)."""
        return max((v[-1] - v[start] for v in self.values if len(v) > start and v[-1] is not None
                    and v[start] is not None), default=0)

    def series(self) -> tuple[MemorySeries, ...]:
        out = []
        for reader, values, start in zip(self.readers, self.values, self.after_first_call):
            if not values or any(v is None for v in values):
                continue  # a counter that failed part-way would fake a step
            readings = tuple(int(v) for v in values if v is not None)
            out.append(MemorySeries(source=reader.source, label=reader.label, iterations=tuple(self.iterations),
                                    rounds=tuple(self.rounds), bytes_in_use=readings, after_first_call_bytes=start,
                                    warmup_iterations=self.warmup_iterations,
                                    confirmation_iterations=self.confirmation_iterations))
        return tuple(out)


# -- readers -----------------------------------------------------------------


class RssReader:
    """Resident set size of this process from ``/proc/self/statm`` (about 1.5 us a read), else psutil.

    The file stays open and is re-read with ``pread``: opening it costs about
    25 us here, more than the reading. It is reopened after a fork, since the
    open file still describes the parent.
    """

    source = "rss"
    label = "process RSS"

    def __init__(self) -> None:
        self._fd: int | None = None
        self._pid = 0
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self._psutil: Any = None
        self._linux = sys.platform.startswith("linux") and os.path.exists("/proc/self/statm")

    def read(self) -> int | None:
        try:
            if self._linux:
                if self._fd is None or self._pid != os.getpid():
                    self._fd = os.open("/proc/self/statm", os.O_RDONLY)
                    self._pid = os.getpid()
                return int(os.pread(self._fd, 128, 0).split()[1]) * self._page
            if self._psutil is None:
                import psutil

                self._psutil = psutil.Process()
            return int(self._psutil.memory_info().rss)
        except (OSError, ValueError, IndexError):
            return None


class TfCurrentReader:
    """Bytes of live tensors on one device, from TensorFlow's allocator counter ``current``."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.source = f"tf_allocator[{device}]"
        self.label = f"TF allocator on {device}"

    def read(self) -> int | None:
        tf = sys.modules.get("tensorflow")
        if tf is None:
            return None
        try:
            return int(tf.config.experimental.get_memory_info(self.device)["current"])
        except Exception:  # noqa: BLE001 - a counter that stops working drops its series, never the test
            return None


_rss_reader: RssReader | None = None


def readers_for(probes: Sequence[Any]) -> list[MemoryReader]:
    """The readers that go with the session's peak probes.

    No probes, no readers (unit tests and the overhead benchmark measure
    nothing else). Otherwise the process RSS, and the allocator ``current``
    of every TensorFlow device whose probe works (read through the probe's
    own ``current()`` where it has one). NVML's figure includes the
    allocator's pool, which grows in steps, so it is not read.
    """
    global _rss_reader
    if not probes:
        return []
    if _rss_reader is None:
        _rss_reader = RssReader()
    readers: list[MemoryReader] = [_rss_reader]
    for probe in probes:
        if getattr(probe, "source", None) is not MemorySource.TF_ALLOCATOR:
            continue
        if getattr(probe, "unavailable", None) is not None:
            continue
        current = getattr(probe, "current", None)
        readers.append(_ProbeCurrentReader(probe) if callable(current) else TfCurrentReader(str(probe.device)))
    return readers


class _ProbeCurrentReader:
    def __init__(self, probe: Any) -> None:
        self._probe = probe
        self.source = f"tf_allocator[{probe.device}]"
        self.label = f"TF allocator on {probe.device}"

    def read(self) -> int | None:
        try:
            value = self._probe.current()
        except Exception:  # noqa: BLE001 - see TfCurrentReader.read
            return None
        return None if value is None else int(value)

"""The measurement loop: warm-up, calibration, timed rounds, memory probes.

Knows nothing of pytest. The clock and the memory probes are injected, so unit
tests drive it with a fake clock and fake probes. TensorFlow is never imported
here; callers that need device synchronisation pass a ``sync`` callable.

The loop itself runs on a measuring thread while the calling thread watches it
(see ``watchdog``): a workload blocked inside TensorFlow's C++ (a ``get_next``
that never returns) cannot be interrupted from Python, but the calling thread
can give up on it, fail the test and let the session go on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from pytest_tfperf import stats
from pytest_tfperf.model import Measurement, MemoryPeak, MemorySource, Timings
from pytest_tfperf.watchdog import StallPolicy, run_watched

Clock = Callable[[], int]  # nanoseconds, monotonic


@dataclass(frozen=True, slots=True)
class RunSettings:
    """How long and how often to measure. Defaults keep one benchmark to a few seconds on 2 cores."""

    budget_s: float = 2.0  # steady-state time, all rounds together
    rounds: int = 5
    min_rounds: int = 3  # for slow workloads, fewer rounds of one iteration each
    warmup_s: float = 0.2  # extra warm-up after the first call
    max_warmup_iterations: int = 50
    max_iterations_per_round: int = 1_000_000
    stall: StallPolicy = field(default_factory=StallPolicy)

    def __post_init__(self) -> None:
        if self.budget_s <= 0:
            raise ValueError(f"budget_s must be positive, got {self.budget_s}")
        if self.rounds < 1:
            raise ValueError(f"rounds must be at least 1, got {self.rounds}")
        if self.min_rounds < 1:
            raise ValueError(f"min_rounds must be at least 1, got {self.min_rounds}")
        if self.warmup_s < 0:
            raise ValueError(f"warmup_s must be >= 0, got {self.warmup_s}")


@dataclass(frozen=True, slots=True)
class Plan:
    """Rounds and iterations per round, derived from a warm-up estimate."""

    rounds: int
    iterations_per_round: int


def plan_rounds(estimate_ns: float, settings: RunSettings) -> Plan:
    """Calibrate iterations per round so that all rounds together fill the budget."""
    budget_ns = settings.budget_s * 1e9
    per_iter = max(estimate_ns, 1.0)
    if per_iter * settings.rounds > budget_ns:
        # Slow workload: one iteration per round, as many rounds as fit, but
        # never fewer than min_rounds (the statistics need several).
        rounds = max(min(settings.min_rounds, settings.rounds), min(settings.rounds, int(budget_ns // per_iter)))
        return Plan(rounds=rounds, iterations_per_round=1)
    n = int(budget_ns / settings.rounds / per_iter)
    return Plan(rounds=settings.rounds, iterations_per_round=max(1, min(n, settings.max_iterations_per_round)))


class Progress:
    """What the measuring thread is doing, read by the watchdog without locks.

    Plain attribute writes are atomic under the GIL; the watchdog tolerates a
    stale read by one poll interval.
    """

    __slots__ = ("phase", "iteration_started_ns", "typical_ns", "iterations_done")

    def __init__(self) -> None:
        self.phase = "first call"
        self.iteration_started_ns = 0  # 0: not inside an iteration
        self.typical_ns: float | None = None
        self.iterations_done = 0


@dataclass
class Workload:
    """One thing to measure: ``call()`` performs one iteration."""

    call: Callable[[], object]
    items_per_iteration: float = 1.0
    # Optional per-iteration split for dataset-feeding-a-step workloads: when set,
    # ``call`` is ignored and ``pull()`` then ``step(element)`` form one iteration.
    pull: Callable[[], object] | None = None
    step: Callable[[object], object] | None = None
    # Called with the iteration's output; raises to fail the measurement (e.g. a NaN loss).
    check_output: Callable[[int, object], None] | None = None
    # Total tf.function traces so far, over the functions this workload uses.
    trace_total: Callable[[], int] | None = None


@dataclass
class _VariantState:
    name: str
    workload: Workload
    first_call_ns: int = 0
    estimate_ns: float = 0.0
    samples: list[int] = field(default_factory=list)
    waits: list[int] = field(default_factory=list)
    round_sizes: list[int] = field(default_factory=list)
    per_probe_rounds: list[list[int | None]] = field(default_factory=list)
    per_probe_baseline: list[int | None] = field(default_factory=list)
    iteration_index: int = 0
    traces_first_call: int | None = None
    traces_steady: int | None = None


class MemoryProbeLike:  # pragma: no cover - typing aid only
    source: MemorySource
    device: str
    unavailable: str | None

    def reset(self) -> int | None: ...

    def peak(self) -> int | None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class RawRun:
    """The measured data of one variant before it becomes a ``Measurement``."""

    timings: Timings
    memory: tuple[MemoryPeak, ...]
    input_wait_ns: tuple[int, ...]  # per iteration, only for pull+step workloads
    traces_first_call: int | None = None
    traces_steady: int | None = None


def measure(
    workloads: Mapping[str, Workload],
    settings: RunSettings,
    *,
    clock: Clock = time.perf_counter_ns,
    probes: Sequence[MemoryProbeLike] = (),
    sync: Callable[[], None] | None = None,
    watch: bool = True,
) -> dict[str, RawRun]:
    """Measure one or more variants, interleaving their rounds.

    With several variants, round ``r`` runs them in alternating order (ABBA...),
    so slow drift of the machine hits all of them alike and their ratio is fair.
    """
    states = [_VariantState(name, w) for name, w in workloads.items()]
    progress = Progress()

    def body() -> None:
        for st in states:
            st.per_probe_rounds = [[] for _ in probes]
            st.per_probe_baseline = [None for _ in probes]
            _warm_up(st, settings, clock, sync, progress)
        plans = {st.name: plan_rounds(st.estimate_ns, settings) for st in states}
        n_rounds = max(p.rounds for p in plans.values())
        for r in range(n_rounds):
            order = states if r % 2 == 0 else list(reversed(states))
            for st in order:
                plan = plans[st.name]
                if r >= plan.rounds:
                    continue
                progress.phase = f"round {r + 1}/{plan.rounds}" + (f" of '{st.name}'" if len(states) > 1 else "")
                _timed_round(st, plan.iterations_per_round, clock, sync, probes, progress)

    if watch:
        run_watched(body, progress, settings.stall, clock=clock)
    else:
        body()

    out: dict[str, RawRun] = {}
    for st in states:
        timings = Timings(
            samples_ns=tuple(st.samples),
            round_sizes=tuple(st.round_sizes),
            items_per_iteration=st.workload.items_per_iteration,
            first_call_ns=st.first_call_ns,
        )
        memory = tuple(
            _collect_peak(probe, st.per_probe_rounds[i], st.per_probe_baseline[i]) for i, probe in enumerate(probes)
        )
        out[st.name] = RawRun(timings=timings, memory=memory, input_wait_ns=tuple(st.waits),
                              traces_first_call=st.traces_first_call, traces_steady=st.traces_steady)
    return out


def smoke(workload: Workload, settings: RunSettings, *, clock: Clock = time.perf_counter_ns) -> RawRun:
    """Run the workload once, as a normal (non-measuring) test run does."""
    states = {"smoke": workload}
    progress = Progress()
    holder: dict[str, int] = {}

    def body() -> None:
        t0 = clock()
        progress.iteration_started_ns = t0
        _one_iteration(workload, None, None, 0)
        holder["ns"] = clock() - t0
        progress.iteration_started_ns = 0

    run_watched(body, progress, settings.stall, clock=clock)
    ns = holder["ns"]
    timings = Timings(samples_ns=(ns,), round_sizes=(1,), items_per_iteration=states["smoke"].items_per_iteration,
                      first_call_ns=ns)
    return RawRun(timings=timings, memory=(), input_wait_ns=())


def _one_iteration(w: Workload, sync: Callable[[], None] | None, waits: list[int] | None, index: int,
                   clock: Clock | None = None) -> object:
    if w.pull is not None:
        if clock is not None and waits is not None:
            t0 = clock()
            element = w.pull()
            waits.append(clock() - t0)
        else:
            element = w.pull()
        out = w.step(element) if w.step is not None else element
    else:
        out = w.call()
    if sync is not None:
        sync()
    if w.check_output is not None:
        w.check_output(index, out)
    return out


def _warm_up(st: _VariantState, settings: RunSettings, clock: Clock, sync: Callable[[], None] | None,
             progress: Progress) -> None:
    w = st.workload
    progress.phase = "first call" + (f" of '{st.name}'" if st.name else "")
    traces_before = w.trace_total() if w.trace_total is not None else None
    t0 = clock()
    progress.iteration_started_ns = t0
    _one_iteration(w, sync, None, st.iteration_index)
    st.iteration_index += 1
    t1 = clock()
    progress.iteration_started_ns = 0
    st.first_call_ns = t1 - t0
    # The first call traces and compiles; later calls still settle (caches,
    # autotuning). Keep warming until warmup_s has passed, at least once more.
    progress.phase = "warm-up" + (f" of '{st.name}'" if st.name else "")
    warm: list[int] = []
    deadline = t1 + int(settings.warmup_s * 1e9)
    while not warm or (clock() < deadline and len(warm) < settings.max_warmup_iterations):
        a = clock()
        progress.iteration_started_ns = a
        _one_iteration(w, sync, None, st.iteration_index)
        st.iteration_index += 1
        b = clock()
        warm.append(b - a)
        progress.typical_ns = stats.median(warm)
        if settings.warmup_s == 0:
            break
    progress.iteration_started_ns = 0
    if traces_before is not None and w.trace_total is not None:
        st.traces_first_call = w.trace_total() - traces_before
        st.traces_steady = 0
    st.estimate_ns = stats.median(warm[len(warm) // 2 :]) if len(warm) > 2 else stats.median(warm)


def _timed_round(st: _VariantState, n: int, clock: Clock, sync: Callable[[], None] | None,
                 probes: Sequence[MemoryProbeLike], progress: Progress) -> None:
    for i, probe in enumerate(probes):
        base = probe.reset()
        if st.per_probe_baseline[i] is None:
            st.per_probe_baseline[i] = base
    w = st.workload
    traces_before = w.trace_total() if w.trace_total is not None else None
    samples = st.samples
    start = len(samples)
    if w.pull is None and w.check_output is None and sync is None:
        # The hot path: two clock reads and an append per iteration, nothing else.
        call = w.call
        append = samples.append
        for _ in range(n):
            t0 = clock()
            progress.iteration_started_ns = t0
            call()
            append(clock() - t0)
    else:
        waits = st.waits if w.pull is not None else None
        for _ in range(n):
            t0 = clock()
            progress.iteration_started_ns = t0
            _one_iteration(w, sync, waits, st.iteration_index, clock)
            st.iteration_index += 1
            samples.append(clock() - t0)
    progress.iteration_started_ns = 0
    st.round_sizes.append(len(samples) - start)
    progress.iterations_done += n
    progress.typical_ns = stats.median(samples[start:])
    if traces_before is not None and w.trace_total is not None:
        st.traces_steady = (st.traces_steady or 0) + w.trace_total() - traces_before
    for i, probe in enumerate(probes):
        st.per_probe_rounds[i].append(probe.peak())


def _collect_peak(probe: MemoryProbeLike, per_round: list[int | None], baseline: int | None) -> MemoryPeak:
    if probe.unavailable is not None:
        return MemoryPeak(source=probe.source, device=probe.device, peak_bytes=None, unavailable=probe.unavailable)
    values = [v for v in per_round if v is not None]
    if not values:
        return MemoryPeak(source=probe.source, device=probe.device, peak_bytes=None,
                          unavailable="the probe returned no reading")
    return MemoryPeak(source=probe.source, device=probe.device, peak_bytes=max(values), baseline_bytes=baseline,
                      per_round_peak_bytes=tuple(values))


def build_measurement(test_id: str, mode: str, raw: RawRun, *, traces_first_call: int | None = None,
                      traces_steady: int | None = None, extra_metrics: Sequence[tuple[str, float]] = (),
                      diagnoses: Sequence[object] = (), environment_id: str = "") -> Measurement:
    return Measurement(test_id=test_id, mode=mode, timings=raw.timings, memory=raw.memory,
                       traces_first_call=traces_first_call, traces_steady=traces_steady,
                       diagnoses=tuple(diagnoses),  # type: ignore[arg-type]
                       extra_metrics=tuple(extra_metrics), environment_id=environment_id)


def dataset_puller(make_iterator: Callable[[], Iterator[object]]) -> Callable[[], object]:
    """``next()`` on an iterator, starting a fresh one when the dataset ends.

    A finite dataset would otherwise end the measurement early; the restart
    (a new iterator) is part of what a training loop over epochs pays too.
    """
    state = {"it": make_iterator()}

    def pull() -> object:
        try:
            return next(state["it"])
        except StopIteration:
            state["it"] = make_iterator()
            try:
                return next(state["it"])
            except StopIteration:
                raise ValueError("the dataset is empty: there is nothing to iterate") from None

    return pull

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

import dataclasses
import time
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from pytest_tfperf import stats
from pytest_tfperf.probes import gpu_busy
from pytest_tfperf.measuring import memory_growth
from pytest_tfperf.measuring.memory_growth import GrowthRecorder, MemoryReader, MemorySeries, chunk_size, readers_for
from pytest_tfperf.probes.memory_probes import MemoryProbe, collect_peak
from pytest_tfperf.model import GpuBusy, Measurement, MemoryPeak, Timings
from pytest_tfperf.measuring.watchdog import StallPolicy, run_watched

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
    stale read by one poll interval. ``abandoned`` goes the other way: the
    watchdog sets it when it gives up on the thread, and a thread that comes
    back to life stops at its next chunk instead of measuring on behind the
    next test's back.
    """

    __slots__ = ("phase", "detail", "iteration_started_ns", "typical_ns", "iterations_done", "abandoned")

    def __init__(self) -> None:
        self.phase = "first call"
        self.detail = ""  # "waiting for the next element" / "in the step", for pull+step workloads
        self.iteration_started_ns = 0  # 0: not inside an iteration
        self.typical_ns: float | None = None
        self.iterations_done = 0
        self.abandoned = False


class Abandoned(BaseException):
    """Raised in a measuring thread that the watchdog gave up on, should it ever resume."""


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
    # For pull+step workloads. Epoch restarts so far of ``pull`` (a finite
    # dataset started again), so that their waits are reported on their own.
    restarts: Callable[[], int] | None = None
    # A new, independent puller for the "dataset alone" phase, so that it
    # never drains or refills the buffers of the iterator the step reads.
    fresh_pull: Callable[[], DatasetPuller] | None = None
    # Given one element, a pull that hands it over already made, through the
    # same machinery (a tf.data iterator): the handover floor no pipeline
    # change removes, measured in the "step alone" phase.
    handover: Callable[[object], Callable[[], object]] | None = None
    # What the dataset is made of (``pipeline_shape.PipelineShape``), for advice that fits it.
    pipeline: object | None = None


# With ``step``, the measured budget is split: most of it for the pipeline and
# the step together (the figure that is gated and compared), the rest for the
# dataset alone and the step alone, so that a user can see which side moved.
# The two extra phases run after every round of the together phase, each
# round after round, and the dataset alone on an iterator of its own:
# interleaved with the together rounds, pulling from the same iterator, they
# drained the prefetch buffer that then refilled during the next together
# round (a false allocator "leak" of 0.5-4.9 MiB per iteration, and a
# dataset-alone rate 10-20x what back-to-back pulls sustain).
TOGETHER_SHARE = 0.6
ALONE_SHARE = 0.2
ALONE_WARMUP_FRACTION = 0.25  # the step was already warmed up together
TOGETHER = "dataset and step together"
DATASET_ALONE = "dataset alone"
STEP_ALONE = "step alone"


class SampleBuffer:
    """Per-iteration nanoseconds in a flat ``array('q')``, its room made before any round starts.

    Appending to a Python list inside a round grew the very RSS high-water mark
    the round measures: the list's pointer array grows by reallocation, and
    every sample above 256 ns is an int object of its own (a no-op workload
    showed its RSS peak rising 15-18 MiB per round, ``sum(range(1000))`` 1 MiB).
    Here a round only stores into slots that exist already: 8 bytes a sample,
    converted, not kept as objects; ``array('q', [0]) * n`` writes every slot,
    so the pages are resident before the probes are reset (a lazily zeroed
    buffer would fault them in during the round and show up all the same).
    """

    __slots__ = ("data", "count")

    def __init__(self) -> None:
        self.data: array[int] = array("q")
        self.count = 0

    def reserve(self, extra: int) -> None:
        """Make room for ``extra`` more samples; call it outside any measured round."""
        missing = self.count + extra - len(self.data)
        if missing > 0:
            self.data.extend(array("q", [0]) * missing)

    def put(self, value: int) -> None:
        self.data[self.count] = value
        self.count += 1

    def values(self, start: int = 0) -> tuple[int, ...]:
        # Through a view: slicing the array itself would copy it first.
        return tuple(memoryview(self.data)[start:self.count])


@dataclass
class _VariantState:
    name: str
    workload: Workload
    label: str = ""  # how the phase names it: the variant's name, or "dataset alone" / "step alone"
    share: float = 1.0  # of the budget
    aux_of: str | None = None  # set for the dataset-alone / step-alone phases of a pull+step variant
    prepare: Callable[[], None] | None = None  # untimed, before the first call
    cleanup: Callable[[], None] | None = None  # untimed, after the last round
    growth: GrowthRecorder | None = None
    typical_ns: float | None = None
    first_call_ns: int = 0
    estimate_ns: float = 0.0
    samples: SampleBuffer = field(default_factory=SampleBuffer)
    waits: SampleBuffer = field(default_factory=SampleBuffer)  # only pull+step workloads fill it
    round_sizes: list[int] = field(default_factory=list)
    per_probe_rounds: list[list[int | None]] = field(default_factory=list)
    per_probe_baseline: list[int | None] = field(default_factory=list)
    per_probe_starts: list[list[int | None]] = field(default_factory=list)
    busy_rounds: list[tuple[gpu_busy.BusyReading, ...]] = field(default_factory=list)  # per round, per NVML probe
    iteration_index: int = 0
    traces_first_call: int | None = None
    traces_steady: int | None = None
    restart_marks: list[int] = field(default_factory=list)  # indices into samples of pulls that restarted


@dataclass(frozen=True, slots=True)
class InputSplit:
    """A pull+step workload measured three ways: together (the ``RawRun``'s timings), and these two."""

    dataset_alone: Timings  # back-to-back pulls from a fresh iterator, epoch restarts left out
    step_alone: Timings  # the step re-run on one cached element (its handover not included)
    handover_ns: tuple[int, ...] = ()  # per step-alone iteration: handing over the ready element
    dataset_restarts_ns: tuple[int, ...] = ()  # the dataset-alone pulls that restarted an epoch


@dataclass(frozen=True, slots=True)
class RawRun:
    """The measured data of one variant before it becomes a ``Measurement``."""

    timings: Timings
    memory: tuple[MemoryPeak, ...]
    input_wait_ns: tuple[int, ...]  # per iteration, only for pull+step workloads
    traces_first_call: int | None = None
    traces_steady: int | None = None
    memory_series: tuple[MemorySeries, ...] = ()  # memory in use between chunks of iterations
    input_split: InputSplit | None = None
    gpu_busy: tuple[GpuBusy, ...] = ()  # NVML's busy fraction per GPU, sampled during the rounds
    input_restart_iterations: tuple[int, ...] = ()  # indices (into samples and waits) of pulls that restarted
    pipeline: object | None = None  # the dataset's transformations, where known (pipeline_shape)


def measure(
    workloads: Mapping[str, Workload],
    settings: RunSettings,
    *,
    clock: Clock = time.perf_counter_ns,
    probes: Sequence[MemoryProbe] = (),
    sync: Callable[[], None] | None = None,
    watch: bool = True,
    memory_readers: Sequence[MemoryReader] | None = None,
    split_input: bool = True,
    pace: Callable[[str, int], None] | None = None,
) -> dict[str, RawRun]:
    """Measure one or more variants, interleaving their rounds.

    With several variants, round ``r`` runs them in alternating order (ABBA...),
    so slow drift of the machine hits all of them alike and their ratio is fair.

    ``memory_readers`` read memory in use between chunks of iterations, for
    the growth slope (default: those that go with ``probes``, see
    ``memory_growth.readers_for``). With ``split_input``, a pull+step workload
    is also measured as the dataset alone and the step alone, within the
    same budget (``RawRun.input_split``).

    ``pace(event, round_index)``, when given, is called with ``("ready", -1)``
    once warm-up and calibration are done, then ``("before", r)`` and
    ``("after", r)`` around each round, outside any timed region: the hook
    that lets a partner session take its turns (``partner``).

    An exception of the workload leaves with ``tfperf_phase`` (where it
    happened) and ``tfperf_peaks`` (the probes' peaks at that moment) set on
    it where Python allows, for the failure message.
    """
    readers = readers_for(probes) if memory_readers is None else list(memory_readers)
    states: list[_VariantState] = []
    aux_states: list[_VariantState] = []
    for name, w in workloads.items():
        main = _VariantState(name, w, label=name, growth=GrowthRecorder(readers) if readers else None)
        states.append(main)
        if split_input and w.pull is not None and w.step is not None:
            main.share = TOGETHER_SHARE
            main.label = f"{name}: {TOGETHER}" if name else TOGETHER
            aux_states += _alone_states(name, w)
    progress = Progress()

    def body() -> None:
        try:
            # Peaks from here on: what an out-of-memory message reports if the
            # first call fails (rounds reset them again for their own peaks).
            for probe in probes:
                probe.reset()
            for st in states:
                st.per_probe_rounds = [[] for _ in probes]
                st.per_probe_baseline = [None for _ in probes]
                st.per_probe_starts = [[] for _ in probes]
                if st.prepare is not None:
                    st.prepare()
                _warm_up(st, settings if st.aux_of is None else _alone_warmup(settings), clock, sync, progress)
            plans = {id(st): _plan(st, settings) for st in states}
            for st in states:  # every sample's slot exists before the first round begins
                _reserve(st, plans[id(st)].rounds * plans[id(st)].iterations_per_round)
            n_rounds = max(p.rounds for p in plans.values())
            if pace is not None:
                pace("ready", -1)
            for r in range(n_rounds):
                if pace is not None:
                    pace("before", r)
                order = states if r % 2 == 0 else list(reversed(states))
                for st in order:
                    plan = plans[id(st)]
                    if r >= plan.rounds:
                        continue
                    progress.phase = f"round {r + 1}/{plan.rounds}" + (f" of '{st.label}'" if len(states) > 1 else "")
                    chunk = chunk_size(plan.rounds * plan.iterations_per_round)
                    _timed_round(st, plan.iterations_per_round, clock, sync, probes, progress, chunk=chunk,
                                 round_index=r)
                if pace is not None:
                    pace("after", r)
            for st in states:
                _confirm_growth(st, settings, sync, progress, round_index=n_rounds, clock=clock)
            for st in aux_states:
                # After every together round, one phase at a time, each on its own iterator.
                st.per_probe_rounds = [[] for _ in probes]
                st.per_probe_baseline = [None for _ in probes]
                st.per_probe_starts = [[] for _ in probes]
                if st.prepare is not None:
                    st.prepare()
                _warm_up(st, settings if st.label.endswith(DATASET_ALONE) else _alone_warmup(settings), clock, sync,
                         progress)
                plan = _plan(st, settings)
                for r in range(plan.rounds):
                    progress.phase = f"round {r + 1}/{plan.rounds} of '{st.label}'"
                    _timed_round(st, plan.iterations_per_round, clock, sync, probes, progress, round_index=r)
                if st.cleanup is not None:
                    st.cleanup()
        except Abandoned:
            raise
        except BaseException as exc:
            _note_failure(exc, progress, probes)
            raise

    if watch:
        run_watched(body, progress, settings.stall, clock=clock)
    else:
        body()

    out: dict[str, RawRun] = {}
    for st in states:
        if st.aux_of is not None:
            continue
        timings = _timings(st)
        memory = tuple(
            collect_peak(probe, st.per_probe_rounds[i], st.per_probe_baseline[i], st.per_probe_starts[i]) for i, probe in enumerate(probes)
        )
        alone = {aux.label.rsplit(": ", 1)[-1]: aux for aux in aux_states if aux.aux_of == st.name}
        split = _input_split(alone[DATASET_ALONE], alone[STEP_ALONE]) if alone else None
        out[st.name] = RawRun(timings=timings, memory=memory, input_wait_ns=st.waits.values(),
                              traces_first_call=st.traces_first_call, traces_steady=st.traces_steady,
                              memory_series=st.growth.series() if st.growth is not None else (),
                              input_split=split, gpu_busy=gpu_busy.collect(st.busy_rounds),
                              input_restart_iterations=tuple(st.restart_marks),
                              pipeline=st.workload.pipeline)
    return out


def _input_split(dataset: _VariantState, stepped: _VariantState) -> InputSplit:
    restarted = set(dataset.restart_marks)
    pulled = dataset.samples.values()
    pulls = [ns for i, ns in enumerate(pulled) if i not in restarted]
    restarts = tuple(pulled[i] for i in sorted(restarted))
    if not pulls:  # every pull restarted (a one-element dataset): report them as they are
        pulls, restarts = list(pulled), ()
    handover = stepped.waits.values()
    stepped_ns = stepped.samples.values()
    step_only = [max(0, t - h) for t, h in zip(stepped_ns, handover)] if handover else list(stepped_ns)
    return InputSplit(
        dataset_alone=Timings(samples_ns=tuple(pulls), round_sizes=(len(pulls),),
                              items_per_iteration=dataset.workload.items_per_iteration,
                              first_call_ns=dataset.first_call_ns),
        step_alone=Timings(samples_ns=tuple(step_only), round_sizes=tuple(stepped.round_sizes),
                           items_per_iteration=stepped.workload.items_per_iteration,
                           first_call_ns=stepped.first_call_ns),
        handover_ns=handover, dataset_restarts_ns=restarts)


def _confirm_growth(st: _VariantState, settings: RunSettings, sync: Callable[[], None] | None,
                    progress: Progress, *, round_index: int, clock: Clock) -> None:
    """Measure longer before accusing a leak: untimed iterations, with memory read between chunks.

    Runs only when the readings so far would flag a leak (warm-up growth of a
    real model often would: see ``memory_growth``). Nothing here is timed
    into the throughput figures.
    """
    growth = st.growth
    if growth is None or not memory_growth.needs_confirmation(growth.series()):
        return
    measured = st.samples.count
    target, chunk = memory_growth.confirmation_plan(measured + growth.warmup_iterations)
    deadline = clock() + int(max(memory_growth.CONFIRM_MIN_S,
                                 memory_growth.CONFIRM_BUDGET_MULTIPLE * settings.budget_s) * 1e9)
    progress.phase = "measuring longer to confirm memory growth" + (f" of '{st.label}'" if st.label else "")
    progress.typical_ns = st.typical_ns
    done = 0
    segment_length = max(1, -(-target // memory_growth.CONFIRM_SEGMENTS))
    growth.record(measured, round_index)
    while done < target and clock() < deadline:
        segment = done // segment_length
        for _ in range(min(chunk, target - done, segment_length * (segment + 1) - done)):
            progress.iteration_started_ns = clock()
            _one_iteration(st.workload, sync, None, st.iteration_index, None, progress)
            st.iteration_index += 1
            done += 1
        if progress.abandoned:
            raise Abandoned
        growth.record(measured + done, round_index + segment)
        if done % segment_length == 0 and done < target:
            # The next segment's first reading: the same moment, in its own round.
            growth.record(measured + done, round_index + segment + 1)
    progress.iteration_started_ns = 0
    growth.confirmation_iterations = done


def _alone_states(name: str, w: Workload) -> list[_VariantState]:
    """The dataset-alone and step-alone phases of a pull+step workload."""
    pull, step = w.pull, w.step
    assert pull is not None and step is not None
    prefix = f"{name}: " if name else ""
    # The dataset alone: back-to-back pulls from an iterator of its own (the
    # together phase's iterator is left as it was), dropped afterwards.
    own: dict[str, DatasetPuller] = {}

    def fresh() -> None:
        if w.fresh_pull is not None:
            own["pull"] = w.fresh_pull()

    def pull_alone() -> object:
        return own["pull"]() if "pull" in own else pull()

    def restarts_alone() -> int:
        if "pull" in own:
            return own["pull"].restarts
        return w.restarts() if w.restarts is not None else 0

    dataset = _VariantState(f"{name}\0dataset",
                            Workload(call=pull_alone, items_per_iteration=w.items_per_iteration,
                                     restarts=restarts_alone),
                            label=prefix + DATASET_ALONE, share=ALONE_SHARE, aux_of=name, prepare=fresh,
                            cleanup=own.clear)
    # The step alone: one element, handed over ready-made each time, so the
    # handover (the floor of any wait) is measured on its own.
    handing: dict[str, Callable[[], object]] = {}

    def prepare_step() -> None:
        element = pull()
        handing["pull"] = w.handover(element) if w.handover is not None else (lambda: element)

    stepped = _VariantState(f"{name}\0step",
                            Workload(call=lambda: None, pull=lambda: handing["pull"](), step=step,
                                     items_per_iteration=w.items_per_iteration),
                            label=prefix + STEP_ALONE, share=ALONE_SHARE, aux_of=name, prepare=prepare_step,
                            cleanup=handing.clear)
    return [dataset, stepped]


def _alone_warmup(settings: RunSettings) -> RunSettings:
    return dataclasses.replace(settings, warmup_s=settings.warmup_s * ALONE_WARMUP_FRACTION)


def _plan(st: _VariantState, settings: RunSettings) -> Plan:
    if st.share == 1.0:
        return plan_rounds(st.estimate_ns, settings)
    # The extra phases may run a single round of a slow step: they inform,
    # they are not what the gate judges.
    return plan_rounds(st.estimate_ns, dataclasses.replace(
        settings, budget_s=settings.budget_s * st.share,
        min_rounds=1 if st.aux_of is not None else settings.min_rounds))


def _timings(st: _VariantState) -> Timings:
    return Timings(samples_ns=st.samples.values(), round_sizes=tuple(st.round_sizes),
                   items_per_iteration=st.workload.items_per_iteration, first_call_ns=st.first_call_ns)


def _note_failure(exc: BaseException, progress: Progress, probes: Sequence[MemoryProbe]) -> None:
    """Say on the exception where it happened and how much memory was in use (for OOM messages)."""
    peaks: list[tuple[str, str, int | None, str | None]] = []
    for probe in probes:
        try:
            value = probe.peak()
        except Exception:  # noqa: BLE001 - a probe must never hide the workload's own error
            value = None
        peaks.append((probe.source.value, probe.device, value, probe.unavailable))
    where = progress.phase + (f", {progress.detail}" if progress.detail else "")
    since = "this round" if progress.phase.startswith("round") else "measuring began"
    try:
        exc.tfperf_phase = where  # type: ignore[attr-defined]
        exc.tfperf_peaks = tuple(peaks)  # type: ignore[attr-defined]
        exc.tfperf_peaks_since = since  # type: ignore[attr-defined]
    except (AttributeError, TypeError):  # an exception class with __slots__
        pass


def smoke(workload: Workload, settings: RunSettings, *, clock: Clock = time.perf_counter_ns) -> RawRun:
    """Run the workload once, as a normal (non-measuring) test run does.

    It is watched like a measurement; with nothing measured yet, the stall
    deadline is the policy's ceiling.
    """
    progress = Progress()
    progress.phase = "smoke run (without --tfperf)"
    holder: dict[str, int] = {}

    def body() -> None:
        try:
            t0 = clock()
            progress.iteration_started_ns = t0
            _one_iteration(workload, None, None, 0, None, progress)
            holder["ns"] = clock() - t0
            progress.iteration_started_ns = 0
        except Abandoned:
            raise
        except BaseException as exc:
            _note_failure(exc, progress, ())
            raise

    run_watched(body, progress, settings.stall, clock=clock)
    ns = holder["ns"]
    timings = Timings(samples_ns=(ns,), round_sizes=(1,), items_per_iteration=workload.items_per_iteration,
                      first_call_ns=ns)
    return RawRun(timings=timings, memory=(), input_wait_ns=())


def _one_iteration(w: Workload, sync: Callable[[], None] | None, waits: SampleBuffer | None, index: int,
                   clock: Clock | None = None, progress: Progress | None = None) -> object:
    if w.pull is not None:
        if progress is not None:
            progress.detail = "waiting for the next dataset element"
        if clock is not None and waits is not None:
            t0 = clock()
            element = w.pull()
            waits.put(clock() - t0)
        else:
            element = w.pull()
        if progress is not None:
            progress.detail = "in the step" if w.step is not None else ""
        out = w.step(element) if w.step is not None else element
        if progress is not None:
            progress.detail = ""
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
    of = f" of '{st.label}'" if st.label else ""
    progress.phase = "first call" + of
    progress.typical_ns = None  # a first call traces and compiles: only the ceiling applies
    traces_before = w.trace_total() if w.trace_total is not None else None
    t0 = clock()
    progress.iteration_started_ns = t0
    _one_iteration(w, sync, None, st.iteration_index, None, progress)
    st.iteration_index += 1
    t1 = clock()
    progress.iteration_started_ns = 0
    st.first_call_ns = t1 - t0
    if st.growth is not None:
        st.growth.record_after_first_call()
    # The first call traces and compiles; later calls still settle (caches,
    # autotuning). Keep warming until warmup_s has passed, at least once more.
    progress.phase = "warm-up" + of
    warm: list[int] = []
    deadline = t1 + int(settings.warmup_s * 1e9)
    while not warm or (clock() < deadline and len(warm) < settings.max_warmup_iterations):
        a = clock()
        progress.iteration_started_ns = a
        _one_iteration(w, sync, None, st.iteration_index, None, progress)
        st.iteration_index += 1
        b = clock()
        warm.append(b - a)
        progress.typical_ns = stats.median(warm)
        if settings.warmup_s == 0:
            break
    progress.iteration_started_ns = 0
    if progress.abandoned:
        raise Abandoned
    if traces_before is not None and w.trace_total is not None:
        st.traces_first_call = w.trace_total() - traces_before
        st.traces_steady = 0
    if st.growth is not None:
        st.growth.warmup_iterations = len(warm)
    st.estimate_ns = stats.median(warm[len(warm) // 2 :]) if len(warm) > 2 else stats.median(warm)
    st.typical_ns = progress.typical_ns


def _reserve(st: _VariantState, iterations: int) -> None:
    st.samples.reserve(iterations)
    if st.workload.pull is not None:
        st.waits.reserve(iterations)


def _timed_round(st: _VariantState, n: int, clock: Clock, sync: Callable[[], None] | None,
                 probes: Sequence[MemoryProbe], progress: Progress, *, chunk: int | None = None,
                 round_index: int = 0) -> None:
    """``n`` timed iterations, in chunks of ``chunk``; memory in use is read between chunks, untimed.

    The probes are reset right before the first iteration and read right
    after the last, so that the round's memory figures cover the workload and
    the bare loop around it, none of the bookkeeping before or after (the
    median below sorts a list of every sample of the round).
    """
    _reserve(st, n)  # a no-op under ``measure``, which reserved every round's room already
    w = st.workload
    traces_before = w.trace_total() if w.trace_total is not None else None
    start = st.samples.count
    end = start + n
    chunk = n if chunk is None else max(1, chunk)
    growth = st.growth
    progress.typical_ns = st.typical_ns  # this variant's own, not the one measured before it
    if growth is not None:
        growth.record(start, round_index)
    for i, probe in enumerate(probes):
        base = probe.reset()
        if st.per_probe_baseline[i] is None:
            st.per_probe_baseline[i] = base
        st.per_probe_starts[i].append(base)
    done = start
    # Stores go through a memoryview: it converts with PyLong_AsLongLong, where
    # the array's own signed item store parses a format string (measured with
    # callgrind: about 150 instead of 280 instructions more than a list append).
    # After an exception the view stays alive with the traceback, harmlessly:
    # nothing resizes the buffer of a failed measurement.
    buf = memoryview(st.samples.data)
    if w.pull is None and w.check_output is None and sync is None and w.restarts is None:
        # The hot path: two clock reads and a store into a slot that exists,
        # nothing else; the chunking only adds work between chunks.
        call = w.call
        while done < end:
            stop = min(done + chunk, end)
            for slot in range(done, stop):
                t0 = clock()
                progress.iteration_started_ns = t0
                call()
                buf[slot] = clock() - t0
            done = stop
            if progress.abandoned:
                raise Abandoned
            if growth is not None:
                growth.record(done, round_index)
    else:
        waits = st.waits if w.pull is not None else None
        restarts = w.restarts
        while done < end:
            stop = min(done + chunk, end)
            for slot in range(done, stop):
                before = restarts() if restarts is not None else 0
                t0 = clock()
                progress.iteration_started_ns = t0
                _one_iteration(w, sync, waits, st.iteration_index, clock, progress)
                st.iteration_index += 1
                buf[slot] = clock() - t0
                if restarts is not None and restarts() != before:
                    st.restart_marks.append(slot)  # a restart is rare: this list stays a few entries long
            done = stop
            if progress.abandoned:
                raise Abandoned
            if growth is not None:
                growth.record(done, round_index)
    peaks = [probe.peak() for probe in probes]
    buf.release()
    progress.iteration_started_ns = 0
    st.samples.count = end
    st.round_sizes.append(n)
    progress.iterations_done += n
    st.typical_ns = progress.typical_ns = stats.median(st.samples.data[start:end].tolist())  # faster to sort
    if traces_before is not None and w.trace_total is not None:
        st.traces_steady = (st.traces_steady or 0) + w.trace_total() - traces_before
    for i, peak in enumerate(peaks):
        st.per_probe_rounds[i].append(peak)
    st.busy_rounds.append(gpu_busy.round_readings(probes))  # read by the NVML probes' peak() right after the loop


def build_measurement(test_id: str, mode: str, raw: RawRun, *, traces_first_call: int | None = None,
                      traces_steady: int | None = None, extra_metrics: Sequence[tuple[str, float]] = (),
                      diagnoses: Sequence[object] = (), environment_id: str = "") -> Measurement:
    return Measurement(test_id=test_id, mode=mode, timings=raw.timings, memory=raw.memory,
                       traces_first_call=traces_first_call, traces_steady=traces_steady,
                       diagnoses=tuple(diagnoses),  # type: ignore[arg-type]
                       extra_metrics=tuple(extra_metrics), environment_id=environment_id, gpu_busy=raw.gpu_busy)


class DatasetPuller:
    """``next()`` on an iterator, starting a fresh one when the dataset ends; counts the restarts.

    A finite dataset would otherwise end the measurement early; the restart
    (dropping the exhausted iterator, a new one, its first element: a
    shuffle buffer refilled, a pipeline started) is part of what a training
    loop over epochs pays too, but it is paid once an epoch, not once a
    step, so the runner reports it on its own.
    """

    __slots__ = ("_make", "_it", "restarts")

    def __init__(self, make_iterator: Callable[[], Iterator[object]]) -> None:
        self._make = make_iterator
        self._it = make_iterator()
        self.restarts = 0

    def __call__(self) -> object:
        try:
            return next(self._it)
        except StopIteration:
            self._it = self._make()
            self.restarts += 1
            try:
                return next(self._it)
            except StopIteration:
                raise ValueError("the dataset is empty: there is nothing to iterate") from None


def dataset_puller(make_iterator: Callable[[], Iterator[object]]) -> DatasetPuller:
    """A ``DatasetPuller`` over ``make_iterator()``'s iterators."""
    return DatasetPuller(make_iterator)

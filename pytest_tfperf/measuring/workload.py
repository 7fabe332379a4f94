"""What the measurement loop is given and gives back: workloads, settings, the round plan, raw runs.

Plain data, no measuring: ``runner`` measures, and everything that builds a
workload (the fixture) or reads a run (diagnoses, the session) meets it here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from pytest_tfperf.measuring.memory_growth import MemorySeries
from pytest_tfperf.measuring.watchdog import StallPolicy
from pytest_tfperf.model import TRACES_BETWEEN_ROUNDS, GpuBusy, Measurement, MemoryPeak, Timings, TraceEvent

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
    # How ``trace_total`` counts (``model.TRACE_COUNTING_UNITS``), and, where it sees each trace, the
    # causes of the traces counted between two of its readings (``trace_recorder.TraceRecorder.events``).
    trace_counting: str = TRACES_BETWEEN_ROUNDS
    trace_events: Callable[[int, int], tuple[TraceEvent, ...]] | None = None
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
    trace_counting: str = TRACES_BETWEEN_ROUNDS  # how traces were counted (``model.TRACE_COUNTING_UNITS``)
    steady_trace_events: tuple[TraceEvent, ...] = ()  # what made each steady-state trace, where seen

def build_measurement(test_id: str, mode: str, raw: RawRun, *, traces_first_call: int | None = None,
                      traces_steady: int | None = None, extra_metrics: Sequence[tuple[str, float]] = (),
                      diagnoses: Sequence[object] = (), environment_id: str = "") -> Measurement:
    return Measurement(test_id=test_id, mode=mode, timings=raw.timings, memory=raw.memory,
                       traces_first_call=traces_first_call, traces_steady=traces_steady,
                       diagnoses=tuple(diagnoses),  # type: ignore[arg-type]
                       extra_metrics=tuple(extra_metrics), environment_id=environment_id, gpu_busy=raw.gpu_busy,
                       trace_counting=raw.trace_counting)

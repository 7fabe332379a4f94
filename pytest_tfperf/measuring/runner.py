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
from collections.abc import Callable, Mapping, Sequence

from pytest_tfperf import stats
from pytest_tfperf.measuring import memory_growth
from pytest_tfperf.input_bound.split import (
    DATASET_ALONE,
    STEP_ALONE,
    TOGETHER,
    TOGETHER_SHARE,
    alone_states,
    alone_warmup,
    input_split,
)
from pytest_tfperf.measuring.memory_growth import GrowthRecorder, MemoryReader, chunk_size, readers_for
from pytest_tfperf.measuring.variant_state import SampleBuffer, VariantState
from pytest_tfperf.measuring.watchdog import Abandoned, Progress, run_watched
from pytest_tfperf.measuring.workload import Clock, Plan, RawRun, RunSettings, Workload, plan_rounds
from pytest_tfperf.model import Timings
from pytest_tfperf.probes import gpu_busy
from pytest_tfperf.probes.memory_probes import MemoryProbe, collect_peak


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
    pace: Callable[[str, int], bool | None] | None = None,
    rounds_log: list[float] | None = None,
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
    states: list[VariantState] = []
    aux_states: list[VariantState] = []
    for name, w in workloads.items():
        main = VariantState(name, w, label=name, growth=GrowthRecorder(readers) if readers else None)
        states.append(main)
        if split_input and w.pull is not None and w.step is not None:
            main.share = TOGETHER_SHARE
            main.label = f"{name}: {TOGETHER}" if name else TOGETHER
            aux_states += alone_states(name, w)
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
                _warm_up(st, settings if st.aux_of is None else alone_warmup(settings), clock, sync, progress)
            plans = {id(st): _plan(st, settings) for st in states}
            for st in states:  # every sample's slot exists before the first round begins
                _reserve(st, plans[id(st)].rounds * plans[id(st)].iterations_per_round)
            n_rounds = max(p.rounds for p in plans.values())
            if pace is not None:
                pace("ready", -1)
            for r in range(n_rounds):
                if pace is not None and pace("before", r):
                    break
                order = states if r % 2 == 0 else list(reversed(states))
                for st in order:
                    plan = plans[id(st)]
                    if r >= plan.rounds:
                        continue
                    progress.phase = f"round {r + 1}/{plan.rounds}" + (f" of '{st.label}'" if len(states) > 1 else "")
                    chunk = chunk_size(plan.rounds * plan.iterations_per_round)
                    _timed_round(st, plan.iterations_per_round, clock, sync, probes, progress, chunk=chunk,
                                 round_index=r)
                if rounds_log is not None and states[0].typical_ns:
                    rounds_log.append(states[0].workload.items_per_iteration * 1e9 / states[0].typical_ns)
                if pace is not None and pace("after", r):
                    break
            for st in states:
                _confirm_growth(st, settings, sync, progress, round_index=n_rounds, clock=clock)
            for st in aux_states:
                # After every together round, one phase at a time, each on its own iterator.
                st.per_probe_rounds = [[] for _ in probes]
                st.per_probe_baseline = [None for _ in probes]
                st.per_probe_starts = [[] for _ in probes]
                if st.prepare is not None:
                    st.prepare()
                _warm_up(st, settings if st.label.endswith(DATASET_ALONE) else alone_warmup(settings), clock, sync,
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
        split = input_split(alone[DATASET_ALONE], alone[STEP_ALONE]) if alone else None
        out[st.name] = RawRun(timings=timings, memory=memory, input_wait_ns=st.waits.values(),
                              traces_first_call=st.traces_first_call, traces_steady=st.traces_steady,
                              memory_series=st.growth.series() if st.growth is not None else (),
                              input_split=split, gpu_busy=gpu_busy.collect(st.busy_rounds),
                              input_restart_iterations=tuple(st.restart_marks),
                              pipeline=st.workload.pipeline, trace_counting=st.workload.trace_counting,
                              steady_trace_events=tuple(st.trace_events))
    return out


def _confirm_growth(st: VariantState, settings: RunSettings, sync: Callable[[], None] | None,
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
    start = len(growth.iterations)
    growth.record(measured, round_index)
    while done < target and clock() < deadline \
            and growth.grown_since(start) < memory_growth.CONFIRM_MAX_GROWTH_BYTES:
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


def _plan(st: VariantState, settings: RunSettings) -> Plan:
    if st.share == 1.0:
        return plan_rounds(st.estimate_ns, settings)
    # The extra phases may run a single round of a slow step: they inform,
    # they are not what the gate judges.
    return plan_rounds(st.estimate_ns, dataclasses.replace(
        settings, budget_s=settings.budget_s * st.share,
        min_rounds=1 if st.aux_of is not None else settings.min_rounds))


def _timings(st: VariantState) -> Timings:
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


def _warm_up(st: VariantState, settings: RunSettings, clock: Clock, sync: Callable[[], None] | None,
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


def _reserve(st: VariantState, iterations: int) -> None:
    st.samples.reserve(iterations)
    if st.workload.pull is not None:
        st.waits.reserve(iterations)


def _timed_round(st: VariantState, n: int, clock: Clock, sync: Callable[[], None] | None,
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
        traces_after = w.trace_total()
        st.traces_steady = (st.traces_steady or 0) + traces_after - traces_before
        if traces_after > traces_before and w.trace_events is not None:
            st.trace_events.extend(w.trace_events(traces_before, traces_after))
    for i, peak in enumerate(peaks):
        st.per_probe_rounds[i].append(peak)
    st.busy_rounds.append(gpu_busy.round_readings(probes))  # read by the NVML probes' peak() right after the loop



"""The steady-state ``tf.function`` trace verdict, the same in every gate.

When the baseline had none, an exact count: any trace after warm-up is a
regression (which the stored gate, as for every metric, confirms in a fresh
process). Otherwise a count in the unit the harness saw (``judge_traces``):
it may grow with the rounds or the iterations, so the baseline's count is
scaled to this run by the larger ratio of the two, and the stored gate
confirms a regression in a fresh process, as for throughput.
"""

from __future__ import annotations

import math

from pytest_tfperf.gates.verdict import MetricVerdict, Status, Tolerances, unavailable
from pytest_tfperf.model import TRACE_COUNTING_UNITS, TRACES_BETWEEN_ROUNDS, TRACES_EACH, Direction, Measurement


def trace_scale(baseline: Measurement, current: Measurement) -> tuple[float, float]:
    """(lowest, highest) factor by which ``current``'s steady trace count may differ from ``baseline``'s unchanged.

    What a count grows with depends on the workload and on how the harness counted it
    (``model.TRACE_COUNTING_UNITS``): per process, per round or per iteration, or a mix of them.
    Any mix of those, with any weights, scales by a factor between the smallest and the largest of the
    units' own ratios, so a change of budget or rounds alone never leaves that range.
    """
    ratios = {"process": 1.0}
    base_rounds, cur_rounds = len(baseline.timings.round_sizes), len(current.timings.round_sizes)
    if base_rounds > 0:
        ratios["round"] = cur_rounds / base_rounds
    base_iterations = baseline.timings.iterations_measured
    if base_iterations > 0:
        ratios["iteration"] = current.timings.iterations_measured / base_iterations
    units = set(TRACE_COUNTING_UNITS.get(baseline.trace_counting, ("process",)))
    units |= set(TRACE_COUNTING_UNITS.get(current.trace_counting, ("process",)))
    factors = [ratios[u] for u in units if u in ratios]
    return min(factors), max(factors)


def _counted_over(m: Measurement) -> str:
    rounds, iterations = len(m.timings.round_sizes), m.timings.iterations_measured
    return (f"{m.traces_steady} in {rounds} round{'s' if rounds != 1 else ''} of "
            f"{iterations} iteration{'s' if iterations != 1 else ''}")


def judge_traces(current: Measurement, baseline: Measurement, tol: Tolerances, *,
                 confirmation: Measurement | None = None) -> MetricVerdict:
    """Steady-state traces: an exact count when the baseline had none, else a count in the unit the harness saw.

    The harness sees every trace as it happens (``model.TRACES_EACH``), so a workload that retraces in
    its steady state counts once an iteration (a function retraced on new Python values, a model
    recompiled on every call) or a fixed number of times; where TensorFlow has no tracing callback it
    finds tf.functions between rounds (``model.TRACES_BETWEEN_ROUNDS``), and a model recompiled on every
    call counts once a round. A run that measures other rounds or iterations than the baseline's counts
    differently with unchanged code. The
    baseline's count is scaled to this run by the largest ratio of those units (``trace_scale``): more
    than that is more retracing whatever the unit. Such a rate, like throughput, moves between processes,
    so ``confirmation`` (the same test in a fresh process) must exceed its own expectation too.
    """
    name, unit = "traces_steady", "traces"
    cur, base = current.traces_steady, baseline.traces_steady
    if cur is None or base is None:
        side = "baseline" if base is None else "current measurement"
        msg = f"{name}: not compared: the {side} has no tf.function trace count"
        return unavailable(name, unit, Direction.LOWER_IS_BETTER, msg)
    if base == 0:
        # An exact count: any trace after warm-up is new retracing, whatever the budget. Still, the stored
        # gate sees it again in a fresh process before failing (``confirmation``): a retrace that shows only
        # after N iterations (a dataset's end, a partial batch, a periodic callback) appears in the processes
        # that happened to run that far, and iteration counts of unchanged code vary up to 20x between them.
        allowance = tol.traces_steady_increase
        head = f"{name}: 0 -> {cur} tf.function traces after warm-up"
        rule = "exact count; " + ("any increase fails" if allowance == 0 else f"allowed increase {allowance}")
        if cur - allowance > 0:
            if confirmation is not None and confirmation.traces_steady is not None:
                again = f"a fresh process counted {_counted_over(confirmation)}"
                if confirmation.traces_steady - allowance <= 0:
                    return _trace_verdict(Status.UNCHANGED, 0.0, float(cur), None,
                                          f"{head}: not confirmed ({rule}): {again}")
                rule += f"; {again}: confirmed"
            status = Status.REGRESSED
            body = (f"more retracing than the baseline ({rule}): a tf.function is traced again in the steady "
                    "state, usually because of Python scalars or changing shapes in its arguments")
        else:
            status, body = Status.UNCHANGED, "unchanged"
        return _trace_verdict(status, 0.0, float(cur), None, f"{head}: {body}")

    def expected(run: Measurement) -> tuple[float, float, float]:
        low, high = trace_scale(baseline, run)
        # Rounding slack of 1% of the rate, and the configured allowance.
        return base * low, base * high, tol.traces_steady_increase + 0.01 * base * high

    low, high, slack = expected(current)
    countings = sorted({baseline.trace_counting, current.trace_counting})
    grows = [f"the {u}s" for u in ("round", "iteration")
             if any(u in TRACE_COUNTING_UNITS.get(c, ()) for c in countings)]
    how = (f"counted {' and '.join(_COUNTED.get(c, c) for c in countings)}, a count grows with "
           f"{' or '.join(grows) or 'nothing'}")
    head = (f"{name}: {base} -> {cur} tf.function traces after warm-up (baseline {_counted_over(baseline)}, "
            f"this run {_counted_over(current)}; {how}, so unchanged code counts {_count_range(low, high)} here)")
    again = ""
    more = cur - high > slack
    if more and confirmation is not None and confirmation.traces_steady is not None:
        c_low, c_high, c_slack = expected(confirmation)
        confirmed = confirmation.traces_steady - c_high > c_slack
        again = (f"a fresh process counted {_counted_over(confirmation)}, where unchanged code counts "
                 f"{_count_range(c_low, c_high)}")
        more = confirmed
        if not confirmed:
            return _trace_verdict(Status.UNCHANGED, high, float(cur), (cur - high) / high,
                                  f"{head}: not confirmed: {again}")
    if more:
        seen = f" ({again}: confirmed)" if again else ""
        status, body = Status.REGRESSED, (
            f"more retracing than the baseline in every unit it counts in{seen}: a tf.function is traced "
            "again more often in the steady state, usually because of Python scalars or changing shapes in its "
            "arguments, or a model compiled again")
    elif low - cur > tol.traces_steady_increase + 0.01 * base * low:
        status, body = Status.IMPROVED, "fewer traces than the baseline in every unit it counts in"
    else:
        status, body = Status.UNCHANGED, "unchanged"
    return _trace_verdict(status, high, float(cur), (cur - high) / high, f"{head}: {body}")


_COUNTED = {TRACES_BETWEEN_ROUNDS: "between rounds", TRACES_EACH: "as each trace happened"}


def _count_range(low: float, high: float) -> str:
    return f"{high:.1f}" if math.isclose(low, high) else f"{low:.1f} to {high:.1f}"


def _trace_verdict(status: Status, expected: float, current: float, change: float | None,
                   message: str) -> MetricVerdict:
    return MetricVerdict(
        metric="traces_steady",
        unit="traces",
        direction=Direction.LOWER_IS_BETTER,
        baseline_value=expected,  # the most this run may count with unchanged code (0: an exact count)
        current_value=current,
        relative_change=change,
        ci_low=None,
        ci_high=None,
        status=status,
        minimum_detectable_change=None,
        message=message,
    )

"""The steady-state ``tf.function`` trace verdict, the same in every gate.

Traces after warm-up are exact counts: any increase is a regression, a
decrease an improvement.
"""

from __future__ import annotations

from pytest_tfperf.gates.verdict import MetricVerdict, Status, Tolerances, unavailable
from pytest_tfperf.model import Direction


def judge_traces(current: int | None, baseline: int | None, tol: Tolerances, *,
                 current_iterations: int = 1, baseline_iterations: int = 1) -> MetricVerdict:
    """Steady-state traces: an exact count when the baseline had none, else a rate per iteration.

    A workload that retraces on every call traces as often as calibration
    makes it iterate, which differs between runs; its count is compared as
    traces per iteration, scaled to this run's iterations.
    """
    name, unit = "traces_steady", "traces"
    if current is None or baseline is None:
        side = "baseline" if baseline is None else "current measurement"
        msg = f"{name}: not compared: the {side} has no tf.function trace count"
        return unavailable(name, unit, Direction.LOWER_IS_BETTER, msg)
    expected = float(baseline)
    if baseline > 0 and baseline_iterations > 0:
        expected = baseline / baseline_iterations * current_iterations
    delta = current - expected
    change = delta / expected if expected > 0 else None
    scaled = (f" (baseline {baseline} in {baseline_iterations} iterations, scaled to {expected:.1f} "
              f"for this run's {current_iterations})" if baseline > 0 else "")
    head = f"{name}: {baseline} -> {current} tf.function traces after warm-up{scaled}"
    # Rounding slack of 1% applies only to rates; an exact count of 0 allows no trace at all.
    slack = tol.traces_steady_increase + (0.01 * expected if baseline > 0 else 0.0)
    if delta > slack:
        status = Status.REGRESSED
        body = ("more retracing than the baseline (exact count; "
                + ("any increase fails" if tol.traces_steady_increase == 0
                   else f"allowed increase {tol.traces_steady_increase}")
                + "): a tf.function is traced again in the steady state, usually because of Python scalars "
                  "or changing shapes in its arguments")
    elif delta < -slack:
        status, body = Status.IMPROVED, "fewer traces than the baseline"
    else:
        status, body = Status.UNCHANGED, "unchanged"
    return MetricVerdict(
        metric=name,
        unit=unit,
        direction=Direction.LOWER_IS_BETTER,
        baseline_value=expected,
        current_value=float(current),
        relative_change=change,
        ci_low=None,
        ci_high=None,
        status=status,
        minimum_detectable_change=None,
        message=f"{head}: {body}",
    )

"""The stored-baseline gate (``judge``): one measurement against the runs its baseline keeps.

Throughput is judged against the prediction bound of the baseline's runs, each
measured in its own process (the statistics are ``stored_rule``'s); a
regression must show again in a fresh process (``confirmation``) before it
fails a test. Memory and traces are judged as by every gate (``memory``,
``traces``). Pure: no pytest, no TensorFlow, no I/O.
"""

from __future__ import annotations

import math

from pytest_tfperf.config import DEFAULT_RUNS
from pytest_tfperf.gates import stored_rule
from pytest_tfperf.gates.memory import judge_memory, memory_band
from pytest_tfperf.gates.traces import judge_traces
from pytest_tfperf.gates.verdict import (
    MetricVerdict,
    Status,
    Tolerances,
    Verdict,
    check_same_test,
    format_value,
    overall_status,
    percent,
    signed_percent,
    slowdowns_caught,
    unavailable,
)
from pytest_tfperf.model import Direction, Measurement
from pytest_tfperf.gates.baseline_runs import BaselineRuns
from pytest_tfperf.storage.runs import summarize


def judge(current: Measurement, baseline: Measurement, tolerances: Tolerances, *,
          runs: BaselineRuns | None = None, confirmation: Measurement | None = None) -> Verdict:
    """The stored-baseline gate: ``current`` against ``baseline`` and its runs, metric by metric.

    ``runs`` are the baseline's runs (each from its own process) and recorded
    history; without them ``baseline`` counts as a single run, which is too
    few to judge throughput (see ``stored_rule``). ``confirmation`` is the
    same test measured in a fresh process after a first verdict with
    ``needs_confirmation``: a throughput or memory regression stands only if
    both processes show it.
    """
    check_same_test(current, baseline)
    if confirmation is not None:
        check_same_test(confirmation, baseline)
    if runs is None or not runs.runs:
        runs = BaselineRuns(runs=(summarize(baseline, run_id="baseline", recorded_at=""),))
    metrics = [_judge_stored_throughput(current, confirmation, runs, tolerances)]
    metrics += judge_memory(current.memory, baseline.memory, tolerances, runs=runs,
                            confirmation=None if confirmation is None else confirmation.memory)
    metrics.append(judge_traces(current, baseline, tolerances, confirmation=confirmation))
    confirmable = [m for m in metrics if m.status is Status.REGRESSED and needs_confirmation(m)]
    return Verdict(
        test_id=current.test_id,
        metrics=tuple(metrics),
        status=overall_status(metrics),
        needs_remeasure=False,
        needs_confirmation=confirmation is None and bool(confirmable),
        confirmed=confirmation is not None,
    )


def needs_confirmation(m: MetricVerdict) -> bool:
    """Whether a stored-gate regression of this metric must show in a fresh process too before it fails.

    Every metric does. Throughput and memory move between processes; so does a trace count, a rate or an
    exact count of 0 alike: a retrace that appears only after some number of iterations (a dataset's end, a
    partial batch, a periodic callback) shows in the processes that ran that far, and unchanged code's
    iteration counts varied up to 21x between processes on the committed collections.
    """
    return True


def _judge_stored_throughput(current: Measurement, confirmation: Measurement | None, runs: BaselineRuns,
                             tol: Tolerances) -> MetricVerdict:
    """Throughput against the prediction bound of the baseline's runs (``stored_rule``)."""
    name, unit = "throughput", "items/s"
    values = [current.throughput_per_s] + ([] if confirmation is None else [confirmation.throughput_per_s])
    base = runs.throughputs()
    if not base or min(values) <= 0 or not all(math.isfinite(v) for v in values):
        return unavailable(name, unit, Direction.HIGHER_IS_BETTER,
                           f"{name}: not compared: the baseline or this run has no positive throughput")
    own, spread = stored_rule.applied_spread(base, runs.history_throughputs(), runs.machine)
    d = tol.throughput_decision_threshold
    confidence = tol.stored_throughput_confidence
    call = stored_rule.judge_throughput(spread, values, confidence=confidence, threshold=d,
                                        tolerance=tol.throughput)
    base_value = math.exp(spread.level)
    cur_value = math.exp(math.fsum(math.log(v) for v in values) / len(values))
    n, k = spread.n_runs, spread.n_history
    behind = f"{n} baseline run{'s' if n != 1 else ''}" + (f" and {k} recorded run{'s' if k != 1 else ''}" if k else "")
    common = dict(metric=name, unit=unit, direction=Direction.HIGHER_IS_BETTER, baseline_value=base_value,
                  current_value=cur_value, relative_change=call.change, confidence=confidence,
                  decision_threshold=-d, baseline_runs=n, history_runs=k)
    if call.status == "unknown":
        message = (f"{name}: {format_value(base_value, unit)} -> {format_value(cur_value, unit)} "
                   f"({signed_percent(call.change)}): not judged: "
                   f"the baseline has {behind} of this environment, and the gate needs at least "
                   f"{stored_rule.MIN_RUNS} runs, each in its own process, to learn how far this machine's speed "
                   f"moves between processes (one process cannot tell a slow process from a slowdown); refresh "
                   f"it with `pytest --tfperf --tfperf-update` (it measures {DEFAULT_RUNS} runs) or "
                   "record runs on the main branch with --tfperf-record")
        return MetricVerdict(**common, ci_low=None, ci_high=None, status=Status.NOISY,  # type: ignore[arg-type]
                             minimum_detectable_change=math.inf, message=message)
    conf = percent(confidence)
    per_run = [math.expm1(math.log(v) - spread.level) for v in values]
    head = (f"{name}: {format_value(base_value, unit)} -> {format_value(cur_value, unit)} "
            f"({signed_percent(call.change)}, "
            f"{conf} CI {signed_percent(call.ci_low)} to {signed_percent(call.ci_high)})")
    if spread.sd > own.sd:
        if runs.machine.source == "assumed":
            varies = (f"the baseline's runs vary by {math.expm1(own.sd):.1%} between processes ({behind}), and no "
                      f"calibration baseline measured this machine, so a spread of {math.expm1(spread.sd):.1%} is "
                      "assumed (what a shared CPU runner's processes typically show; refresh with "
                      "`pytest --tfperf --tfperf-update` and commit its tfperf-calibration-*.json to measure it)")
        else:
            whose = ("its calibration workload" if runs.machine.source == "calibration"
                     else "this suite's tests typically")
            varies = (f"the baseline's runs vary by {math.expm1(own.sd):.1%} between processes ({behind}); this "
                      f"machine's by {math.expm1(spread.sd):.1%} ({whose}, {spread.df:.0f} degrees of freedom), "
                      "the spread assumed")
    else:
        varies = f"the baseline's runs vary by {math.expm1(spread.sd):.1%} between processes ({behind})"
    spread_text = f"{varies}, so its {conf} prediction bound for a new run lies {call.bound_change:.1%} below its level"
    limit_text = f"against this baseline, {slowdowns_caught(call.detection_limit)} are caught here"
    if call.detection_limit > tol.throughput:
        limit_text += (f", wider than the {percent(tol.throughput)} tolerance: for finer changes on this machine, "
                       "measure the other version beside this one with --tfperf-against=origin/main")
    if call.status == "regressed":
        status = Status.REGRESSED
        if confirmation is None:
            seen = f"this process ran {-per_run[0]:.1%} slower than the baseline, below its bound"
        else:
            seen = (f"this process ran {-per_run[0]:.1%} and a fresh process {-per_run[1]:.1%} slower than the "
                    "baseline, both below its bound")
        body = (f"slower than the baseline: {seen}; {spread_text} (p = {call.p_value:.2g}), and the change is beyond "
                f"the {d:.1%} decision threshold; {limit_text}")
    elif call.status == "improved":
        status = Status.IMPROVED
        body = (f"faster than the baseline by {call.change:.1%}, above its {conf} prediction bound and beyond the "
                f"{percent(tol.throughput)} tolerance; {spread_text}")
    else:
        status = Status.UNCHANGED
        if confirmation is not None and len(per_run) == 2:
            body = (f"not confirmed: this process ran {signed_percent(per_run[0])} against the baseline, "
                    f"but a fresh process ran {signed_percent(per_run[1])}; {spread_text}; {limit_text}")
        else:
            body = f"unchanged: within the bound; {spread_text}; {limit_text}"
    return MetricVerdict(**common, ci_low=call.ci_low, ci_high=call.ci_high, status=status,  # type: ignore[arg-type]
                         minimum_detectable_change=call.detection_limit, message=f"{head}: {body}",
                         p_value=call.p_value)


def baseline_bands(runs: BaselineRuns, tol: Tolerances) -> dict[str, tuple[float, float, float]]:
    """(low, level, high) per metric as history.csv names it (``throughput_per_s``, ``added_peak_...``): the
    bound the stored gate applies to a new run, from the same functions ``judge`` uses, so the HTML report
    draws the bound that judged (throughput in items/s, memory in bytes)."""
    out: dict[str, tuple[float, float, float]] = {}
    band = stored_rule.throughput_band(runs.throughputs(), runs.history_throughputs(), runs.machine,
                                       confidence=tol.stored_throughput_confidence)
    if band is not None:
        out["throughput_per_s"] = band
    names = dict.fromkeys(name for r in runs.runs for name, _ in r.memory_added_bytes)
    for name in names:
        between, memory = memory_band(name, runs, tol)
        if between.known:
            out[f"added_{name}"] = (memory.low, memory.level, memory.high)
    return out

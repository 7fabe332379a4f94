"""What each catalog entry's explanation should name: the cause of the anti-pattern's cost, as a profile sees it.

``--tfperf-explain`` splits a measured change over the ops, layers and tf.data stages that moved
(``profiling.attribution``). For most entries the anti-pattern's cost is an op or a stage, and the
explanation's top cause should name it; ``pattern`` matches the cause's label (or, for the consumer's wait,
the stage named behind it). Where the cost is not an op the profile records, ``says`` is what the
explanation names instead. ``benchmarks/catalog_causes.py`` measures what it does name; docs/catalog.md
shows both.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROUNDS = 5
ROUND_S = 0.2
BUDGET_S = 2.0  # the plugin's default budget: each side's profiled windows take about half of it


NOT_AN_OP = ""  # the entry's cost is no op or stage: the explanation names none (see ``says``)


@dataclass(frozen=True, slots=True)
class Cause:
    pattern: str  # a regular expression over the top cause's label (and the stage behind a wait)
    says: str  # the cause in words, as docs/catalog.md states it
    # False where the entry's cost is not time (memory, NaNs): a time profile has nothing to name, and what
    # moves in it is noise; such entries are reported, not judged
    judged: bool = True


CAUSES: dict[str, Cause] = {
    "allocation_in_loop": Cause(r"^RandomStandardNormal ", "the allocation op: tf.random.normal's "
                                "RandomStandardNormal, run eagerly every iteration"),
    "host_to_device": Cause(r"^Identity ", "the per-row transfer op: one Identity (tf.identity) per row"),
    "input_pipeline": Cause(r"(^|\b)Map \(tf\.data stage, sequential\) (appeared|grew)|behind it \S*Map\S* \(sequential\)"
                            r"|Map \(tf\.data stage, sequential; was parallel\)",
                            "the sequential map (a tf.data stage that runs one element at a time)"),
    "vectorised_preprocessing": Cause(r"MapAndBatch", "the per-element map (map before batch, which TensorFlow "
                                      "runs fused with the batch as MapAndBatch)"),
    "session_churn": Cause(NOT_AN_OP, "not an op: the Session's construction, which TensorFlow's profiler does not "
                           "trace; the explanation leaves it in its remainder (time outside ops and stages) and "
                           "finds the graph's own ops (MatMul) unchanged"),
    "oversized_batch": Cause(NOT_AN_OP, "memory, not time: the cost is the big batch's peak, which a time "
                             "profile does not hold; in time the anti-pattern is the faster, and the explanation "
                             "names at most the fix's gradient accumulation (AssignAddVariableOp)", judged=False),
    "eager_memory_growth": Cause(NOT_AN_OP, "memory, not time: what is kept alive costs no op time; nothing moves "
                                 "beyond its noise", judged=False),
    "retracing": Cause(r"^retracing of ", "the retracing of the tf.function (named), every call"),
    "numerical_instability": Cause(NOT_AN_OP, "numerics, not time: a NaN runs as fast as a number; nothing moves "
                                   "beyond its noise", judged=False),
    "thread_starvation": Cause(NOT_AN_OP, "not in this process: each side runs in a worker process of its own "
                               "(its thread pools are set at start-up), which the profile of this one does not see"),
    "gpu_memory_config": Cause(NOT_AN_OP, "GPU memory reserved at start-up: no op; needs a GPU", judged=False),
    "keras_retracing": Cause(r"^retracing of ", "the retracing of Keras' train step (one_step_on_data) after every "
                             "compile()"),
}


def top_cause(explanation: Mapping[str, Any]) -> str:
    """The first cause listed, in words ("RandomStandardNormal outside layers grew +3.1 ms"), or why none.

    When nothing on the step's own path moved yet the step got slower, the tf.data stage that grew most (the
    explanation lists it under "tf.data also moved") is the cause named: a pipeline without a prefetch runs
    its stages on the consumer's thread, inside the wait, so their growth is not the wait's.
    """
    causes = explanation.get("causes") or []
    grew = [c for c in explanation.get("pipeline") or [] if c.get("delta_ms", 0) > 0]
    if not causes and grew and float(explanation.get("measured_ms") or 0.0) > 0:
        c = max(grew, key=lambda c: c["delta_ms"])
        mode = "parallel" if c.get("current_parallel") else "sequential"
        return f"{c['label']} (tf.data stage, {mode}) {c['how']} {c['delta_ms']:+.2f} ms (tf.data, beside the step's path)"
    if not causes:
        lines = explanation.get("lines") or []
        # the line saying what moved (the lines before it say whether the parts add up, and in which frame)
        said = [line.strip() for line in lines[1:] if "moved" in line]
        return said[0] if said else (lines[0] if lines else "no explanation")
    top = causes[0]
    text = f"{top['label']} {top['how']} {top['delta_ms']:+.2f} ms"
    paced = explanation.get("paced_by")
    if top.get("kind") == "input wait" and paced:
        mode = "parallel" if paced.get("current_parallel") else "sequential"
        text += f", behind it {paced['label']} ({mode})"
    return text


def names_its_cause(key: str, explanation: Mapping[str, Any]) -> bool:
    """Whether the explanation names what the entry says its cause is.

    For an op or a stage: the top cause (with the stage behind a wait) matches ``pattern``. For a cost that
    is no op (``NOT_AN_OP``): no listed cause carries a fifth of the measured change, which the explanation
    leaves in its remainder (or, for a change within noise, says that nothing moved).
    """
    cause = CAUSES.get(key)
    if cause is None:
        return False
    if cause.pattern == NOT_AN_OP:
        measured = abs(float(explanation.get("measured_ms") or 0.0))
        listed = max((abs(float(c["delta_ms"])) for c in explanation.get("causes") or []), default=0.0)
        return "causes" in explanation and listed <= 0.2 * max(measured, 1e-9) + 1e-9
    return re.search(cause.pattern, top_cause(explanation)) is not None


def named_anywhere(key: str, explanation: Mapping[str, Any]) -> bool:
    """Whether any line of the explanation (a cause, the stage behind a wait, "tf.data also moved") names it."""
    cause = CAUSES.get(key)
    if cause is None or cause.pattern == NOT_AN_OP:
        return names_its_cause(key, explanation)
    lines = [line.strip() for line in explanation.get("lines") or []]
    return any(re.search(cause.pattern, line) for line in lines) or names_its_cause(key, explanation)


def median_call_s(variants: Mapping[str, Callable[[], object]], rounds: int = ROUNDS,
                  round_s: float = ROUND_S) -> dict[str, float]:
    """Each variant's median call time, in interleaved rounds (a slow spell hits all of them alike)."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for run in variants.values():
        run()
        run()
    for _ in range(rounds):
        for name, run in variants.items():
            end = time.perf_counter() + round_s
            while True:
                t0 = time.perf_counter()
                run()
                t1 = time.perf_counter()
                times[name].append(t1 - t0)
                if t1 >= end:
                    break
    return {name: statistics.median(v) for name, v in times.items()}


def explain_comparison(test_id: str, anti: Callable[[], object], fix: Callable[[], object], rootdir: str | Path, *,
                       budget_s: float = BUDGET_S) -> dict[str, Any]:
    """An anti-pattern explained against its fix as ``--tfperf-explain`` explains a failed ``compare(reference=fix)``.

    Both are timed (interleaved rounds), then each side gets a profiled pass (``explain.explanation.profile_side``,
    each side's windows sized by its own median so that an anti-pattern 400x slower than its fix does not
    profile for a minute, which lost the profiler's events) and ``explain.explanation.explain`` attributes the
    measured change. Returns the explanation's JSON form with the timings.
    """
    from pytest_tfperf.explain.explanation import explain, iterations_for, profile_side
    from pytest_tfperf.measuring.workload import Workload

    medians = median_call_s({"anti": anti, "fix": fix})
    started = time.perf_counter()
    base, why = profile_side(Workload(call=fix), rootdir, test_id, "reference",
                             iterations_for(medians["fix"], budget_s))
    current = None
    if base is not None:
        current, why = profile_side(Workload(call=anti), rootdir, test_id, "variant",
                                    iterations_for(medians["anti"], budget_s))
    explanation = explain(base, current, medians["anti"] - medians["fix"], why)
    return {**explanation.to_dict(), "lines": list(explanation.lines), "anti_ms": medians["anti"] * 1e3,
            "fix_ms": medians["fix"] * 1e3, "explain_s": time.perf_counter() - started}

"""An attribution read out: the lines of a failure message and the JSON form reports read.

Every number printed is one the attribution measured; a part that is larger
than the change it belongs to says why in its own line (CPU time on threads
in parallel, self times overlapping), and parts that do not add up to the
measured change are said not to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pytest_tfperf.profiling.names import is_optimizer_group
from pytest_tfperf.profiling.noise import RELEVANT_SHARE
from pytest_tfperf.profiling.parts import (
    ADDS_UP_SHARE, CPU_FRAME, CPU_KINDS, DEVICE, DEVICE_OP_KINDS, HOST_OP_KINDS, Attribution, Change,
)


def attribution_dict(att: Attribution) -> dict[str, object]:
    """The JSON form for reports: milliseconds per iteration, causes in order, the lines as printed.

    A change's ``delta_ms`` and ``noise_ms`` are its part of the step's wall time (what adds up); in the CPU
    frame ``own_delta_ms``/``own_noise_ms`` are its CPU time, as tested."""
    def ms(seconds: float) -> float:
        return round(seconds * 1e3, 4)

    def change(c: Change) -> dict[str, object]:
        ratio = (c.wall / c.delta) if c.wall is not None and c.delta else 1.0
        out: dict[str, object] = {"key": c.key, "kind": c.kind, "label": c.label, "how": c.how,
                                  "delta_ms": ms(c.wall if c.wall is not None else c.delta),
                                  "noise_ms": ms(c.noise * abs(ratio))}
        if ratio != 1.0:
            out.update(own_delta_ms=ms(c.delta), own_noise_ms=ms(c.noise), own_unit="cpu")
        if c.below_cutoff:
            out["below_cutoff"] = True
        if c.across is not None:
            out["across_pairs_ms"] = ms(c.across * abs(ratio))  # in the step's wall time, as delta_ms
            out["across_pairs"] = c.across_pairs
        if c.kind == "stage":
            out.update(base_parallel=c.base_parallel, current_parallel=c.current_parallel,
                       base_ms_per_element=None if c.base_per_element is None else ms(c.base_per_element),
                       current_ms_per_element=None if c.current_per_element is None else ms(c.current_per_element))
        return out

    return {
        "measured_ms": ms(att.measured), "profiled_ms": ms(att.profiled), "profiled_noise_ms": ms(att.profiled_noise),
        "frame": att.frame, "adds_up": att.adds_up, "timed_vs_profiled_ms": ms(att.timed_vs_profiled),
        "wall_per_cpu": round(att.rho, 4), "busy_threads": [round(v, 3) for v in att.busy_threads],
        "common_factor": round(att.scale, 4), "common_factor_ms": ms(att.drift),
        "input_factor": round(att.input_factor, 4), "input_factor_ms": ms(att.input_drift),
        "causes": [change(c) for c in att.causes], "unlisted": [change(c) for c in att.unlisted],
        "leads": [change(c) for c in att.leads],
        "remainder_ms": ms(att.remainder), "within_noise": att.within_noise,
        "remainder_parts_ms": {"within_noise_groups": ms(att.within_noise_delta), "outside_ops": ms(att.outside),
                               "untraced_cpu": ms(att.untraced), "idle": ms(att.idle),
                               "tfdata_cpu": ms(att.pipeline_cpu),
                               "moved_unlisted": ms(att.unlisted_delta)},
        "detectable_ms": ms(att.detectable), "groups_tested": att.groups_tested, "pairs": att.pairs,
        "input_wait": change(att.input_wait) if att.input_wait else None,
        "paced_by": change(att.paced_by) if att.paced_by else None,
        "pipeline": [change(c) for c in att.pipeline],
        "path": att.path, "off_path": [change(c) for c in att.off_path],
        "device_busy": change(att.device_busy) if att.device_busy else None,
        "reshaped": [change(c) for c in att.reshaped],
        "base_logdir": att.base_logdir, "current_logdir": att.current_logdir,
        "lines": explanation_lines(att),
    }


def _formatter(unit: str) -> Callable[..., str]:
    scale, u = (1e3, "ms") if unit == "ms" else (1e6, "us")

    def t(seconds: float, sign: bool = True) -> str:
        value = seconds * scale
        digits = 2 if abs(value) < 10 else 1
        return f"{value:+.{digits}f} {u}" if sign else f"{value:.{digits}f} {u}"
    return t


def explanation_lines(att: Attribution, *, unit: str = "ms") -> list[str]:
    """``where the time went: ...`` and one line per cause, the remainder, and where the raw profiles are."""
    t = _formatter(unit)
    lines = [f"where the time went: {t(att.measured)}/iteration measured; the profiled pass {t(att.profiled)} "
             f"±{t(att.profiled_noise, sign=False)}, which the parts below add up to"]
    lines.append("  " + _adds_up_line(att, t))
    if att.frame == CPU_FRAME:
        before, now = att.busy_threads
        lines.append(f"  parts in CPU time (the process's clock, every thread), turned into the step's wall time "
                     f"at {now:.2f} threads busy now (was {before:.2f})")
        if att.overtraced:
            lines.append("  the traced ops' self times exceeded the process's CPU clock (threads preempted inside "
                         "ops on a loaded machine): each window's ops were scaled down to the clock")
    if att.pairs > 1:
        lines.append(f"  each layer, op, tf.data stage and the wait for input tested across the {att.pairs} pairs of "
                     "processes (one of each version in each) where it was traced: its own between-process spread, "
                     "each process's load included, read from them")
    if att.device_busy is not None or att.path == DEVICE:
        lines.append("  " + _path_line(att, t))
    seen = _seen(att, t)
    if att.nothing_moved:
        if att.profiled_moved and att.scale != 1.0 and abs(att.drift) > 0.5 * abs(att.profiled):
            lines.append(f"  no op or stage moved beyond its noise apart from the factor every group moved by (below): "
                         f"none moved by more than {seen} by itself ({att.within_noise} groups compared)")
        elif att.profiled_moved:
            why = "" if att.leads else (", so the change is spread thinly over many groups or lies outside the "
                                        "traced ops")
            lines.append(f"  the profiled pass moved, but no op or stage moved beyond its noise: none moved by more "
                         f"than {seen} ({att.within_noise} groups compared){why}")
        else:
            lines.append(f"  no op or stage moved beyond its noise, nor did the profiled pass ({att.within_noise} "
                         f"groups compared; a move of {seen} in any of them would have been seen; groups under "
                         f"{RELEVANT_SHARE:.1%} of the step are not tested)")
        if att.leads:
            lines.append("  most likely where, none beyond its noise by itself (each needed the ± beside it): "
                         + ", ".join(_lead(c, att, t) for c in att.leads))
    elif not att.causes:
        lines.append(f"  nothing on the step's own path (its ops, the consumer's wait) moved beyond its noise "
                     f"(a move of {seen} would have been seen)")
    if att.scale != 1.0 and att.drift:
        why = ("both sides ran in alternating windows, so not steady machine load: a change that touches every "
               "op, such as threads, memory or caches, or load in a few windows" if att.same_session
               else "machine load, another process or day, threads, or a change that touches every op")
        lines.append(f"  every group x{att.scale:.2f}, read from {att.factor_groups} groups the change left alone "
                     f"({why}): {t(att.drift)}")
    if att.input_drift:
        lines.append(f"  the consumer's wait for input x{att.input_factor:.2f}, with no tf.data stage or function "
                     f"beyond its noise (the pipeline ran {'slower' if att.input_drift > 0 else 'faster'} as a "
                     f"whole: machine load or threads): {t(att.input_drift)}")
    for change in att.causes:
        lines.append(f"  {_cause(change, att, t)}" + _stage_note(change))
        if change.kind == "input wait" and att.paced_by is not None:
            p = att.paced_by
            moved = f" {p.how} {t(p.tested)}{_where(p, att)}" if p.beyond_noise else ""
            lines.append(f"    behind it: {_describe(p)}{moved}" + _stage_note(p))
    optimizer_line = _optimizer_line(att)
    if optimizer_line:
        lines.append(optimizer_line)
    others = [c for c in att.pipeline if c is not att.paced_by][:3]
    if others:
        lines.append("  tf.data also moved (stage times overlap: each includes its wait for the stage upstream):")
        lines += [f"    {_describe(c)} {c.how} {t(c.tested)} ±{t(c.noise, sign=False)}{_where(c, att)}"
                  + _stage_note(c) for c in others]
    shown = {c.key for c in others} | ({att.paced_by.key} if att.paced_by is not None else set())
    for c in att.reshaped:
        if c.key not in shown:
            lines.append(f"  tf.data runs differently: {_describe(c)}" + _stage_note(c))
    if att.off_path:
        where = ("on the host too (op launches and host work, overlapping the kernels: not added)"
                 if att.path == DEVICE else "on the GPU too (kernels, overlapping the host: not added)")
        lines.append(f"  {where}:")
        lines += [f"    {_describe(c)} {c.how} {t(c.delta)} ±{t(c.noise, sign=False)}" for c in att.off_path[:3]]
    lines.append("  " + _remainder_line(att, t))
    hint = _hint(att)
    if hint:
        lines.append("  " + hint)
    if att.base_logdir and att.base_logdir == att.current_logdir:
        lines.append(f"  raw profile (both sides, alternating windows): tensorboard --logdir {att.base_logdir}")
    elif att.base_logdir or att.current_logdir:
        lines.append(f"  raw profiles: tensorboard --logdir {att.base_logdir} (baseline), "
                     f"tensorboard --logdir {att.current_logdir} (current)")
    return lines


def _where(change: Change, att: Attribution) -> str:
    """Where a change tested across pairs of processes was read: the pairs where its group was traced."""
    if change.across is None or att.pairs <= 1:
        return ""
    n = change.across_pairs or att.pairs
    return f" across the {n} pairs" if n == att.pairs else f" across {n} of the {att.pairs} pairs"


def _lead(change: Change, att: Attribution, t: Callable[..., str]) -> str:
    where = _where(change, att)
    cpu = " of CPU time" if att.frame == CPU_FRAME and change.kind in CPU_KINDS else ""
    return f"{_describe(change)} {change.how} {t(change.tested)} ±{t(change.noise, sign=False)}{cpu}{where}"


def _seen(att: Attribution, t: Callable[..., str]) -> str:
    share = f", {100 * att.detectable / att.step:.0f}% of the step" if att.step > 0 else ""
    return f"{t(att.detectable, sign=False)}{share}"


def _adds_up_line(att: Attribution, t: Callable[..., str]) -> str:
    off = att.timed_vs_profiled
    share = abs(off) / abs(att.measured) if att.measured else float("inf")
    if att.adds_up:
        return (f"they add up to the measured change within {ADDS_UP_SHARE:.0%}: the timed rounds and the profiled "
                f"pass differ by {t(off)}")
    within = "within" if abs(off) <= att.profiled_noise else "beyond"
    pct = f"{share:.0%} of it" if share != float("inf") else "the measured change is zero"
    return (f"the parts do not add up to the measured change: the profiled pass differs from the timed rounds by "
            f"{t(-off)} ({pct}; {within} the pass's own noise), so the parts explain the profiled pass only")


def _optimizer_line(att: Attribution) -> str | None:
    """Why an optimizer grew beside a layer that appeared or grew: its update reads and writes every trainable
    weight each step, so a layer a change adds or widens makes it slower by the new weights' share. Listed bare
    (held-out sets 3 and 4 named it first where a head of millions of weights was added), it reads as if the
    optimizer itself had changed; the line says which layer its growth more likely comes with (and the ranking,
    ``attribution._ranked``, lists it after that layer)."""
    grown = [c for c in att.causes if c.kind == "layer" and c.how in ("appeared", "grew")]
    optimizer = next((c for c in grown if is_optimizer_group(c.key)), None)
    layers = [_leaf(c.key) for c in grown if c is not optimizer]
    if optimizer is None or not layers:
        return None
    return (f"  {_leaf(optimizer.key)} is the optimizer: its update reads and writes every trainable weight, so it "
            f"grows with the weights a change adds or widens ({', '.join(layers[:2])} above); read it with that "
            "layer, unless the optimizer or its settings changed")


def _leaf(key: str) -> str:
    """A group's own name, without its kind or the scopes around it: ``layer:functional/planted_head`` ->
    ``planted_head`` (its label also carries its op family)."""
    return key.split(":", 1)[-1].rsplit("/", 1)[-1]


def _cause(change: Change, att: Attribution, t: Callable[..., str]) -> str:
    how = change.how
    cut = " (below a side's top groups there, so part of it may have been in that side's other groups)" \
        if change.below_cutoff else ""
    cpu = att.frame == CPU_FRAME and change.kind in CPU_KINDS and change.wall is not None
    if change.across is not None and att.pairs > 1:
        # the test's change and its noise side by side; the first pair's own change is the additive part
        head = (f"{_describe(change)} {how} {t(change.across)} ±{t(change.noise, sign=False)}{_where(change, att)} "
                f"of processes{cut}; in the first pair {t(change.delta)}")
        if cpu:
            return (f"{head} of CPU time, {t(change.wall)} of the step's wall time at "
                    f"{att.busy_threads[1]:.2f} threads busy")
        return head
    head = f"{_describe(change)} {how} {t(change.delta)} ±{t(change.noise, sign=False)}{cut}"
    if cpu:
        return (f"{head} of CPU time: {t(change.wall)} of the step's wall time at "
                f"{att.busy_threads[1]:.2f} threads busy")
    return head


def _remainder_line(att: Attribution, t: Callable[..., str]) -> str:
    more = f", {len(att.unlisted)} more that moved {t(att.unlisted_delta)}" if att.unlisted else ""
    head = f"remainder {t(att.remainder)}: groups within their noise {t(att.within_noise_delta)}{more}, "
    if att.frame == CPU_FRAME:
        work = f"tf.data functions' CPU (on tf.data's threads) {t(att.pipeline_cpu)}, " if att.pipeline_cpu else ""
        who = "Python, wrappers, tf.data stages' own work, the profiler" if att.stages else \
            "Python, wrappers, the profiler"
        return (head + work + f"CPU time outside the traced ops ({who}) {t(att.untraced)}, "
                f"time no thread computed (waits, sleeps, lost parallelism) {t(att.idle)}")
    if att.path == DEVICE:
        return head + f"GPU idle or streams overlapping {t(att.outside)}"
    why = " (negative: self times on threads running in parallel add up to more than the wall time)" \
        if att.outside < 0 else ""
    return head + f"outside ops and stages {t(att.outside)}{why}"


def _path_line(att: Attribution, t: Callable[..., str]) -> str:
    """Which time the parts are (host or device) and why: the GPU's busy time beside the step's."""
    busy = att.device_busy
    if att.path == DEVICE:
        now = f" ({t(busy.current, sign=False)}/iteration now)" if busy is not None else ""
        return (f"on the GPU: the device set the pace{now}, so the parts are its kernels' time; "
                "host op times are launches")
    assert busy is not None
    return (f"on the GPU: busy {t(busy.current, sign=False)}/iteration now, less than the host's own work, "
            "so the parts are host time; kernels overlap it")


def _hint(att: Attribution) -> str | None:
    """Over half of a profiled change that moved beyond chance lies where no op or stage can be named, more
    than any cause listed: where to look instead (the profile cannot name what it did not trace)."""
    if att.path == DEVICE or not att.profiled_moved or att.profiled <= 0 or att.pipeline:
        return None  # (a tf.data stage or function that moved is named above: the hints are for when none is)
    # When the pass moved by another amount than the timed rounds, beyond its own noise, part of what lies
    # outside its ops may be the pass's own difference, and a guess about it accuses the wrong code (seen:
    # "Python work" for a sleep, and for a layer added to a 1 ms step whose pass moved 4x the rounds). So the
    # guess is made only if it survives the worst case: what the pass read beyond the rounds taken from the part
    # it names, what is left is still over half of the change, the pass's or the rounds' whichever is larger (a
    # Session built per call whose pass read 14% more than the rounds keeps its hint; a pass at 4x the rounds
    # does not). A pass that read less than the rounds took nothing extra from the part: the worst case is that
    # the rest lies elsewhere, which the larger change below already counts (the same Session, its pass 32% under
    # the rounds, lost its hint when the shortfall was taken from it too).
    beyond = -att.timed_vs_profiled  # the pass's change over the rounds'
    off = max(0.0, beyond) if not att.adds_up and abs(beyond) > att.profiled_noise else 0.0

    def names(part: float) -> bool:
        return part - off > 0.5 * max(att.profiled, abs(att.measured)) \
            and all(part > abs(c.wall or c.delta) for c in att.causes)

    untraced = att.untraced if att.frame == CPU_FRAME else att.outside
    if names(untraced):
        if att.stages:
            # Seen on held-out pipelines of all-graph stages (set 8): a map added, its cost spread over the
            # stages' own work, which no op or function traces. "Python work" would accuse code that has none.
            return ("most of the profiled change is outside every op and tf.data function TensorFlow traced: with "
                    "a tf.data pipeline that includes its stages' own work (dispatching, copying, batching "
                    "elements) as well as Python between ops, and no stage moved beyond its noise to say which")
        return ("most of the profiled change is outside every op and stage TensorFlow traced: Python work "
                "between ops, such as a Session, graph, model or tf.function built on every call")
    if att.frame == CPU_FRAME and names(att.idle):
        return ("most of the profiled change is time no thread computed: waits for input, I/O, sleeps or locks, "
                "or work that ran on parallel threads before and no longer does")
    return None


def _describe(change: Change) -> str:
    if change.kind in HOST_OP_KINDS + DEVICE_OP_KINDS and change.label:
        return change.label
    if change.kind == "stage":
        mode = _mode(change.current_parallel if change.how != "vanished" else change.base_parallel)
        was = _mode(change.base_parallel)
        note = f"; was {was}" if change.how not in ("appeared", "vanished") and was != mode else ""
        return f"{change.label} (tf.data stage, {mode}{note})"
    return change.label


def _mode(parallel: bool | None) -> str:
    return "parallel" if parallel else "sequential"


def _stage_note(change: Change) -> str:
    if change.kind != "stage":
        return ""
    parts: Sequence[str] = [f"{side} {value * 1e3:.2f} ms/element" for side, value in
                            (("was", change.base_per_element), ("now", change.current_per_element))
                            if value is not None]
    return f" ({', '.join(parts)})" if parts else ""

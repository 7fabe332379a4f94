"""Where the time went: a measured per-iteration change split over the groups of ops and stages that moved.

Given the baseline's and the current profile and the change the gate measured
(seconds per iteration, current minus baseline), each group's change is its
mean over the current windows minus the common factor times its mean over the
baseline windows. A group is a cause when its test (``profiling.noise``)
rejects "no change" under Holm's procedure over every group compared, so that
unchanged code has any group blamed in at most ``noise.FAMILY_ALPHA`` of
comparisons whatever the number of groups; the common factor is read from the
groups the change did not touch. Across pairs of processes (``replicates``) a
group's test reads its spread from the pairs, each process's load included, and
no factor is taken out (``profiling.across``). No floor tuned on the data decides.

The parts (``profiling.parts`` says the frame: CPU time turned into wall time
through the measured parallelism, or self time) add up to the profiled pass's
change in wall time; the pass is a measurement of its own, checked against
the gate's (``Attribution.adds_up``), so a wrong measured change reads as
parts that do not add up. No printing here: ``profiling.wording`` gives lines.

On a GPU the profile has two kinds of op time that overlap: the host's op
events (on a GPU, mostly the launch of the op's kernels) and the device's
kernels (``device layer``/``device op`` groups). They are not added together.
The **step's path** is the device when the current side's busiest GPU ran
kernels for longer per iteration than the host's own groups took: the device
groups are then the additive parts (self-time frame), the common factor and
the steadying read from them. Otherwise the host is, as without a GPU. The
groups of the other path that moved are listed apart (``off_path``), like
tf.data stages: they overlap the path, so they do not add to the change.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from pytest_tfperf import stats
from pytest_tfperf.profiling import noise
from pytest_tfperf.profiling.names import is_optimizer_group
from pytest_tfperf.profiling.across import across_pairs, pair_prepared
from pytest_tfperf.profiling.noise import (
    DEVICE_OP_KINDS, FAMILY_ALPHA, SHORT_EVENT_S, Factor, Prior, Test, group_test, holm,
)
from pytest_tfperf.profiling.parts import (
    CPU_FRAME, CPU_KINDS, DEVICE, HOST, PIPELINE_KINDS, SELF_FRAME, Attribution, Change,
)
from pytest_tfperf.profiling.profile_model import Group, Profile
from pytest_tfperf.profiling.stage_alignment import StageNode, aligned_keys
from pytest_tfperf.profiling.wording import attribution_dict, explanation_lines

__all__ = ["Attribution", "Change", "attribute", "attribution_dict", "explanation_lines", "host_path_time",
           "step_path"]

DEFAULT_LIMIT = 5
# The CPU frame holds when the traced self times are within this share of the process's CPU clock or under it:
# beyond, some traced events wait rather than compute, and the frame says so.
OVERTRACED_SHARE = 0.10


def attribute(base: Profile, current: Profile, measured: float, *, limit: int = DEFAULT_LIMIT,
              replicates: Sequence[tuple[Profile, Profile]] = ()) -> Attribution:
    """Split ``measured`` (seconds per iteration, current minus baseline) over the groups that moved.

    ``replicates``: more (baseline, current) pairs, each profiled in its own two processes (none shared with
    ``base``/``current``'s): the host's groups traced in enough of the pairs are then tested across them
    (``profiling.across``) instead of within the first pair; the parts and their sizes stay those of ``base``
    and ``current``."""
    if not math.isfinite(measured):
        raise ValueError(f"measured change must be finite, got {measured!r}")
    # A stage inserted or removed above others changes their paths, which are their keys: pair them again first
    base = _stages_aligned(base, current)
    replicates = [(_stages_aligned(b, c), c) for b, c in replicates]
    raw_base, raw_current = base, current
    path = step_path(current)
    devices = base.has_device or current.has_device
    base, current = noise.within_cpu(base, CPU_KINDS), noise.within_cpu(current, CPU_KINDS)
    if noise.STEADY_WINDOWS:
        base, current = noise.steadied(base, current)
        if devices:
            base, current = noise.steadied(base, current, device=True)
    host_f = noise.common_factor(base, current)
    pairs = [(base, current)] + [pair_prepared(b, c) for b, c in replicates]
    device_f = noise.common_factor(base, current, device=True) if devices else Factor()
    keys = [g.key for g in base.groups] + [g.key for g in current.groups if base.group(g.key) is None]
    shrink_host = _prior(base, current, host_f.scale, device=False)
    shrink_device = _prior(base, current, device_f.scale, device=True) if devices else None
    pending: list[tuple[Test, dict[str, object]]] = []
    clock = group_test(raw_base.cpu, raw_current.cpu, host_f.scale) \
        if len(raw_base.cpu) > 1 and len(raw_current.cpu) > 1 else None
    for k in keys:
        b, c = base.group(k), current.group(k)
        ref = c if c is not None else b
        assert ref is not None
        pending.append(_group(b, c, base, current, device_f if ref.on_device else host_f, clock,
                              (shrink_device if ref.on_device else shrink_host) if ref.kind in _SHRUNK else None))
    pending.append(_series("other", "other", "groups beyond the top kept", base.other, current.other, host_f,
                           hidden=_crossed_cut(base, current, host_f.scale)))
    if devices:
        pending.append(_series("device:other", "device op", "kernels of groups beyond the top kept",
                               base.device_other or (0.0,) * base.windows,
                               current.device_other or (0.0,) * current.windows, device_f))
    if replicates:
        pending = across_pairs(pending, pairs)
    family = [i for i, (t, _) in enumerate(pending) if t.tested]
    held, held_levels = holm([pending[i][0].p for i in family])
    rejected, levels = [False] * len(pending), [FAMILY_ALPHA / max(1, len(family))] * len(pending)
    for i, r, level in zip(family, held, held_levels):
        rejected[i], levels[i] = r, level
    changes = [_change(t, info, rejected[i], levels[i]) for i, (t, info) in enumerate(pending)]
    bonferroni = FAMILY_ALPHA / max(1, len(family))
    # Additive parts are the groups on the step's own path: its ops, its retracing, and the consumer's wait
    # for input. tf.data's threads work alongside the consumer and a stage's time includes its wait for
    # the stage upstream, so stage times overlap: they explain the wait instead of adding to the change.
    host_critical = [c for c in changes if c.kind not in PIPELINE_KINDS and c.kind not in DEVICE_OP_KINDS]
    device_critical = [c for c in changes if c.kind in DEVICE_OP_KINDS]
    critical, across = (device_critical, host_critical) if path == DEVICE else (host_critical, device_critical)
    factor = device_f if path == DEVICE else host_f
    scale = factor.scale
    on_path = {id(c) for c in critical}
    detectable = max((t.threshold(bonferroni) for (t, _), c in zip(pending, changes) if id(c) in on_path and t.tested),
                     default=0.0)
    pipeline = _own_first([c for c in changes if c.kind in PIPELINE_KINDS and c.beyond_noise], changes)
    reshaped = tuple(c for c in changes if c.kind == "stage" and c.base_parallel is not None
                     and c.current_parallel is not None and c.base_parallel != c.current_parallel)
    wait = next((c for c in changes if c.key == "wait:input"), None)
    input_drift = 0.0
    same_shape = {g.key for g in base.stages()} == {g.key for g in current.stages()}
    if wait is not None and wait.beyond_noise and not pipeline and not reshaped and same_shape:
        input_drift = wait.delta
    frame = CPU_FRAME if path == HOST and raw_base.cpu and raw_current.cpu and raw_current.cpu_mean > 0 \
        and raw_base.cpu_mean > 0 else SELF_FRAME
    w_b, w_c = raw_base.wall_mean, raw_current.wall_mean
    profiled = w_c - w_b
    rho = w_c / raw_current.cpu_mean if frame == CPU_FRAME else 1.0

    def walled(c: Change) -> Change:
        return _with_wall(c, rho * c.delta if frame == CPU_FRAME and c.kind in CPU_KINDS else c.delta)

    critical = [walled(c) for c in critical]
    wait = next((c for c in critical if c.key == "wait:input"), wait)
    drift = math.fsum((scale - 1.0) * c.base * (rho if frame == CPU_FRAME and c.kind in CPU_KINDS else 1.0)
                      for c in critical)
    moved = _ranked([c for c in critical if c.beyond_noise and not (input_drift and c.key == "wait:input")])
    causes = tuple(moved[:limit])
    paced_by = _paced_by(wait, pipeline, changes) if wait is not None and wait.beyond_noise and not input_drift \
        else None
    within = math.fsum(c.wall or 0.0 for c in critical if not c.beyond_noise)
    listed_and_unlisted = math.fsum(c.wall or 0.0 for c in moved)
    untraced = idle = outside = pipeline_cpu = 0.0
    overtraced = False
    busy = (1.0, 1.0)
    if frame == CPU_FRAME:
        # tf.data's functions run on its own threads: CPU time the clock counts, beside the step's path
        work = [c for c in changes if c.kind == "tf.data work"]
        traced_b = math.fsum(c.base for c in critical if c.kind in CPU_KINDS) + math.fsum(c.base for c in work)
        traced_c = math.fsum(c.current for c in critical if c.kind in CPU_KINDS) \
            + math.fsum(c.current for c in work)
        pipeline_cpu = rho * math.fsum(c.current - c.base for c in work)
        cpu_b, cpu_c = raw_base.cpu_mean, raw_current.cpu_mean
        untraced = rho * ((cpu_c - traced_c) - (cpu_b - traced_b))
        waited = math.fsum(c.current - c.base for c in critical if c.kind not in CPU_KINDS)
        idle = profiled - rho * (cpu_c - cpu_b) - waited
        overtraced = any(_traced(p) > (1.0 + OVERTRACED_SHARE) * p.cpu_mean for p in (raw_base, raw_current))
        busy = (cpu_b / w_b if w_b > 0 else 1.0, cpu_c / w_c if w_c > 0 else 1.0)
    else:
        outside = profiled - drift - input_drift - listed_and_unlisted - within
    remainder = within + (listed_and_unlisted - math.fsum(c.wall or 0.0 for c in causes)) + untraced + idle \
        + outside + pipeline_cpu
    wall_test = group_test(raw_base.wall, raw_current.wall)
    separated = bool(base.wall and current.wall) and min(current.wall) > scale * max(base.wall)
    profiled_moved = wall_test.p <= 0.05 or separated
    leads = _leads(critical, measured) if not moved else ()
    return Attribution(
        measured=measured, profiled=profiled, profiled_noise=wall_test.threshold(0.05), causes=causes,
        unlisted=tuple(moved[limit:]), within_noise=sum(1 for c in changes if not c.beyond_noise),
        remainder=remainder, input_wait=wait, paced_by=paced_by, scale=scale, drift=drift,
        pipeline=tuple(pipeline), base_logdir=base.logdir, current_logdir=current.logdir,
        within_noise_delta=within, outside=outside, timed_vs_profiled=measured - profiled,
        windows_separated=separated, reshaped=reshaped, input_drift=input_drift, path=path,
        off_path=tuple(sorted((c for c in across if c.beyond_noise), key=lambda c: -abs(c.delta))),
        device_busy=_change(*_series("device:busy", "device op", "GPU busy", base.device_busy,
                                     current.device_busy, Factor()), False, bonferroni)
        if base.has_device and current.has_device else None,
        frame=frame, rho=rho, busy_threads=busy, untraced=untraced, idle=idle, pipeline_cpu=pipeline_cpu, overtraced=overtraced,
        detectable=detectable, groups_tested=len(family),
        same_session=base.logdir is not None and base.logdir == current.logdir, tau=factor.tau,
        factor_groups=factor.groups, step=w_b, profiled_moved=profiled_moved,
        pairs=1 + len(replicates), leads=leads,
        stages=len({g.key for g in raw_base.stages()} | {g.key for g in raw_current.stages()}))


def _stages_aligned(base: Profile, current: Profile) -> Profile:
    """``base`` with each stage keyed as its stage is in ``current`` where the pipeline changed shape
    (``stage_alignment``: a stage inserted or removed renames the stages below it, or takes another's path)."""
    moved = aligned_keys(_stage_nodes(base), _stage_nodes(current))
    if not moved:
        return base
    return replace(base, groups=tuple(replace(g, key=moved[g.key]) if g.key in moved else g for g in base.groups))


def _stage_nodes(profile: Profile) -> list[StageNode]:
    return [StageNode(g.key, g.parallel, None if g.functions is None and not g.families
                      else frozenset(g.functions or ()) | frozenset(g.families))
            for g in profile.groups if g.kind == "stage"]


def host_path_time(profile: Profile) -> float:
    """Seconds per iteration of the host's own groups: its ops, retracing and input wait, and "other"."""
    return math.fsum(g.mean for g in profile.groups
                     if g.kind not in PIPELINE_KINDS and not g.on_device) + math.fsum(profile.other) / profile.windows


def step_path(profile: Profile) -> str:
    """``"device"`` when the busiest GPU ran longer per iteration than the host's own groups took, else ``"host"``."""
    if profile.has_device and profile.device_busy_mean > host_path_time(profile):
        return DEVICE
    return HOST


def _group(b: Group | None, c: Group | None, base: Profile, current: Profile, factor: Factor,
           clock: Test | None, shrink: Prior | None) -> tuple[Test, dict[str, object]]:
    ref = c if c is not None else b
    assert ref is not None
    bw = b.per_window if b is not None else (0.0,) * base.windows
    cw = c.per_window if c is not None else (0.0,) * current.windows
    # A group below one side's top kept may hide in its "other" up to that side's smallest kept group (the
    # baseline's scaled by the common factor, as its groups are); "appeared" only where nothing was left out.
    base_cut = _smallest_kept(base, ref.on_device) if b is None else 0.0
    current_cut = _smallest_kept(current, ref.on_device) if c is None else 0.0
    hidden = factor.scale * base_cut + current_cut
    if noise.traced_in_part(b, c) \
            or (_short(ref) and (b is None or c is None) and not _clock_agrees(clock, stats.mean(cw) - stats.mean(bw))):
        hidden += max(abs(factor.scale * stats.mean(bw)), stats.mean(cw))
    label = ref.describe() if ref.kind != "stage" else ref.label
    test, info = _series(ref.key, ref.kind, label, bw, cw, factor, hidden=hidden, shrink=shrink)
    test = replace(test, sides=1 if b is None or c is None else 2,
                   tested=(factor.scale * stats.mean(bw) + stats.mean(cw)) / 2 >= noise.RELEVANT_SHARE * base.wall_mean)
    if b is None or c is None:
        info["how"] = ("appeared" if b is None else "vanished") if not (base_cut or current_cut) else info["how"]
        info["below_cutoff"] = bool(base_cut or current_cut)
    info.update(base_per_element=b.per_element if b is not None else None,
                current_per_element=c.per_element if c is not None else None,
                base_parallel=b.parallel if b is not None else None,
                current_parallel=c.parallel if c is not None else None)
    return test, info


# The op groups (of the host, or the device's kernels) share a window-spread prior (``noise.Prior``): their
# spreads come from the same executor on the same machine. Stages and waits spread otherwise.
_SHRUNK = ("layer", "op", "tf.data work", "retracing", "device layer", "device op")


def _prior(base: Profile, current: Profile, scale: float, *, device: bool) -> Prior | None:
    pairs = [(g.per_window, o.per_window) for g in base.groups
             if g.kind in _SHRUNK and g.on_device == device and (o := current.group(g.key)) is not None]
    return noise.prior(pairs, scale)


def _traced(profile: Profile) -> float:
    return math.fsum(g.mean for g in profile.groups if g.kind in CPU_KINDS and not g.on_device) \
        + stats.mean(profile.other)


def _short(group: Group) -> bool:
    return group.kind in noise.OP_KINDS and group.per_event is not None and group.per_event < SHORT_EVENT_S


def _clock_agrees(clock: Test | None, change: float) -> bool:
    """A group of short ops on one side only: new (or gone) code, or ops the tracer left out on the other side
    (see ``SHORT_EVENT_S``)? Ops that really ran more move the process's CPU clock, measured apart from the
    profile, by about as much: the clock's change must go the same way and not fall short of the group's
    beyond its own noise (two standard errors). No clock (an older profile): it cannot tell, so not compared."""
    if clock is None:
        return False
    return clock.delta * change > 0 and abs(clock.delta) >= abs(change) - 2.0 * clock.se


def _series(key: str, kind: str, label: str, base: Sequence[float], current: Sequence[float], factor: Factor,
            *, hidden: float = 0.0, shrink: Prior | None = None) -> tuple[Test, dict[str, object]]:
    test = group_test(base, current, factor.scale, tau=factor.tau, tau_df=factor.tau_df, hidden=hidden,
                      shrink=shrink)
    info: dict[str, object] = {"key": key, "kind": kind, "label": label, "how": "grew" if test.delta >= 0 else "shrank",
                               "base": stats.mean(base), "current": stats.mean(current)}
    return test, info


def _change(test: Test, info: dict[str, object], significant: bool, level: float) -> Change:
    return Change(delta=test.delta, noise=test.threshold(level), significant=significant, p=test.p,
                  across=test.across, across_pairs=test.pairs, se=test.se, **info)  # type: ignore[arg-type]


def _with_wall(change: Change, wall: float) -> Change:
    return replace(change, wall=wall)


def _crossed_cut(base: Profile, current: Profile, scale: float) -> float:
    """What the two sides' "other" may differ by with no group changing: the host's groups kept on one side
    only, which the other side may have left in its "other"; and a side's whole "other" where the other side
    has none, since its groups (each under the smallest kept: short ops) may not have been traced there at all
    (``SHORT_EVENT_S``). Seen in A/A: a 2.5 us rest in one process, none and seven fewer short-op groups in the
    other, read "groups beyond the top kept shrank" beyond a noise of 1.5 us, twice in two sessions."""
    def alone(side: Profile, other: Profile) -> float:
        if not any(v > 0.0 for v in other.other):
            return stats.mean(side.other)
        return math.fsum(g.mean for g in side.groups if not g.on_device and other.group(g.key) is None)

    return alone(current, base) + scale * alone(base, current)


def _smallest_kept(profile: Profile, device: bool) -> float:
    """The smallest kept group of the host's groups when some were left in "other" (the device's likewise)."""
    if not device:
        return profile.smallest_kept if any(v > 0.0 for v in profile.other) else 0.0
    if not any(profile.device_other):
        return 0.0
    return min((g.mean for g in profile.groups if g.on_device), default=0.0)


def _ranked(moved: Sequence[Change]) -> list[Change]:
    """The causes in the order they are listed (the first is the report's headline).

    - The largest change beyond its own noise first (``|tested| - noise``: the part of the change its test is
      sure of, the change across the pairs of processes where it was tested across them), whatever its sign:
      the measured change is itself noisy, and ranking by sign would put a small saving before a large growth
      when noise flipped it; ranking by the bare change would put a group whose change is mostly noise (an
      optimizer's update, bound by memory traffic, moves by tens of percent between processes) before one
      measured to a few percent.
    - An optimizer's update that grew right after the last layer that appeared or grew with it: the update reads
      and writes every trainable weight, so a layer that adds weights makes it slower too, and named first it
      reads as if the optimizer itself had changed (``wording._optimizer_line`` says so beside it).
    """
    order = sorted(moved, key=lambda c: -(abs(c.tested) - c.noise))

    def grown_layer(c: Change) -> bool:
        return c.kind == "layer" and c.how in ("appeared", "grew")

    layers = [i for i, c in enumerate(order) if grown_layer(c) and not is_optimizer_group(c.key)]
    if not layers:
        return order
    last = layers[-1]
    trailing = [c for c in order[:last] if grown_layer(c) and is_optimizer_group(c.key)]
    if not trailing:
        return order
    rest = [c for c in order if not any(c is t for t in trailing)]
    at = rest.index(order[last]) + 1
    return rest[:at] + trailing + rest[at:]


LEADS = 3


def _leads(critical: Sequence[Change], measured: float) -> tuple[Change, ...]:
    """Where the time most likely went when no group on the step's path passed its test: the groups tested whose
    change went the measured change's way by more than one standard error of its own, ranked by that margin
    (their change less one standard error: how far it surely went). Under the family's test none is beyond
    chance, so they are leads to look at first, never causes; with a step that truly moved (the gate's verdict
    is red) the time went somewhere, and the group it most likely went to is the one to open first.

    Not gated on the profiled pass's own wall clock: on a loaded 2-core machine it read -6.9 ms ±19.6 ms for a
    step the gate measured +2.7 ms slower, while the groups' tests across pairs still saw where the time went
    (development runs of held-out set 6, ``benchmarks/explain_kept_offline.py``). On unchanged code a lead is
    given in most explanations (the largest of many noisy groups clears one standard error): explanations are
    made for red verdicts only, which the gate keeps rare on unchanged code, and a lead says it passed no test.
    No share of the measured change is asked of a lead either: where the cost is spread over five layers, each
    holds a fifth of it."""
    sign = 1.0 if measured >= 0.0 else -1.0
    scored = [(sign * c.tested - c.se, c) for c in critical
              if c.se > 0.0 and c.p < 1.0 and c.kind != "input wait" and c.key != "other"]
    return tuple(c for margin, c in sorted(scored, key=lambda x: -x[0]) if margin > 0.0)[:LEADS]


def _own_first(moved: Sequence[Change], changes: Sequence[Change]) -> list[Change]:
    """The stages that moved, the largest own change first (``_own_change``, each in its own direction; the most
    upstream first on a tie), then tf.data function work (no path), the largest first."""
    def depth(c: Change) -> int:
        return c.key.count("/") + 1 if c.kind == "stage" else 0

    def order(c: Change) -> tuple[int, float, int]:
        if c.kind != "stage":
            return (1, -abs(c.delta), 0)
        return (0, -_own_change(c, changes, 1.0 if c.delta >= 0 else -1.0), -depth(c))
    return sorted(moved, key=order)


def _own_change(stage: Change, changes: Sequence[Change], sign: float) -> float:
    """How much of a stage's change (in the wait's direction) is its own.

    A stage's time is its own events' self time; but an asynchronous stage
    (a parallel map, a prefetch) spends it waiting for elements its threads
    produce by calling the stages upstream, so its wait takes in what they
    moved. Where the work grew, the stage's change stands alone; a stage that
    only waits longer for a slower upstream has its change taken up by
    theirs. So: its change less the same-way changes of every stage upstream
    of it (those whose path continues its path). One key per stage path, so
    a stage appeared or vanished counts with its whole time: a fused map whose
    +2.9 ms appeared above a +0.02 ms source is the map, not the source.
    """
    root = stage.key == "stage:Root"  # the iterator the consumer calls: every other stage is upstream of it
    upstream = math.fsum(max(0.0, sign * c.tested) for c in changes
                         if c.kind == "stage" and c is not stage and (root or c.key.startswith(stage.key + "/")))
    return sign * stage.tested - upstream


def _paced_by(wait: Change, pipeline: Sequence[Change], changes: Sequence[Change]) -> Change | None:
    """The tf.data stage behind a change in the consumer's wait.

    First, of the stages that moved beyond their noise the same way, the one
    whose own change is largest (``_own_change``: its change less what the
    stages upstream of it moved, which an asynchronous stage's wait takes in;
    ``pipeline`` is in that order); then tf.data function work; else a stage whose parallelism changed the
    way that explains the wait (parallel -> sequential for a longer wait);
    else, for a longer wait, the stage with the most time per iteration now.
    """
    sign = 1.0 if wait.tested >= 0 else -1.0
    same_way = [c for c in pipeline if sign * c.tested > 0]
    if same_way:  # ``pipeline`` is ordered by own change: its first stage the same way is the one
        return same_way[0]
    stages = [c for c in changes if c.kind == "stage"]
    for change in stages:
        if change.base_parallel is not None and change.current_parallel is not None \
                and change.base_parallel != change.current_parallel and change.current_parallel == (sign < 0):
            return change
    if sign > 0 and stages:
        return max(stages, key=lambda c: c.current)
    return None


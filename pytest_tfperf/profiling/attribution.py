"""Where the time went: a measured per-iteration change split over the groups of ops and stages that moved.

Given the baseline's and the current profile and the change the gate measured
(seconds per iteration, current minus baseline), each group's change in self
time per iteration is its mean over the current windows minus its mean over
the baseline windows. A group counts as a cause only when its change is beyond
its noise, the larger of:

- ``Z`` standard errors of that difference, from the window-to-window spread
  of both sides (so a group that jumps between windows needs a larger change);
- ``RELATIVE_FLOOR`` of the group's larger side (windows of one process agree
  with each other better than two processes do: this floor stands for the
  process-to-process part the windows cannot see);
- ``WALL_FLOOR`` of the baseline's time per iteration (changes too small to
  matter to the step);
- for a group absent from one side's top groups, that side's smallest kept
  group (it may hide in "other").

The causes, largest in the direction of the measured change first, and a
remainder (the measured change minus the listed causes: groups within their
noise, time outside any op or stage, the profiler's own cost, and the
difference between the profiled pass and the timed rounds) add up to the
measured change exactly. Self times add across threads, so on a step that
runs ops in parallel (or a pipeline that works ahead of its consumer) a
cause can be larger than the change in wall time; the remainder says so.
No printing here: ``explanation_lines`` returns lines.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_tfperf.profiling.model import Group, Profile

Z = 4.0
RELATIVE_FLOOR = 0.15
WALL_FLOOR = 0.02
DEFAULT_LIMIT = 5


@dataclass(frozen=True, slots=True)
class Change:
    """One group's change in self time per iteration, current minus baseline."""

    key: str
    kind: str
    label: str  # the group as read on the current side (the baseline's, for one that vanished)
    how: str  # "appeared", "vanished", "grew", "shrank"
    delta: float  # seconds per iteration
    noise: float  # seconds per iteration: the change it had to exceed
    base: float
    current: float
    base_per_element: float | None = None
    current_per_element: float | None = None
    base_parallel: bool | None = None
    current_parallel: bool | None = None

    @property
    def beyond_noise(self) -> bool:
        return abs(self.delta) > self.noise


@dataclass(frozen=True, slots=True)
class Attribution:
    """The decomposition: ``sum(c.delta for c in causes) + remainder == measured``."""

    measured: float  # seconds per iteration, from the gate
    profiled: float  # the profiled passes' own change in wall time per iteration
    profiled_noise: float
    causes: tuple[Change, ...]  # beyond their noise, listed (at most ``limit``)
    unlisted: tuple[Change, ...]  # beyond their noise but past the limit: part of the remainder
    within_noise: int  # groups compared that did not move beyond their noise
    remainder: float
    input_wait: Change | None  # the consumer's IteratorGetNext time, when either side waited for input
    base_logdir: str | None = None
    current_logdir: str | None = None

    @property
    def explained(self) -> float:
        return math.fsum(c.delta for c in self.causes)

    @property
    def top(self) -> Change | None:
        """The cause to name first: the consumer's input wait is a symptom, so the stage behind it is named instead."""
        if not self.causes:
            return None
        first = self.causes[0]
        if first.kind == "input wait":
            behind = [c for c in self.causes[1:] + self.unlisted if c.kind in ("stage", "tf.data work")
                      and math.copysign(1.0, c.delta) == math.copysign(1.0, first.delta)]
            if behind:
                return behind[0]
        return first


def attribute(base: Profile, current: Profile, measured: float, *, limit: int = DEFAULT_LIMIT) -> Attribution:
    """Split ``measured`` (seconds per iteration, current minus baseline) over the groups that moved."""
    if not math.isfinite(measured):
        raise ValueError(f"measured change must be finite, got {measured!r}")
    wall_floor = WALL_FLOOR * base.wall_mean
    keys = [g.key for g in base.groups] + [g.key for g in current.groups if base.group(g.key) is None]
    changes = [_change(base.group(k), current.group(k), base, current, wall_floor) for k in keys]
    changes.append(_series_change("other", "other", "groups beyond the top kept", base.other, current.other,
                                  wall_floor))
    direction = 1.0 if measured >= 0 else -1.0
    moved = sorted((c for c in changes if c.beyond_noise and c.kind != "input wait"),
                   key=lambda c: -direction * c.delta)
    wait = _series_change("wait:input", "input wait", "input wait (consumer)", base.input_wait,
                          current.input_wait, wall_floor) if (any(base.input_wait) or any(current.input_wait)) \
        else None
    if wait is not None and wait.beyond_noise:
        # the wait is on the consumer's critical path: rank it with the rest
        moved = sorted(moved + [wait], key=lambda c: -direction * c.delta)
    moved = [c for c in moved if not (c.key == "wait:input" and c is not wait)]
    causes = tuple(moved[:limit])
    explained = math.fsum(c.delta for c in causes)
    return Attribution(measured=measured, profiled=current.wall_mean - base.wall_mean,
                       profiled_noise=_noise(base.wall, current.wall, 0.0, 0.0),
                       causes=causes, unlisted=tuple(moved[limit:]),
                       within_noise=sum(1 for c in changes if not c.beyond_noise and c.key != "wait:input"),
                       remainder=measured - explained, input_wait=wait,
                       base_logdir=base.logdir, current_logdir=current.logdir)


def explanation_lines(att: Attribution, *, unit: str = "ms") -> list[str]:
    """``where the time went: ...`` and one line per cause, the remainder, and where the raw profiles are."""
    scale, u = (1e3, "ms") if unit == "ms" else (1e6, "us")

    def t(seconds: float, sign: bool = True) -> str:
        value = seconds * scale
        digits = 2 if abs(value) < 10 else 1
        return f"{value:+.{digits}f} {u}" if sign else f"{value:.{digits}f} {u}"

    head = (f"where the time went: {t(att.measured)}/iteration measured "
            f"(profiled pass {t(att.profiled)} ±{t(att.profiled_noise, sign=False)})")
    lines = [head]
    if not att.causes:
        lines.append(f"  no op or stage moved beyond its noise ({att.within_noise} groups compared)")
    for change in att.causes:
        lines.append(f"  {_describe(change)} {change.how} {t(change.delta)} ±{t(change.noise, sign=False)}"
                     + _stage_note(change, t))
        if change.kind == "input wait" and att.top is not None and att.top is not change:
            lines.append(f"    paced by {_describe(att.top)} {att.top.how} {t(att.top.delta)}"
                         + _stage_note(att.top, t))
    more = f"; {len(att.unlisted)} more moved ({t(math.fsum(c.delta for c in att.unlisted))})" if att.unlisted else ""
    lines.append(f"  remainder {t(att.remainder)} (within-noise groups, time outside ops and stages, "
                 f"profiler and run-to-run difference{more})")
    if att.base_logdir or att.current_logdir:
        lines.append(f"  raw profiles: tensorboard --logdir {att.base_logdir} (baseline), "
                     f"tensorboard --logdir {att.current_logdir} (current)")
    return lines


def _describe(change: Change) -> str:
    if change.kind in ("layer", "op") and change.label:
        return change.label
    if change.kind == "stage":
        mode = _mode(change.current_parallel if change.how != "vanished" else change.base_parallel)
        was = _mode(change.base_parallel)
        note = f"; was {was}" if change.how not in ("appeared", "vanished") and was != mode else ""
        return f"{change.label} (tf.data stage, {mode}{note})"
    return change.label


def _mode(parallel: bool | None) -> str:
    return "parallel" if parallel else "sequential"


def _stage_note(change: Change, t: object) -> str:
    if change.kind != "stage":
        return ""
    parts = []
    for side, value in (("was", change.base_per_element), ("now", change.current_per_element)):
        if value is not None:
            parts.append(f"{side} {value * 1e3:.2f} ms/element")
    return f" ({', '.join(parts)})" if parts else ""


def _change(b: Group | None, c: Group | None, base: Profile, current: Profile, wall_floor: float) -> Change:
    ref = c if c is not None else b
    assert ref is not None
    kb = base.windows
    kc = current.windows
    bw = b.per_window if b is not None else (0.0,) * kb
    cw = c.per_window if c is not None else (0.0,) * kc
    hidden = (base.smallest_kept if b is None else 0.0) + (current.smallest_kept if c is None else 0.0)
    label = ref.describe() if ref.kind not in ("stage",) else ref.label
    change = _series_change(ref.key, ref.kind, label, bw, cw, wall_floor, hidden=hidden)
    how = change.how
    if b is None:
        how = "appeared"
    elif c is None:
        how = "vanished"
    return Change(key=change.key, kind=change.kind, label=label, how=how, delta=change.delta, noise=change.noise,
                  base=change.base, current=change.current,
                  base_per_element=b.per_element if b is not None else None,
                  current_per_element=c.per_element if c is not None else None,
                  base_parallel=b.parallel if b is not None else None,
                  current_parallel=c.parallel if c is not None else None)


def _series_change(key: str, kind: str, label: str, base: Sequence[float], current: Sequence[float],
                   wall_floor: float, *, hidden: float = 0.0) -> Change:
    mb = math.fsum(base) / len(base)
    mc = math.fsum(current) / len(current)
    delta = mc - mb
    noise = max(_noise(base, current, max(abs(mb), abs(mc)), wall_floor), hidden)
    how = "grew" if delta >= 0 else "shrank"
    return Change(key=key, kind=kind, label=label, how=how, delta=delta, noise=noise, base=mb, current=mc)


def _noise(base: Sequence[float], current: Sequence[float], level: float, wall_floor: float) -> float:
    se = math.sqrt(_var(base) / len(base) + _var(current) / len(current))
    return max(Z * se, RELATIVE_FLOOR * level, wall_floor)


def _var(values: Sequence[float]) -> float:
    if len(values) < 2:
        return 0.0
    mean = math.fsum(values) / len(values)
    return math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)

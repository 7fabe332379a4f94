"""Sizing a profiled pass so that it takes at most as long as the measured rounds it explains.

What a profiled pass costs beyond its windows grows with the number of
events the profiler recorded: stopping the profiler (TensorFlow collects and
writes the ``.xplane.pb``) and reading the profile each took 1.5-2.5 us per
host event here, so a step of many small ops (an LSTM: 3,400 events per
training step of 4 ms) costs twice its windows again after them. A short
calibration session (``capture.profile_steps``) measures, for each side, its
profiled time and its events per iteration, and what one event costs to stop
and read on this machine under its current load; ``plan_pass`` then sizes the
windows from what is left of the budget after the warm-up and the
calibration: iterations per window cut first (down to one), windows cut next
(down to ``min_windows``: the attribution's noise is the windows' spread, see
``profiling.attribution``). Pure arithmetic: no clock, no TensorFlow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

# The share of the budget the plan leaves unspent: the stop and the reading cost more per event in a larger
# profile than in the calibration's (a few %), and a loaded machine's pace changes between the calibration
# and the windows.
MARGIN = 0.25


@dataclass(frozen=True, slots=True)
class SideCost:
    """One side's cost per profiled iteration, measured in the calibration session."""

    seconds_per_iteration: float  # wall time of one iteration under the profiler
    events_per_iteration: float  # host events the profiler recorded in it
    settle_ratio: float = 0.0  # unmarked calls before each window, per iteration of the window


@dataclass(frozen=True, slots=True)
class PassPlan:
    """How many windows, how many iterations (and settle calls) per window of each side; what it should cost."""

    windows: int
    iterations: Mapping[str, int]
    settle: Mapping[str, int]
    seconds_windows: float  # the windows' estimated time (settle calls included)
    seconds_after: float  # stopping the profiler and reading the profile, estimated
    fits: bool  # whether the spent time, the windows and what comes after fit in the budget less its margin

    @property
    def seconds_round(self) -> float:
        """One window of every side (settle calls included), estimated."""
        return self.seconds_windows / self.windows


def settle_calls(iterations: int, ratio: float) -> int:
    """Settle calls before a window of ``iterations``: ``ratio`` of them, at least one when there are any."""
    return max(1, round(iterations * ratio)) if ratio > 0 else 0


def plan_pass(budget_s: float, spent_s: float, costs: Mapping[str, SideCost], seconds_per_event: float, *,
              ceilings: Mapping[str, int], max_windows: int, min_windows: int,
              margin: float = MARGIN) -> PassPlan:
    """The largest pass within ``budget_s`` (less ``margin`` of it and ``spent_s`` already spent).

    ``ceilings`` are each side's iterations per window when time is plenty
    (the caller's choice; never raised); they are scaled down together, so
    the sides keep their shares, then windows go from ``max_windows`` down to
    ``min_windows`` at one iteration each. A budget too small even for that
    gives the smallest pass with ``fits`` False: the caller says so.
    """
    if not costs or set(costs) != set(ceilings):
        raise ValueError("costs and ceilings must name the same sides")
    if min_windows < 1 or max_windows < min_windows:
        raise ValueError(f"need 1 <= min_windows <= max_windows, got {min_windows} and {max_windows}")
    per_event = max(0.0, seconds_per_event) if math.isfinite(seconds_per_event) else 0.0
    available = budget_s * (1.0 - margin) - spent_s

    def unit(side: str) -> float:  # one profiled call: its own time, then its events stopped and read
        c = costs[side]
        return max(0.0, c.seconds_per_iteration) + per_event * max(0.0, c.events_per_iteration)

    def round_costs(n: Mapping[str, int]) -> tuple[float, float]:
        """(windows' time, after-time) of one round of windows."""
        calls = {s: n[s] + settle_calls(n[s], costs[s].settle_ratio) for s in n}
        own = sum(calls[s] * max(0.0, costs[s].seconds_per_iteration) for s in n)
        after = sum(calls[s] * per_event * max(0.0, costs[s].events_per_iteration) for s in n)
        return own, after

    def plan(windows: int, n: Mapping[str, int]) -> PassPlan:
        own, after = round_costs(n)
        return PassPlan(windows=windows, iterations=dict(n),
                        settle={s: settle_calls(n[s], costs[s].settle_ratio) for s in n},
                        seconds_windows=windows * own, seconds_after=windows * after,
                        fits=windows * (own + after) <= available)

    full = plan(max_windows, ceilings)
    if full.fits:
        return full
    per_round = sum((ceilings[s] + ceilings[s] * costs[s].settle_ratio) * unit(s) for s in ceilings)
    scale = max(0.0, available) / (max_windows * per_round) if per_round > 0 else 0.0
    scaled = {s: max(1, int(ceilings[s] * scale)) for s in ceilings}
    while True:  # settle calls round up: a few steps down may still be needed
        candidate = plan(max_windows, scaled)
        if candidate.fits:
            return candidate
        if all(n == 1 for n in scaled.values()):
            break
        scaled = {s: max(1, min(n - 1, int(n * 0.9))) for s, n in scaled.items()}
    ones = {s: 1 for s in ceilings}
    own, after = round_costs(ones)
    fitting = int(max(0.0, available) // (own + after)) if own + after > 0 else max_windows
    return plan(max(min_windows, min(max_windows, fitting)), ones)


def window_deadline_s(budget_s: float, plan: PassPlan, margin: float = MARGIN) -> float:
    """Seconds from the pass's start after which no further round of windows starts (once ``min_windows`` ran):
    the budget less half its margin and the planned stop and reading, so that a machine slower than the
    calibration found it cuts windows rather than running over."""
    return budget_s * (1.0 - margin / 2) - plan.seconds_after

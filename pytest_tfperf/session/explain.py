"""``--tfperf-explain``: a failed throughput verdict explained from a profiled pass of each side.

Runs only when asked and only after a throughput verdict regressed: the timed
rounds are over by then, so the profiler (about 20% on a step, see
``profiling.capture``) never shows in what was measured. Each side gets its own
pass under ``<rootdir>/.tfperf/profiles/<test>/<side>/``, where
``tensorboard --logdir`` opens it, and ``profiling.attribution`` splits the
measured change over the ops and stages that moved.

Trouble never changes the verdict or fails the test: a profile that cannot be
taken (another profiler session, no profiler, a step that raises in the pass)
gives one line saying why there is no explanation.
"""

from __future__ import annotations

import math
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_tfperf.measuring.workload import Workload
from pytest_tfperf.profiling.model import Profile

PROFILES_DIR = ".tfperf/profiles"
WINDOWS = 5
PAIR_WINDOWS = 6  # a pair's sides alternate window by window: 6 each, both sides' together half the budget
MAX_ITERATIONS = 50
NO_STORED_PROFILE = ("no explanation: the baseline holds no profile; refresh it with "
                     "--tfperf-update --tfperf-explain")

# profile_step's signature (step, logdir, *, name, windows, iterations) -> ProfileOutcome; injected in tests.
Profiler = Callable[..., Any]
# profile_steps' signature (steps by side, logdir, *, windows, iterations by side) -> outcomes by side.
PairProfiler = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class Explanation:
    """The lines a failure message gains, and what the results JSON keeps of them."""

    lines: tuple[str, ...]
    attribution: Mapping[str, Any] | None = None  # attribution_dict, when there is one
    reason: str | None = None  # why there is no explanation

    def to_dict(self) -> dict[str, Any]:
        if self.attribution is not None:
            return dict(self.attribution)
        return {"lines": list(self.lines), "reason": self.reason}

    @property
    def headline(self) -> str:
        """One line for the Markdown summary: the top cause, or why there is none."""
        if self.attribution is None:
            return self.lines[0] if self.lines else ""
        causes = self.attribution.get("causes") or []
        if not causes:
            return "no op or stage moved beyond its noise"
        top = causes[0]
        return f"{top['label']} {top['how']} {top['delta_ms']:+.2f} ms/iteration"


def safe_name(test_id: str) -> str:
    """A test id as one folder name: path separators, brackets and colons become '_'."""
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", test_id).strip("_.") or "test"


def profile_dir(rootdir: str | Path, test_id: str, side: str) -> Path:
    return Path(rootdir) / PROFILES_DIR / safe_name(test_id) / side


def one_iteration(workload: Workload) -> Callable[[], object]:
    """What the loop calls as one iteration: ``call``, or ``pull`` then ``step`` for a dataset feeding a step."""
    pull, step = workload.pull, workload.step
    if pull is not None and step is not None:
        return lambda: step(pull())
    return workload.call


def iterations_for(median_s: float, budget_s: float, windows: int = WINDOWS) -> int:
    """Iterations per window so that one side's windows take about half the measurement's budget."""
    if not math.isfinite(median_s) or median_s <= 0:
        return 10
    return max(1, min(MAX_ITERATIONS, int(budget_s / 2 / windows / median_s)))


def profile_side(workload: Workload, rootdir: str | Path, test_id: str, side: str, iterations: int,
                 profiler: Profiler | None = None) -> tuple[Profile | None, str | None]:
    """One side's profiled pass: (profile, None) or (None, the reason there is none)."""
    if profiler is None:
        from pytest_tfperf.profiling.capture import profile_step as profiler
    logdir = profile_dir(rootdir, test_id, side)
    shutil.rmtree(logdir, ignore_errors=True)  # the folder holds this run's profile only
    try:
        logdir.mkdir(parents=True, exist_ok=True)
        outcome = profiler(one_iteration(workload), logdir, name=side, windows=WINDOWS, iterations=iterations)
    except Exception as exc:  # noqa: BLE001 - the verdict stands; the explanation says why it is missing
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        return None, f"the {side} side's profiled pass raised {type(exc).__name__}: {first}"
    if outcome.profile is None:
        return None, f"the {side} side could not be profiled: {outcome.reason}"
    return outcome.profile, None


def explain(base: Profile | None, current: Profile | None, measured_s: float, why_not: str | None) -> Explanation:
    """Attribute ``measured_s`` (seconds per iteration, current minus base), or say in one line why not."""
    from pytest_tfperf.profiling.attribution import attribute, attribution_dict, explanation_lines

    if base is None or current is None:
        reason = why_not or "no profile"
        return Explanation(lines=(f"no explanation: {reason}",), reason=reason)
    try:
        att = attribute(base=base, current=current, measured=measured_s)
    except Exception as exc:  # noqa: BLE001 - e.g. a measured change that is not finite
        reason = f"the profiles could not be compared: {type(exc).__name__}: {exc}"
        return Explanation(lines=(f"no explanation: {reason}",), reason=reason)
    return Explanation(lines=tuple(explanation_lines(att)), attribution=attribution_dict(att))


def explain_pair(test_id: str, reference: Workload, variant: Workload, measured_s: float, median_s: float,
                 budget_s: float, rootdir: str | Path, *, profiler: Profiler | None = None,
                 pair_profiler: PairProfiler | None = None) -> Explanation:
    """A ``compare(reference=...)`` regression: both sides in one profiler session, their windows alternating.

    Alternating windows put whatever the machine did meanwhile on both sides
    alike; two passes one after the other differed by a common factor of up
    to 1.7 here. Two cases keep one pass per side (reference, then variant):
    an injected single-side ``profiler`` (tests), and a workload that pulls
    from a dataset, whose pipeline works ahead on its own threads while the
    other side's windows run and would be counted in them.
    """
    if profiler is None and reference.pull is None and variant.pull is None:
        return _explain_interleaved(test_id, reference, variant, measured_s, median_s, budget_s, rootdir,
                                    pair_profiler)
    iterations = iterations_for(median_s, budget_s)
    base, why = profile_side(reference, rootdir, test_id, "reference", iterations, profiler)
    current = None
    if base is not None:
        current, why = profile_side(variant, rootdir, test_id, "variant", iterations, profiler)
    return explain(base, current, measured_s, why)


def _explain_interleaved(test_id: str, reference: Workload, variant: Workload, measured_s: float, median_s: float,
                         budget_s: float, rootdir: str | Path, pair_profiler: PairProfiler | None) -> Explanation:
    if pair_profiler is None:
        from pytest_tfperf.profiling.capture import profile_steps as pair_profiler
    # each side's windows a quarter of the budget: both sides' together take half, as one side's did alone
    iterations = {"reference": iterations_for(median_s, budget_s / 2, PAIR_WINDOWS),
                  "variant": iterations_for(median_s + measured_s, budget_s / 2, PAIR_WINDOWS)}
    logdir = profile_dir(rootdir, test_id, "pair")
    shutil.rmtree(logdir, ignore_errors=True)  # the folder holds this run's profile only
    try:
        logdir.mkdir(parents=True, exist_ok=True)
        outcomes = pair_profiler({"reference": one_iteration(reference), "variant": one_iteration(variant)}, logdir,
                                 windows=PAIR_WINDOWS, iterations=iterations)
    except Exception as exc:  # noqa: BLE001 - the verdict stands; the explanation says why it is missing
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        return explain(None, None, measured_s, f"the profiled pass raised {type(exc).__name__}: {first}")
    base, current = outcomes["reference"].profile, outcomes["variant"].profile
    why = None if base is not None and current is not None else \
        f"the pair could not be profiled: {outcomes['reference'].reason}"
    return explain(base, current, measured_s, why)


def explain_stored(test_id: str, stored: Mapping[str, Any] | None, current_workload: Workload, measured_s: float,
                   median_s: float, budget_s: float, rootdir: str | Path, *,
                   profiler: Profiler | None = None) -> Explanation:
    """A stored-baseline regression: profile the current side and attribute against the baseline's profile."""
    from pytest_tfperf.profiling.model import ProfileFormatError

    if stored is None:
        return Explanation(lines=(NO_STORED_PROFILE,), reason="the baseline holds no profile")
    try:
        base = Profile.from_dict(stored)
    except ProfileFormatError as exc:
        reason = f"the baseline's profile cannot be read ({exc}); refresh it with --tfperf-update --tfperf-explain"
        return Explanation(lines=(f"no explanation: {reason}",), reason=reason)
    current, why = profile_side(current_workload, rootdir, test_id, "current",
                                iterations_for(median_s, budget_s), profiler)
    return explain(base, current, measured_s, why)

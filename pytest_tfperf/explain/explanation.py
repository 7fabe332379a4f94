"""Explanations (on by default, ``--no-tfperf-explain`` turns them off): a failed verdict explained from a
profiled pass of each side.

Runs only after a throughput (or TF-allocator) verdict failed, never on a passing test: the timed
rounds are over by then, so the profiler (about 20% on a step, see
``profiling.capture``) never shows in what was measured. Each side gets its own
pass under ``<rootdir>/.tfperf/profiles/<test>/<side>/``, where
``tensorboard --logdir`` opens it, and ``profiling.attribution`` splits the
measured change over the ops and stages that moved.

The pass takes at most as long as the measured rounds it explains (``rounds_s``,
``rounds_seconds``): ``profiling.capture`` calibrates what stopping the profiler
and reading the profile will cost and cuts the windows to fit (``profiling.profile_budget``).

Trouble never changes the verdict or fails the test: a profile that cannot be
taken (another profiler session, no profiler, a step that raises in the pass)
gives one line saying why there is no explanation. A pass that went over its
budget says so in one line (``over_budget``); stopping the profiler and reading
the profile have hard deadlines (``profiling.bounded``).
"""

from __future__ import annotations

import math
import re
import shlex
import shutil
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_tfperf.explain.settle import SETTLE_MAX_S, pulls_from_dataset, reserve_s, settle
from pytest_tfperf.measuring.workload import Workload
from pytest_tfperf.model import Timings
from pytest_tfperf.profiling.profile_model import Profile

if TYPE_CHECKING:  # annotations only: the profiler's modules load when a pass runs
    from pytest_tfperf.gates.baseline_runs import BaselineRuns
    from pytest_tfperf.gates.verdict import MetricVerdict, Verdict
    from pytest_tfperf.profiling.capture import ProfileOutcome
    from pytest_tfperf.profiling.memory_profile import MemoryProfile

PROFILES_DIR = ".tfperf/profiles"
WINDOWS = 5
PAIR_WINDOWS = 6  # a pair's sides alternate window by window: 6 each, both sides' together half the budget
# The fewest windows a side keeps when the measured rounds' time cannot hold more (profiling.profile_budget cuts
# iterations per window first): the attribution's noise is the spread of 5 windows against 5.
MIN_WINDOWS = 5
MAX_ITERATIONS = 50
# How long the coordinator waits for the partner's profiled pass beyond its windows (warm-up, the profiler's stop,
# reading the profile: capture's parse timeout is 60 s). Past it the partner process is stopped, never waited on.
PARTNER_PROFILE_SLACK_S = 120.0
NO_STORED_PROFILE = ("no explanation: the baseline holds no profile (refreshed with explanations off, or by an "
                     "older pytest-tfperf); refresh it with --tfperf-update")
REFRESH_FOR_PROFILE = "refresh it with --tfperf-update"

# profile_step's signature (step, logdir, *, name, windows, iterations) -> ProfileOutcome; injected in tests.
# Its keyword arguments are not spelled out: a Callable type cannot name them. Quoted: ProfileOutcome is not
# imported at run time.
Profiler = Callable[..., "ProfileOutcome"]
# profile_steps' signature (steps by side, logdir, *, windows, iterations by side) -> outcomes by side.
PairProfiler = Callable[..., Mapping[str, "ProfileOutcome"]]


@dataclass(frozen=True, slots=True)
class Explanation:
    """The lines a failure message gains, and what the results JSON keeps of them."""

    lines: tuple[str, ...]
    attribution: Mapping[str, Any] | None = None  # attribution_dict, when there is one
    reason: str | None = None  # why there is no explanation
    # What the profiled passes cost beyond their budget (the measured rounds), one line each; in ``lines`` too.
    cost: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.attribution) if self.attribution is not None else {
            "lines": list(self.lines), "reason": self.reason}
        if self.cost:
            out["cost"] = list(self.cost)
        return out

    @property
    def headline(self) -> str:
        """One line for the Markdown summary: the cause (``reports.explain_headline``), or why there is none."""
        from pytest_tfperf.reports.explain_headline import headline

        if self.attribution is None:
            return self.lines[0] if self.lines else ""
        return headline(self.attribution)


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


def rounds_seconds(timings: Timings) -> float:
    """The measured rounds' time of a ``Timings``: its iterations' times summed (scaled up when the samples are
    a stored subsample of more iterations). What a profiled pass explaining them may take at most."""
    total = sum(timings.samples_ns) / 1e9
    measured = getattr(timings, "measured_iterations", 0) or 0
    return total * measured / len(timings.samples_ns) if measured > len(timings.samples_ns) else total


def _budget(rounds_s: float | None) -> dict[str, Any]:  # keyword arguments: a float and an int
    """The profiler's keyword arguments for a pass bounded by ``rounds_s`` (none without a bound)."""
    if rounds_s is None or not math.isfinite(rounds_s) or rounds_s <= 0:
        return {}
    return {"budget_s": rounds_s, "min_windows": MIN_WINDOWS}


def iterations_for(median_s: float, budget_s: float, windows: int = WINDOWS) -> int:
    """Iterations per window so that one side's windows take about half the measurement's budget."""
    if not math.isfinite(median_s) or median_s <= 0:
        return 10
    return max(1, min(MAX_ITERATIONS, int(budget_s / 2 / windows / median_s)))


def over_budget(outcome: ProfileOutcome, budget_s: float | None, what: str) -> str | None:
    """One line when a profiled pass took longer than its budget (``budget_s``, the measured rounds it explains),
    or when even its smallest plan did not fit in it; None within it or without a budget."""
    if budget_s is None or not math.isfinite(budget_s) or budget_s <= 0:
        return None
    seconds = float(getattr(outcome, "seconds", 0.0) or 0.0)
    plan = getattr(outcome, "plan", None)
    too_small = plan is not None and not getattr(plan, "fits", True)
    if seconds <= budget_s and not too_small:
        return None
    why = (f"even {plan.windows} windows of one iteration did not fit" if plan is not None and too_small
           else "the machine ran slower than its calibration found")
    return (f"cost: {what} took {seconds:.1f} s, over its budget of {budget_s:.1f} s (the measured rounds' "
            f"time): {why}")


def profile_side(workload: Workload, rootdir: str | Path, test_id: str, side: str, iterations: int,
                 profiler: Profiler | None = None, rounds_s: float | None = None,
                 cost: list[str] | None = None, median_s: float | None = None) -> tuple[Profile | None, str | None]:
    """One side's profiled pass: (profile, None) or (None, the reason there is none); at most ``rounds_s`` long
    (the side's measured rounds), ``iterations`` per window at most. A pass over that budget adds its line
    (``over_budget``) to ``cost``. ``median_s``: this side's measured time per iteration; the workload is first
    ``settle``d to it."""
    if profiler is None:
        from pytest_tfperf.profiling.capture import profile_step

        profiler = profile_step
    logdir = profile_dir(rootdir, test_id, side)
    shutil.rmtree(logdir, ignore_errors=True)  # the folder holds this run's profile only
    try:
        logdir.mkdir(parents=True, exist_ok=True)
        call = one_iteration(workload)
        kwargs = _budget(rounds_s)
        if median_s is not None:
            # Settled inside the pass, right before its windows (after the calibration and the profiler's start,
            # during which the buffers fill again). A workload that pulls from a dataset may take a quarter of
            # the budget to settle, the rest of the pass the other three; any other step may hold a pipeline of
            # its own (``next(it)`` in its body), settled the same way with less of the budget set aside
            # (``settle.reserve_s``: a step with no pipeline settles in SETTLE_CALLS calls).
            cap = SETTLE_MAX_S if rounds_s is None else min(SETTLE_MAX_S, rounds_s / 4)
            reserve = cap if pulls_from_dataset(workload) else reserve_s(median_s, cap)
            kwargs = _budget(None if rounds_s is None else rounds_s - reserve)
            kwargs["before_windows"] = lambda: settle(call, median_s, cap)
        outcome = profiler(call, logdir, name=side, windows=WINDOWS, iterations=iterations, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the verdict stands; the explanation says why it is missing
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        return None, f"the {side} side's profiled pass raised {type(exc).__name__}: {first}"
    late = over_budget(outcome, rounds_s, f"the {side} side's profiled pass")
    if late is not None and cost is not None:
        cost.append(late)
    if outcome.profile is None:
        return None, f"the {side} side could not be profiled: {outcome.reason}"
    return outcome.profile, None


def explain(base: Profile | None, current: Profile | None, measured_s: float, why_not: str | None,
            cost: Sequence[str] = (),
            pointer: Callable[[list[str], dict[str, Any]], list[str]] | None = None,
            replicates: Sequence[tuple[Profile, Profile]] = ()) -> Explanation:
    """Attribute ``measured_s`` (seconds per iteration, current minus base), or say in one line why not.
    ``cost``: lines saying a profiled pass went over its budget, added last; ``pointer`` rewrites the lines
    (and the attribution's) where they point at the raw profiles."""
    from pytest_tfperf.profiling.attribution import attribute, attribution_dict, explanation_lines

    cost = tuple(cost)
    if base is None or current is None:
        reason = why_not or "no profile"
        return Explanation(lines=(f"no explanation: {reason}", *(f"  {c}" for c in cost)), reason=reason, cost=cost)
    try:
        att = attribute(base=base, current=current, measured=measured_s, replicates=replicates)
    except Exception as exc:  # noqa: BLE001 - e.g. a measured change that is not finite
        reason = f"the profiles could not be compared: {type(exc).__name__}: {exc}"
        return Explanation(lines=(f"no explanation: {reason}", *(f"  {c}" for c in cost)), reason=reason, cost=cost)
    lines = explanation_lines(att)
    data = attribution_dict(att)
    if pointer is not None:
        lines = pointer(lines, data)
        data["lines"] = list(lines)
    return Explanation(lines=(*lines, *(f"  {c}" for c in cost)), attribution=data, cost=cost)


def explain_pair(test_id: str, reference: Workload, variant: Workload, measured_s: float, median_s: float,
                 budget_s: float, rootdir: str | Path, *, profiler: Profiler | None = None,
                 pair_profiler: PairProfiler | None = None, rounds_s: float | None = None) -> Explanation:
    """A ``compare(reference=...)`` regression: both sides in one profiler session, their windows alternating.

    Alternating windows put whatever the machine did meanwhile on both sides
    alike; two passes one after the other differed by a common factor of up
    to 1.7 here. Two cases keep one pass per side (reference, then variant):
    an injected single-side ``profiler`` (tests), and a workload that pulls
    from a dataset, whose pipeline works ahead on its own threads while the
    other side's windows run and would be counted in them.

    ``rounds_s`` is both sides' measured rounds: the pass (or both passes) takes at most that long.
    """
    if profiler is None and reference.pull is None and variant.pull is None:
        return _explain_interleaved(test_id, reference, variant, measured_s, median_s, budget_s, rootdir,
                                    pair_profiler, rounds_s)
    shutil.rmtree(profile_dir(rootdir, test_id, "pair"), ignore_errors=True)  # a folder left by an earlier layout
    iterations = iterations_for(median_s, budget_s)
    half = None if rounds_s is None else rounds_s / 2  # one pass per side: each within half of both rounds
    cost: list[str] = []
    base, why = profile_side(reference, rootdir, test_id, "reference", iterations, profiler, half, cost,
                             median_s=median_s)
    current = None
    if base is not None:
        current, why = profile_side(variant, rootdir, test_id, "variant", iterations, profiler, half, cost,
                                    median_s=median_s + measured_s)
    return explain(base, current, measured_s, why, cost)


def _explain_interleaved(test_id: str, reference: Workload, variant: Workload, measured_s: float, median_s: float,
                         budget_s: float, rootdir: str | Path, pair_profiler: PairProfiler | None,
                         rounds_s: float | None = None) -> Explanation:
    if pair_profiler is None:
        from pytest_tfperf.profiling.capture import profile_steps

        pair_profiler = profile_steps
    # each side's windows a quarter of the budget: both sides' together take half, as one side's did alone
    iterations = {"reference": iterations_for(median_s, budget_s / 2, PAIR_WINDOWS),
                  "variant": iterations_for(median_s + measured_s, budget_s / 2, PAIR_WINDOWS)}
    logdir = profile_dir(rootdir, test_id, "pair")
    shutil.rmtree(logdir, ignore_errors=True)  # the folder holds this run's profile only
    for side in ("reference", "variant"):  # folders of the one-pass-per-side layout, from an earlier run
        shutil.rmtree(profile_dir(rootdir, test_id, side), ignore_errors=True)
    try:
        logdir.mkdir(parents=True, exist_ok=True)
        outcomes = pair_profiler({"reference": one_iteration(reference), "variant": one_iteration(variant)}, logdir,
                                 windows=PAIR_WINDOWS, iterations=iterations, **_budget(rounds_s))
    except Exception as exc:  # noqa: BLE001 - the verdict stands; the explanation says why it is missing
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        return explain(None, None, measured_s, f"the profiled pass raised {type(exc).__name__}: {first}")
    base, current = outcomes["reference"].profile, outcomes["variant"].profile
    why = None if base is not None and current is not None else \
        f"the pair could not be profiled: {outcomes['reference'].reason}"
    late = over_budget(outcomes["reference"], rounds_s, "the pair's profiled pass")
    return explain(base, current, measured_s, why, () if late is None else (late,))


def explain_stored(test_id: str, stored: Mapping[str, Any] | None, current_workload: Workload, measured_s: float,
                   median_s: float, budget_s: float, rootdir: str | Path, *,
                   profiler: Profiler | None = None, rounds_s: float | None = None,
                   commit: str = "") -> Explanation:
    """A stored-baseline regression: profile the current side (within ``rounds_s``, its measured rounds) and
    attribute against the baseline's profile. ``commit``: the one the baseline was refreshed at, when known
    (for the command that profiles both sides where the baseline's raw profile is absent)."""
    from pytest_tfperf.profiling.profile_model import ProfileFormatError

    if stored is None:
        return Explanation(lines=(NO_STORED_PROFILE,), reason="the baseline holds no profile")
    try:
        base = Profile.from_dict(stored)
    except ProfileFormatError as exc:
        reason = f"the baseline's profile cannot be read ({exc}); {REFRESH_FOR_PROFILE}"
        return Explanation(lines=(f"no explanation: {reason}",), reason=reason)
    cost: list[str] = []
    current, why = profile_side(current_workload, rootdir, test_id, "current",
                                iterations_for(median_s, budget_s), profiler, rounds_s, cost,
                                median_s=median_s + measured_s)
    return explain(base, current, measured_s, why, cost,
                   pointer=_stored_pointer(rootdir, base.logdir, profile_dir(rootdir, test_id, "current"),
                                           test_id, commit))


def baseline_commit(runs: BaselineRuns) -> str:
    """The commit a stored baseline was refreshed at (its first run's that says), or "" (``BaselineRuns``)."""
    for run in getattr(runs, "runs", ()) or ():
        if getattr(run, "git_commit", ""):
            return str(run.git_commit)
    return ""


def has_raw_profile(logdir: str | Path) -> bool:
    return any(Path(logdir).glob("plugins/profile/*/*.xplane.pb"))


def _stored_pointer(rootdir: str | Path, stored_logdir: str | None, current: Path, test_id: str,
                    commit: str) -> Callable[[list[str], dict[str, Any]], list[str]]:
    """The lines' raw-profile pointer for a stored baseline. Its raw profile stays where the refresh ran
    (``.tfperf/`` is not committed): when it is not here, say how to profile both sides here instead, beside
    the baseline's commit (``--tfperf-against``), rather than print a folder that does not exist."""
    def rewrite(lines: list[str], data: dict[str, Any]) -> list[str]:
        kept = [line for line in lines if "tensorboard --logdir" not in line]
        base = Path(rootdir) / stored_logdir if stored_logdir else None
        if base is not None and has_raw_profile(base):
            data["base_logdir"] = str(base)
            return kept + [f"  raw profiles: tensorboard --logdir {base} (baseline), "
                           f"tensorboard --logdir {current} (current)"]
        node = shlex.quote(test_id.split("[")[0])
        against = commit[:12] if commit else "<the baseline's commit>"
        command = f"pytest --tfperf --tfperf-against={against} {node}"
        data["base_logdir"] = None
        data["baseline_profile_command"] = command
        return kept + [f"  raw profile: tensorboard --logdir {current} (current); the baseline's raw profile is not "
                       f"in this checkout (.tfperf/ stays where the baseline was refreshed): {command} profiles "
                       "both sides here"]
    return rewrite


def partner_profile_timeout_s(median_s: float, iterations: int, windows: int = WINDOWS) -> float:
    """The longest wait for the partner's profiled pass: its windows at 3x their measured time, plus the slack."""
    per_iteration = median_s if math.isfinite(median_s) and median_s > 0 else 1.0
    return PARTNER_PROFILE_SLACK_S + 3.0 * (1 + windows * iterations) * per_iteration


def explain_against(test_id: str, profile_partner: Callable[[int], tuple[Mapping[str, Any] | None, str | None]],
                    workload: Workload, measured_s: float, median_s: float, budget_s: float, rootdir: str | Path, *,
                    profiler: Profiler | None = None, rounds_s: float | None = None,
                    more_pairs: Callable[[int], tuple[Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
                                                      Sequence[str]]] | None = None,
                    partner_stopped: Callable[[], AbstractContextManager[object]] = nullcontext) -> Explanation:
    """A ``--tfperf-against`` regression: the partner profiles its side in its own process
    (``profile_partner(iterations)`` gives its compact profile as a dict, or why there is none), then this side
    is profiled here (``this``, within ``rounds_s``: this side's measured rounds), one after the other, and
    ``measured_s`` (the verdict's change, ``orchestrate.verdict_change_s``) attributed.
    ``more_pairs(iterations)``: both sides profiled in other pairs of processes ([(partner's, this version's)],
    and a line for each pair it could not have), so that each group is tested across the pairs
    (``profiling.attribution``'s ``replicates``). ``partner_stopped()``: the partner process stopped while this
    side is profiled (``Partner.frozen``): a tf.data pipeline refills its buffers after its own pass, on the
    cores this side's pass is timing."""
    from pytest_tfperf.profiling.profile_model import ProfileFormatError

    iterations = iterations_for(median_s, budget_s)
    raw, why = profile_partner(iterations)
    base = None
    # The partner's own pass over its budget (``orchestrate.profile_for_coordinator`` sends the line with
    # its profile).
    cost = [str(raw["cost"])] if isinstance(raw, Mapping) and raw.get("cost") else []
    if raw is not None:
        try:
            base = Profile.from_dict(raw)
        except ProfileFormatError as exc:
            why = f"the partner's profile cannot be read ({exc}); install the same pytest-tfperf for both trees"
    current = None
    if base is not None:
        with partner_stopped():
            current, why = profile_side(workload, rootdir, test_id, "this", iterations, profiler, rounds_s, cost,
                                        median_s=median_s + measured_s)
        if why is not None:
            why = why.replace("the this side", "this side", 1)  # profile_side names a side "the <side> side"
    replicates: list[tuple[Profile, Profile]] = []
    if base is not None and current is not None and more_pairs is not None:
        raws, notes = more_pairs(iterations)
        cost += list(notes)
        for raw_base, raw_current in raws:
            cost += [str(r["cost"]) for r in (raw_base, raw_current) if r.get("cost")]
            try:
                replicates.append((Profile.from_dict(raw_base), Profile.from_dict(raw_current)))
            except ProfileFormatError as exc:
                cost.append(f"another pair's profile cannot be read ({exc}); not compared")
    return explain(base, current, measured_s, why, [c.replace("the this side", "this side", 1) for c in cost],
                   replicates=replicates)


# -- memory: a TF-allocator peak that regressed, split over the ops whose bytes at the peak moved ----------

TF_ALLOCATOR_METRIC = "peak_tf_allocator["


@dataclass(frozen=True, slots=True)
class MemoryExplained(Explanation):
    """An explanation that also says where the memory went (``memory``: ``profiling.memory_profile.memory_dict``, or
    ``{"lines", "reason"}`` when there is none); ``lines`` holds the time's lines (if any) then the memory's."""

    memory: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.attribution) if self.attribution is not None else {
            "lines": list(self.lines), "reason": self.reason}
        if self.memory is not None:
            out["memory"] = dict(self.memory)
        return out

    @property
    def headline(self) -> str:
        if self.attribution is not None or self.reason is not None or self.memory is None:
            return Explanation.headline.fget(self)  # type: ignore[attr-defined,no-any-return]
        causes = self.memory.get("causes") or []
        if not causes:
            lines = self.memory.get("lines") or [""]
            return str(lines[0]) if self.memory.get("reason") else "no op's bytes at the peak moved beyond their noise"
        top = causes[0]
        return f"{top['label']} {top['how']} {top['delta_bytes'] / 2**20:+.2f} MiB at the TF allocator's peak"


def regressed_tf_memory(verdict: Verdict | None) -> MetricVerdict | None:
    """The TF-allocator peak verdict that regressed (a ``MetricVerdict``), or None."""
    for m in getattr(verdict, "metrics", ()) or ():
        if m.metric.startswith(TF_ALLOCATOR_METRIC) and str(m.status) == "regressed":
            return m
    return None


def tf_allocator_device(metric: str) -> str | None:
    """``peak_tf_allocator[GPU:0]`` -> ``GPU:0``: the device whose allocator the profile is read for."""
    if not metric.startswith(TF_ALLOCATOR_METRIC) or not metric.endswith("]"):
        return None
    return metric[len(TF_ALLOCATOR_METRIC):-1] or None


def explain_memory(base_logdir: str | Path | None, current_logdir: str | Path | None, measured_bytes: float,
                   why_not: str | None = None, *, stored: Mapping[str, Any] | None = None,
                   sides: tuple[str, str] | None = None,
                   device: str | None = None) -> tuple[tuple[str, ...], dict[str, Any]]:
    """Read the allocations of both sides' raw profiles (or the baseline's from ``stored``, a stored profile's
    ``"memory"``) and split ``measured_bytes`` (the added peak's change) over the ops that moved: (lines, the
    JSON form), or one line saying why not. ``sides`` names the base's and the current's windows when both
    logdirs are one profile whose sides alternate (``explain_pair``'s ``pair`` folder). ``device`` (``GPU:0``)
    reads that device's allocator in the raw profiles (``profiling.memory_profile.device_allocator``)."""
    from pytest_tfperf.profiling.memory_profile import (
        MemoryFormatError, attribute_memory, memory_dict, memory_from_dict, memory_from_logdir,
    )

    def none(reason: str) -> tuple[tuple[str, ...], dict[str, Any]]:
        line = f"no explanation of the memory: {reason}"
        return (line,), {"lines": [line], "reason": reason}

    if why_not is not None or (base_logdir is None and stored is None) or current_logdir is None:
        return none(why_not or "no profile")
    base: MemoryProfile | None
    if stored is not None:
        try:
            base = memory_from_dict(stored, None if base_logdir is None else str(base_logdir))
        except MemoryFormatError as exc:
            return none(f"the baseline's memory profile cannot be read ({exc}); {REFRESH_FOR_PROFILE}")
    else:
        base, why = memory_from_logdir(base_logdir, side=sides[0] if sides else None,  # type: ignore[arg-type]
                                       device=device)
    if base is None:
        return none(f"the baseline side's profile: {why}")
    current, why = memory_from_logdir(current_logdir, side=sides[1] if sides else None, device=device)
    if current is None:
        return none(f"the current side's profile: {why}")
    if base.allocator and current.allocator and base.allocator != current.allocator:
        return none(f"the baseline's allocations are {base.allocator}'s, the current side's {current.allocator}'s "
                    "(another device's allocator); refresh the baseline with --tfperf-update")
    try:
        att = attribute_memory(base, current, measured_bytes)
    except ValueError as exc:
        return none(f"the allocations could not be compared: {exc}")
    data = memory_dict(att)
    return tuple(data["lines"]), data  # type: ignore[arg-type]


def with_memory(time: Explanation | None, memory: tuple[tuple[str, ...], dict[str, Any]]) -> MemoryExplained:
    """One explanation holding the time's (when the throughput regressed too) and the memory's."""
    lines, data = memory
    if time is None:
        return MemoryExplained(lines=lines, memory=data)
    return MemoryExplained(lines=time.lines + lines, attribution=time.attribution, reason=time.reason, memory=data)


def stored_memory(logdir: str | Path) -> dict[str, Any] | None:
    """What a refresh stores beside the compact profile: the allocations by op read from its raw profile
    (``memory_to_dict``), or None when it holds none (a TensorFlow without allocation events)."""
    from pytest_tfperf.profiling.memory_profile import memory_from_logdir, memory_to_dict

    profile, _ = memory_from_logdir(logdir)
    return None if profile is None else memory_to_dict(profile)

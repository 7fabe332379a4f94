"""What a session explains, and with which profiled passes: the one place ``--tfperf-explain`` is decided.

The session calls ``explain_outcomes`` once per measured test, after its
verdicts (never in the timed rounds), and a partner session answers the
coordinator's profile requests with ``profile_for_coordinator``. How a side is
profiled and a change attributed is ``explanation``'s; this module only chooses
which of its passes a verdict gets: the other version's (``--tfperf-against``),
a ``compare()`` reference's, or a stored baseline's profile.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Protocol, cast

from pytest_tfperf.measuring.workload import RunSettings, Workload
from pytest_tfperf.model import Measurement

if TYPE_CHECKING:
    from pytest_tfperf.config import SessionConfig
    from pytest_tfperf.explain.explanation import Explanation, Profiler
    from pytest_tfperf.session.outcome import Outcome
    from pytest_tfperf.against.partner import Partner


class ExplainingSession(Protocol):
    """What of ``session.TfPerfSession`` the explanations use (a protocol: the session imports this module, so
    this module cannot import the session's)."""

    config: SessionConfig
    rootdir: str
    profiler: Profiler | None  # None: profiling.capture.profile_step; a fake in tests
    profiles: dict[str, dict[str, Any]]  # test id -> compact profile (JSON), for the refreshed baselines


# The profiles of both versions in more pairs of processes, for a test id and a number of iterations a window,
# given the longest wait for a profiled pass: [(partner's, this version's)] and a line for each pair not had
# (``against.plan.profile_fresh_pairs``).
MorePairs = Callable[[str, int, float], tuple[Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]], Sequence[str]]]


def explain_outcomes(session: ExplainingSession, workloads: dict[str, Workload], measured: dict[str, Measurement],
                     outcomes: dict[str, Outcome], reference: str | None, settings: RunSettings, *,
                     against: bool, partner: Partner | None = None, more_pairs: MorePairs | None = None) -> None:
    """Explanations (on unless --no-tfperf-explain), after the timed rounds (never in them).

    A refresh profiles each test and keeps the profile (and its allocations by op) for its baseline. A failed
    throughput verdict is explained: a compare() variant against a profiled pass of its reference, a stored
    regression against the baseline's profile, a ``--tfperf-against`` one against ``partner``'s pass of its side.
    A passing test is never profiled. The verdict stands whatever happens here.
    """
    if not session.config.update and not any(o.failed for o in outcomes.values()):
        return  # a passing test: nothing to profile, nothing to import (a partner waits for its release)
    if session.config.update:
        _profile_baselines(session, workloads, measured, outcomes, settings)
    for name, o in outcomes.items():
        if o.throughput_regressed:
            o.explanation = _explain_time(session, o, name, workloads, measured, reference, settings,
                                          against=against, partner=partner, more_pairs=more_pairs)
    for name, o in outcomes.items():
        if o.failed:
            explain_memory_outcome(session, o, name, workloads, measured, reference, settings, against=against,
                                   partner=partner)
    store_memory(session, measured)


def _profile_baselines(session: ExplainingSession, workloads: dict[str, Workload], measured: dict[str, Measurement],
                       outcomes: dict[str, Outcome], settings: RunSettings) -> None:
    """A refresh: each stored test's profile, kept for its baseline (``session.profiles``)."""
    from pytest_tfperf.explain.explanation import iterations_for, profile_dir, profile_side, rounds_seconds
    from pytest_tfperf.profiling.capture import NOT_LOADED

    for name, m in measured.items():
        if m.timings.iterations <= 1:
            continue  # not stored either (outputs._update_baselines)
        cost: list[str] = []
        profile, why = profile_side(workloads[name], session.rootdir, m.test_id, "baseline",
                                    iterations_for(m.median_s, settings.budget_s), session.profiler,
                                    rounds_seconds(m.timings), cost)
        outcomes[name].notices += [f"{m.test_id}: {line}" for line in cost]
        if profile is not None:
            stored = profile.to_dict()
            # Relative to the rootdir: the baseline is reviewed in git, read on other machines.
            stored["logdir"] = str(profile_dir(".", m.test_id, "baseline"))
            session.profiles[m.test_id] = stored
        elif NOT_LOADED not in str(why):  # a test without TensorFlow has no profile to keep: not news
            outcomes[name].notices.append(f"{m.test_id}: no profile stored in its baseline: {why}")


def verdict_change_s(o: Outcome, baseline: Measurement) -> float:
    """The change the verdict states, in seconds per iteration at the baseline's median: what the explanation
    says was measured and checks its parts against. A paired verdict's change is an estimate over the rounds'
    ratios (its printed rates are the baseline's times it), and the difference of the two sides' medians can
    read far from it: +0.75 ms against the verdict's -14.9% (+25 ms) on a ``model.fit`` step whose iterations
    take two speeds. The medians' difference where the verdict states no change, or the sides count items
    differently."""
    current = o.measurement
    metric = next((m for m in o.verdict.metrics if m.metric == "throughput"), None) if o.verdict is not None else None
    change = None if metric is None else metric.relative_change
    if (change is None or not math.isfinite(change) or change <= -1.0
            or current.timings.items_per_iteration != baseline.timings.items_per_iteration):
        return current.median_s - baseline.median_s
    return baseline.median_s * (1.0 / (1.0 + change) - 1.0)


def _explain_time(session: ExplainingSession, o: Outcome, name: str, workloads: dict[str, Workload],
                  measured: dict[str, Measurement], reference: str | None, settings: RunSettings, *,
                  against: bool, partner: Partner | None, more_pairs: MorePairs | None = None) -> Explanation | None:
    """A verdict's time explained by the passes its rule calls for: beside the partner, beside a compare()
    reference, or against a stored baseline's profile; None for a verdict with none of these."""
    from pytest_tfperf.explain.explanation import baseline_commit, explain_pair, explain_stored, rounds_seconds

    if against:
        return _explain_against(session, o, workloads[name], settings, partner, more_pairs)
    if reference is not None and name != reference:
        ref = measured[reference]
        return explain_pair(o.measurement.test_id, workloads[reference], workloads[name],
                            measured_s=verdict_change_s(o, ref), median_s=ref.median_s,
                            budget_s=settings.budget_s, rootdir=session.rootdir, profiler=session.profiler,
                            rounds_s=rounds_seconds(ref.timings) + rounds_seconds(o.measurement.timings))
    if o.stored is not None and o.paired_with is None:
        baseline = o.stored[0]
        return explain_stored(o.measurement.test_id, o.stored_profile, workloads[name],
                              measured_s=verdict_change_s(o, baseline), median_s=baseline.median_s,
                              budget_s=settings.budget_s, rootdir=session.rootdir, profiler=session.profiler,
                              rounds_s=rounds_seconds(o.measurement.timings), commit=baseline_commit(o.stored[1]))
    return None


def store_memory(session: ExplainingSession, measured: dict[str, Measurement]) -> None:
    """A refresh under --tfperf-explain: the baseline's allocations by op join its stored profile (``"memory"``,
    a few hundred bytes), so a stored TF-allocator regression can be explained later."""
    if not session.profiles:
        return
    from pytest_tfperf.explain.explanation import profile_dir, stored_memory

    for m in measured.values():
        stored = session.profiles.get(m.test_id)
        if stored is not None and "memory" not in stored:
            memory = stored_memory(profile_dir(session.rootdir, m.test_id, "baseline"))
            if memory is not None:
                stored["memory"] = memory


def explain_memory_outcome(session: ExplainingSession, o: Outcome, name: str, workloads: dict[str, Workload],
                           measured: dict[str, Measurement], reference: str | None, settings: RunSettings, *,
                           against: bool, partner: Partner | None = None) -> None:
    """A TF-allocator peak that regressed: the allocations by op of both sides' raw profiles (taken for the
    time's explanation, or now: then the time's lines are not shown), the added peak's change split over the
    ops that moved. A stored baseline's side is the allocations its refresh stored (``store_memory``)."""
    from pytest_tfperf.explain.explanation import (
        explain_memory, profile_dir, regressed_tf_memory, tf_allocator_device, with_memory,
    )

    metric = regressed_tf_memory(o.verdict)
    if metric is None:
        return
    device = tf_allocator_device(metric.metric)  # the allocator of the device whose peak regressed
    test_id = o.measurement.test_id
    assert metric.current_value is not None and metric.baseline_value is not None  # a regression compared both
    change = float(metric.current_value - metric.baseline_value)
    time = o.explanation
    stored_profile = o.stored_profile if isinstance(o.stored_profile, dict) else None
    stored = stored_profile.get("memory") if stored_profile is not None else None
    paired = against or (reference is not None and name != reference)
    if paired or (o.stored is not None and isinstance(stored, dict)):
        # The throughput passed: the sides are profiled for the memory alone, their time's lines not shown.
        time_alone = time if time is not None else _explain_time(session, o, name, workloads, measured, reference,
                                                                 settings, against=against, partner=partner)
        why = time_alone.reason if time_alone is not None else None
    if paired:
        base_side, current_side = ("partner", "this") if against else ("reference", "variant")
        pair = profile_dir(session.rootdir, test_id, "pair")
        if not against and pair.exists():  # both sides in one profile, their windows alternating
            memory = explain_memory(pair, pair, change, why, sides=(base_side, current_side), device=device)
        else:
            memory = explain_memory(profile_dir(session.rootdir, test_id, base_side),
                                    profile_dir(session.rootdir, test_id, current_side), change, why, device=device)
    elif o.stored is not None and stored_profile is not None and isinstance(stored, dict):
        # A compact profile's logdir is a string (``Profile.to_dict``).
        memory = explain_memory(cast("str | None", stored_profile.get("logdir")) or None,
                                profile_dir(session.rootdir, test_id, "current"), change, why, stored=stored,
                                device=device)
    else:
        memory = explain_memory(None, None, change, "the stored baseline keeps no allocations by op; refresh "
                                "it with --tfperf-update")
    o.explanation = with_memory(time, memory)


def _explain_against(session: ExplainingSession, o: Outcome, workload: Workload, settings: RunSettings,
                     partner: Partner | None, more_pairs: MorePairs | None = None) -> Explanation:
    """A regression beside the partner: the partner profiles its side in its process, then this side here."""
    from pytest_tfperf.explain.explanation import (
        Explanation, explain_against, partner_profile_timeout_s, rounds_seconds,
    )

    run = partner.held if partner is not None else None
    if run is None or o.reference is None:
        reason = f"the partner process that measured {o.measurement.test_id} is gone; it could not be profiled"
        return Explanation(lines=(f"no explanation: {reason}",), reason=reason)
    reference = o.reference
    test_id = o.measurement.test_id

    def profile_partner(iterations: int) -> tuple[dict[str, Any] | None, str | None]:
        return run.profile(rootdir=os.path.abspath(session.rootdir), test_id=test_id, side="partner",
                           iterations=iterations, timeout_s=partner_profile_timeout_s(reference.median_s, iterations))

    def pairs(iterations: int) -> tuple[Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]], Sequence[str]]:
        assert more_pairs is not None
        return more_pairs(test_id, iterations, partner_profile_timeout_s(reference.median_s, iterations))

    return explain_against(test_id, profile_partner, workload, measured_s=verdict_change_s(o, reference),
                           median_s=reference.median_s, budget_s=settings.budget_s, rootdir=session.rootdir,
                           profiler=session.profiler, rounds_s=rounds_seconds(o.measurement.timings),
                           more_pairs=pairs if more_pairs is not None else None,
                           partner_stopped=partner.frozen if partner is not None else nullcontext)


def profile_for_coordinator(profiler: Profiler | None, workloads: dict[str, Workload], message: dict[str, Any],
                            measured: dict[str, Measurement] | None = None) -> dict[str, Any]:
    """This session is a partner under --tfperf-explain: a profiled pass of its side, into the coordinator's
    folder (``<its rootdir>/.tfperf/profiles/<test>/partner/``), the compact profile sent back; at most as
    long as this side's measured rounds."""
    from pytest_tfperf.explain.explanation import profile_side, rounds_seconds

    name = message.get("variant") or next(iter(workloads))
    if name not in workloads:
        return {"profile": None, "reason": f"the partner has no variant {name!r}"}
    mine = (measured or {}).get(name)
    cost: list[str] = []
    profile, why = profile_side(workloads[name], str(message["rootdir"]), str(message["test_id"]),
                                str(message.get("side", "partner")), int(message["iterations"]), profiler,
                                None if mine is None else rounds_seconds(mine.timings), cost,
                                median_s=None if mine is None else mine.median_s)
    data = None if profile is None else profile.to_dict()
    if data is not None and cost:
        data["cost"] = cost[0]  # the pass over its budget: said in the coordinator's message (explain_against)
    return {"profile": data, "reason": why}

"""Trace verdicts in the unit the harness counts: the real runner and TraceCounter, fake tf.functions and clock.

The harness finds tf.functions before and after each round, so a model recompiled on every call counts
once a round, a function retraced on every call once an iteration. A change of budget or rounds alone
must never fail a test; more retracing must, and a rate is confirmed in a fresh process first.
"""

from __future__ import annotations

import itertools

import pytest

from pytest_tfperf.measuring import runner
from pytest_tfperf.measuring import workload as measured
from pytest_tfperf.gates.paired import judge_paired
from pytest_tfperf.gates.pooling import pool
from pytest_tfperf.gates.rounds import judge_rounds
from pytest_tfperf.gates.stored import judge, needs_confirmation
from pytest_tfperf.gates.traces import trace_scale
from pytest_tfperf.gates.verdict import Tolerances
from pytest_tfperf.model import Measurement, Timings
from pytest_tfperf.storage.fields import Field
from pytest_tfperf.storage.serialization import measurement_from_dict, measurement_to_dict
from pytest_tfperf.measuring.trace_count import TraceCounter
from pytest_tfperf.gates.verdict import MetricVerdict, Status
from tests.helpers import FakeClock

CALL_NS = 10_000_000  # every fake call takes 10 ms of fake time


class FakeFunction:
    """Stands for a tf.function: the counter reads only its tracing count."""

    def __init__(self, traces: int = 0) -> None:
        self.traces = traces

    def experimental_get_tracing_count(self) -> int:
        return self.traces


class Workload:
    """A fake workload that retraces the way real ones do; ``kind`` picks how."""

    def __init__(self, kind: str, clock: FakeClock, per_call: int = 1) -> None:
        self.kind, self.clock, self.per_call = kind, clock, per_call
        self.compiled = FakeFunction(1)  # model.compile(): a new function, traced on its first call
        self.retraced = FakeFunction(1)  # one function traced again on new Python values
        self.calls = 0

    def roots(self) -> list[object]:
        return [self.compiled, self.retraced]

    def __call__(self) -> None:
        self.calls += 1
        self.clock.now += CALL_NS
        if self.kind in ("recompile", "mixed"):
            self.compiled = FakeFunction(1)  # the previous one is dropped, as Keras drops train_function
        if self.kind in ("retrace", "mixed"):
            self.retraced.traces += self.per_call
        if self.kind == "settling" and self.calls <= 5:
            self.retraced.traces += 1  # a few more shapes early in the steady state, then none
        if self.kind == "none" and self.calls > 2 and self.per_call > 1:
            self.retraced.traces += 1  # the change under test: retracing where there was none


def measure(kind: str, budget_s: float, rounds: int, per_call: int = 1, test_id: str = "t::step") -> Measurement:
    clock = FakeClock()
    work = Workload(kind, clock, per_call)
    counter = TraceCounter(work.roots)
    counter.refresh()

    def trace_total() -> int:
        counter.refresh()
        return counter.total()

    w = measured.Workload(call=work, trace_total=trace_total)
    settings = measured.RunSettings(budget_s=budget_s, rounds=rounds, min_rounds=3, warmup_s=0.0)
    raw = runner.measure({"": w}, settings, clock=clock, watch=False)[""]
    return measured.build_measurement(test_id, "call", raw, traces_first_call=raw.traces_first_call,
                                     traces_steady=raw.traces_steady)


def traces(verdict_metrics: MetricVerdict | None) -> MetricVerdict:
    assert verdict_metrics is not None
    return verdict_metrics


# Budgets from 3 rounds of 1 iteration (a slow spell) to 5 rounds of 20; rounds 3 to 7.
SETTINGS = [(0.02, 5), (0.05, 5), (0.2, 5), (1.0, 5), (0.3, 3), (0.7, 7)]


def test_the_harness_counts_a_recompile_once_a_round_and_a_retrace_once_an_iteration() -> None:
    # What the verdict's unit rests on: found between rounds, a function replaced on every call is seen once.
    recompile = measure("recompile", 0.2, 5)
    assert recompile.timings.iterations == 20 and recompile.traces_steady == 5
    retrace = measure("retrace", 0.2, 5)
    assert retrace.traces_steady == 20
    assert measure("settling", 0.2, 5).traces_steady == 3  # calls 3-5, after the first call and one warm-up call


@pytest.mark.parametrize("kind", ["recompile", "retrace", "mixed", "settling"])
def test_unchanged_retracing_passes_at_any_budget_and_rounds_between_refresh_and_check(kind: str) -> None:
    measured = {s: measure(kind, *s) for s in SETTINGS}
    for (a, base), (b, cur) in itertools.permutations(measured.items(), 2):
        for rule in (judge, judge_rounds):
            t = traces(rule(cur, base, Tolerances()).metric("traces_steady"))
            assert t.status is not Status.REGRESSED, f"{kind} refreshed at {a}, checked at {b}: {t.message}"


def test_the_issues_repro_refreshed_at_budget_2_checked_at_half_a_second_passes() -> None:
    # A model recompiled on every call (one trace a round); the check iterates far less than the refresh did.
    base = measure("recompile", 0.2, 5)  # 5 traces in 5 rounds of 4 iterations
    cur = measure("recompile", 0.04, 5)  # 4 rounds of 1: fewer iterations, fewer rounds
    assert (base.traces_steady, len(cur.timings.round_sizes), cur.traces_steady) == (5, 4, 4)
    t = traces(judge(cur, base, Tolerances()).metric("traces_steady"))
    assert t.status is Status.UNCHANGED, t.message
    assert t.message == (
        "traces_steady: 5 -> 4 tf.function traces after warm-up (baseline 5 in 5 rounds of 20 iterations, this run "
        "4 in 4 rounds of 4 iterations; counted between rounds, a count grows with the rounds or the iterations, "
        "so unchanged code counts 1.0 to 5.0 here): unchanged")


def test_twice_the_retracing_is_caught_and_needs_confirmation_in_a_fresh_process() -> None:
    base = measure("retrace", 0.2, 5)
    for budget, rounds in [(0.2, 5), (0.3, 3), (1.0, 5)]:
        worse = measure("retrace", budget, rounds, per_call=2)
        verdict = judge(worse, base, Tolerances())
        t = traces(verdict.metric("traces_steady"))
        assert t.status is Status.REGRESSED, t.message
        assert needs_confirmation(t) and verdict.needs_confirmation
        assert "more retracing than the baseline in every unit it counts in: " in t.message

    worse, again = measure("retrace", 0.2, 5, per_call=2), measure("retrace", 0.3, 3, per_call=2)
    confirmed = judge(worse, base, Tolerances(), confirmation=again)
    t = traces(confirmed.metric("traces_steady"))
    assert t.status is Status.REGRESSED and not confirmed.needs_confirmation and confirmed.confirmed
    assert "(a fresh process counted 60 in 3 rounds of 30 iterations, where unchanged code counts 12.0 to 30.0: " \
           "confirmed)" in t.message

    healthy = measure("retrace", 0.3, 3)  # the fresh process retraces as the baseline did: one slow process
    unconfirmed = traces(judge(worse, base, Tolerances(), confirmation=healthy).metric("traces_steady"))
    assert unconfirmed.status is Status.UNCHANGED
    assert "not confirmed: a fresh process counted 30 in 3 rounds of 30 iterations" in unconfirmed.message


def test_a_trace_where_the_baseline_had_none_fails_once_a_fresh_process_counts_one_too() -> None:
    base = measure("none", 0.2, 5)
    assert base.traces_steady == 0
    for budget, rounds in SETTINGS:
        current = measure("none", budget, rounds, per_call=2)
        verdict = judge(current, base, Tolerances())
        t = traces(verdict.metric("traces_steady"))
        assert t.status is Status.REGRESSED, t.message
        # An exact count is confirmed like a rate: a retrace that shows only after some number of iterations
        # appears in the processes that ran that far, and iteration counts vary up to 21x between processes.
        assert needs_confirmation(t) and verdict.needs_confirmation
        assert "(exact count; any increase fails)" in t.message
        again = judge(current, base, Tolerances(), confirmation=measure("none", budget, rounds, per_call=2))
        confirmed = traces(again.metric("traces_steady"))
        assert confirmed.status is Status.REGRESSED and again.failed, confirmed.message
        assert "a fresh process counted" in confirmed.message and "confirmed" in confirmed.message
    # The fresh process ran fewer iterations and never reached the retrace: one process's word, not a failure.
    gone = judge(measure("none", 0.2, 5, per_call=2), base, Tolerances(), confirmation=measure("none", 0.02, 5))
    cleared = traces(gone.metric("traces_steady"))
    assert cleared.status is Status.UNCHANGED and not gone.failed, cleared.message
    assert "not confirmed (exact count; any increase fails): a fresh process counted 0" in cleared.message
    unchanged = traces(judge(measure("none", 0.02, 5), base, Tolerances()).metric("traces_steady"))
    assert unchanged.status is Status.UNCHANGED


def test_fewer_traces_in_every_unit_is_an_improvement_and_only_then() -> None:
    base = measure("retrace", 0.2, 5, per_call=2)  # 40 in 20 iterations
    better = traces(judge(measure("retrace", 0.2, 5), base, Tolerances()).metric("traces_steady"))
    assert better.status is Status.IMPROVED, better.message
    # 60 traces in 3 rounds of 30: more than 40, yet 2 per iteration as before: unchanged.
    fewer_calls = traces(judge(measure("retrace", 0.3, 3, per_call=2), base, Tolerances()).metric("traces_steady"))
    assert fewer_calls.status is Status.UNCHANGED, fewer_calls.message


def test_the_scale_uses_the_iterations_measured_not_the_samples_a_stored_file_kept() -> None:
    base = measure("retrace", 1.0, 5)  # 100 iterations, 100 traces
    stored = measurement_from_dict(measurement_to_dict(base, max_samples=10), Field("b.json", "measurement"))
    assert stored.timings.iterations == 10 and stored.timings.iterations_measured == 100
    cur = measure("retrace", 1.0, 5)
    assert trace_scale(stored, cur) == (1.0, 1.0)
    assert traces(judge(cur, stored, Tolerances()).metric("traces_steady")).status is Status.UNCHANGED


def test_pooled_measurements_add_their_traces_as_they_add_rounds_and_iterations() -> None:
    a, b = measure("recompile", 0.2, 5), measure("recompile", 0.05, 5)
    pooled = pool(a, b)
    assert pooled.traces_steady == a.traces_steady + b.traces_steady == 10
    assert len(pooled.timings.round_sizes) == 10
    t = traces(judge_paired(pooled, pool(a, a), Tolerances()).metric("traces_steady"))
    assert t.status is Status.UNCHANGED, t.message


def test_trace_scale_covers_any_mix_of_units() -> None:
    def of(rounds: int, iterations: int) -> Measurement:
        per = iterations // rounds
        return Measurement(test_id="t", mode="call", traces_steady=1,
                           timings=Timings((1,) * (rounds * per), (per,) * rounds, 1.0, 1))

    assert trace_scale(of(5, 20), of(4, 4)) == (0.2, 1.0)  # fewer rounds and iterations: a process count is 1x
    assert trace_scale(of(4, 4), of(5, 20)) == (1.0, 5.0)
    assert trace_scale(of(5, 50), of(5, 150)) == (1.0, 3.0)
    # Any non-negative mix c + r * rounds + i * iterations stays within the scaled range.
    for (r0, n0), (r1, n1) in itertools.permutations([(3, 3), (5, 20), (7, 70), (4, 4)], 2):
        low, high = trace_scale(of(r0, n0), of(r1, n1))
        for c, r, i in itertools.product((0, 1, 3), repeat=3):
            if c + r + i:
                base, cur = c + r * r0 + i * n0, c + r * r1 + i * n1
                assert base * low - 1e-9 <= cur <= base * high + 1e-9


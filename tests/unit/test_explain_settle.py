"""A pass over a dataset starts where the timed rounds were: its pipeline's buffers, filled while the process
waited, are pulled unprofiled first (``explain.settle``). A fake clock and a fake pipeline: ``buffered``
elements come back at once, every later one takes ``make_s``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from pytest_tfperf.explain import settle as settling
from pytest_tfperf.explain.explanation import explain_against, profile_side
from pytest_tfperf.explain.settle import SETTLE_CALLS, SETTLE_RESERVE_CALLS, pulls_from_dataset, reserve_s, settle
from pytest_tfperf.measuring.workload import Workload, dataset_puller
from tests.unit.test_explain_session import BASE, MS, PLANTED, FakeProfiler


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Pipeline:
    """``buffered`` elements ready at once, then one every ``make_s`` (the fake clock advances by it)."""

    def __init__(self, clock: Clock, buffered: int, make_s: float) -> None:
        self.clock, self.buffered, self.make_s, self.pulled = clock, buffered, make_s, 0

    def __iter__(self) -> Iterator[int]:
        while True:
            if self.pulled >= self.buffered:
                self.clock.now += self.make_s
            self.pulled += 1
            yield self.pulled


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(settling, "_clock", fake)
    return fake


def test_the_buffered_elements_are_pulled_then_as_many_made_as_it_takes_to_see_it(clock: Clock) -> None:
    pipeline = Pipeline(clock, buffered=30, make_s=10 * MS)
    pull = iter(pipeline)
    calls, seconds = settle(lambda: next(pull), median_s=10 * MS)
    assert pipeline.pulled == calls == 30 + SETTLE_CALLS // 2 + 1  # the last five average half the rounds' time
    assert seconds == pytest.approx((calls - 30) * 10 * MS)


def test_a_steady_workload_settles_in_five_calls(clock: Clock) -> None:
    pull = iter(Pipeline(clock, buffered=0, make_s=10 * MS))
    assert settle(lambda: next(pull), median_s=10 * MS)[0] == SETTLE_CALLS


def test_settling_ends_at_its_limit_when_the_pulls_never_take_the_rounds_time(clock: Clock) -> None:
    pull = iter(Pipeline(clock, buffered=0, make_s=2.0**-10))  # ten times faster than the rounds: stop anyway
    calls, seconds = settle(lambda: next(pull), median_s=10 * MS, max_s=0.5)
    assert calls == 512 and seconds == 0.5


@pytest.mark.parametrize("median", [0.0, float("nan"), float("inf")])
def test_no_measured_time_no_settling(clock: Clock, median: float) -> None:
    assert settle(lambda: pytest.fail("called"), median_s=median) == (0, 0.0)


def test_only_a_workload_that_pulls_from_a_dataset_is_settled() -> None:
    assert pulls_from_dataset(Workload(call=dataset_puller(lambda: iter(range(3)))))
    assert pulls_from_dataset(Workload(call=lambda: None, pull=lambda: 1, step=lambda e: e))
    assert not pulls_from_dataset(Workload(call=lambda: None))


def test_this_sides_pass_starts_after_its_buffer_and_keeps_the_rest_of_its_budget(clock: Clock,
                                                                                 tmp_path: Path) -> None:
    pipeline = Pipeline(clock, buffered=40, make_s=28 * MS)
    this = Workload(call=dataset_puller(lambda: iter(pipeline)))
    pulled_before_the_pass: list[int] = []

    class Recording(FakeProfiler):
        """As profiling.capture does: ``before_windows`` once, inside the pass, right before the windows."""

        def __call__(self, step: Any, logdir: Path, **kw: Any) -> Any:
            kw.pop("before_windows")()
            pulled_before_the_pass.append(pipeline.pulled)
            return super().__call__(step, logdir, **kw)

    fake = Recording(this=PLANTED)

    partner = lambda iterations: ({**BASE.to_dict(), "logdir": str(tmp_path / "p")}, None)  # noqa: E731
    out = explain_against("t.py::test_x", partner, this, measured_s=8 * MS, median_s=20 * MS, budget_s=2.0,
                          rootdir=tmp_path, profiler=fake, rounds_s=2.0)
    assert pulled_before_the_pass == [40 + SETTLE_CALLS // 2 + 1]  # this side's median: 20 + 8 ms
    assert fake.budgets[0]["budget_s"] == pytest.approx(2.0 * 3 / 4)  # a quarter kept for the settling
    assert out.lines[0].startswith("where the time went: +8.00 ms/iteration measured")


def test_a_step_that_holds_a_pipeline_is_settled_with_less_of_the_budget_set_aside(clock: Clock,
                                                                                   tmp_path: Path) -> None:
    """A step that pulls ``next(it)`` itself (not ``tfperf.iterate``): its pipeline fills its buffers while the
    process waits just the same, so its pass is settled too, with SETTLE_RESERVE_CALLS of its iterations set
    aside from the budget instead of a quarter of it."""
    pipeline = Pipeline(clock, buffered=30, make_s=20 * MS)
    pull = iter(pipeline)

    class Recording(FakeProfiler):
        def __call__(self, step: Any, logdir: Path, **kw: Any) -> Any:
            kw.pop("before_windows")()
            return super().__call__(step, logdir, **kw)

    fake = Recording(this=PLANTED)
    profile, why = profile_side(Workload(call=lambda: next(pull)), tmp_path, "t.py::test_x", "this", 10, fake,
                                rounds_s=2.0, median_s=20 * MS)
    assert why is None and pipeline.pulled == 30 + SETTLE_CALLS // 2 + 1 + 1  # drained, then the pass's call
    assert fake.budgets[0]["budget_s"] == pytest.approx(2.0 - SETTLE_RESERVE_CALLS * 20 * MS)
    assert reserve_s(20 * MS, 0.5) == pytest.approx(0.2) and reserve_s(1.0, 0.5) == 0.5
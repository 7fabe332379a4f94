"""The machine's floor on a test's spread where one refresh cannot show it: a quiet spell, a bimodal
calibration, no calibration at all. Each case is judged through the shipped code (``BaselineStore.save``,
``machine_floor_of``, ``gates.stored.judge``) with a run and its fresh-process confirmation."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from pathlib import Path

from pytest_tfperf.gates import stored_rule
from pytest_tfperf.gates.baseline_runs import BaselineRuns, machine_floor_of
from pytest_tfperf.gates.stored import judge
from pytest_tfperf.gates.verdict import Status, Tolerances
from pytest_tfperf.model import Environment, Measurement, Timings
from pytest_tfperf.storage.baseline_store import BaselineStore
from pytest_tfperf.storage import runs as stored_runs
from pytest_tfperf.storage.runs import CALIBRATION_ID, REFRESH, RunSummary

TEST = "tests/t.py::test_step"
ENV = Environment(hard=(("cpu_model", "Xeon"), ("tensorflow", "2.21.0")), soft=())
WHEN = datetime(2026, 11, 1, tzinfo=timezone.utc)


def measurement(throughput: float, test_id: str = TEST) -> Measurement:
    ns = round(100 * 1e9 / throughput)
    return Measurement(test_id=test_id, mode="call", timings=Timings((ns,) * 25, (5,) * 5, 100.0, ns),
                       memory=(), traces_first_call=1, traces_steady=0, environment_id=ENV.fingerprint)


def refresh(store: BaselineStore, test_id: str, values: list[float], when: datetime) -> None:
    """A refresh of ``test_id``: one run per process, as ``--tfperf-update`` saves it."""
    first, *others = [measurement(v, test_id) for v in values]
    store.save([first], ENV, recorded_at=when, extra_runs={test_id: others})


def quiet_runs(level: float = 1000.0) -> BaselineRuns:
    # 7 processes within 1% of each other: a refresh taken in a quiet spell.
    values = [level * (1 + d) for d in (0.0, 0.004, -0.004, 0.008, -0.008, 0.002, -0.002)]
    return BaselineRuns(tuple(RunSummary(f"r{i}", "2026-11-01T00:00:00Z", REFRESH, v) for i, v in enumerate(values)))


def final_throughput(base: BaselineRuns, first: float, again: float) -> Status:
    """The status after the run and its confirmation in a fresh process (as the session judges them)."""
    verdict = judge(measurement(first), measurement(1000.0), Tolerances(), runs=base)
    if verdict.needs_confirmation:
        verdict = judge(measurement(first), measurement(1000.0), Tolerances(), runs=base,
                        confirmation=measurement(again))
    m = verdict.metric("throughput")
    assert m is not None
    return m.status


def test_a_refresh_in_a_quiet_spell_is_floored_by_the_calibrations_earlier_refreshes(tmp_path: Path) -> None:
    # The design collection's case: a refresh whose 7 processes all ran in a quiet spell (the calibration
    # within 1-2%), after which unchanged code ran 25-41% slower in two processes in a row. The earlier
    # refresh of the calibration saw the machine's real spread (about 12%).
    store = BaselineStore(tmp_path)
    refresh(store, CALIBRATION_ID, [800.0, 1100.0, 1120.0, 840.0, 1060.0, 1020.0, 1010.0], WHEN)
    refresh(store, CALIBRATION_ID, [1000.0, 1010.0, 990.0, 1015.0, 985.0, 1005.0, 995.0], WHEN + timedelta(days=3))
    kept = store.load(CALIBRATION_ID, ENV).baseline.runs
    assert len(kept) == 14 and kept[0].recorded_at > kept[-1].recorded_at  # this refresh's first, then older
    floor = machine_floor_of(store.baselines_for(ENV))
    assert floor.source == "calibration" and floor.df == 13.0
    base = BaselineRuns(quiet_runs().runs, machine=floor)
    assert final_throughput(base, 1000.0 / 1.3, 1000.0 / 1.35) is not Status.REGRESSED
    # What a slowdown beyond the stated limit still does: fail.
    assert final_throughput(base, 1000.0 / 3, 1000.0 / 3) is Status.REGRESSED


def test_a_refresh_that_caught_only_the_fast_mode_of_a_bimodal_machine_is_floored(tmp_path: Path) -> None:
    # The noisy collection's case: processes run either about +30% or -44% from the mean, and a refresh
    # happened to catch only fast ones; unchanged code then ran 57% slower in two processes.
    store = BaselineStore(tmp_path)
    fast, slow = 1300.0, 560.0
    refresh(store, CALIBRATION_ID, [fast, slow, fast, fast, slow, fast, fast], WHEN)
    refresh(store, CALIBRATION_ID, [fast * (1 + d) for d in (0.0, 0.01, -0.01, 0.02, -0.02)], WHEN + timedelta(1))
    floor = machine_floor_of(store.baselines_for(ENV))
    base = BaselineRuns(tuple(RunSummary(f"r{i}", "", REFRESH, fast * (1 + d))
                              for i, d in enumerate((0.0, 0.01, -0.01, 0.02, -0.02))), machine=floor)
    assert final_throughput(base, fast * 0.43, fast * 0.41) is not Status.REGRESSED


def test_the_calibration_keeps_at_most_its_newest_runs(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    for day in range(6):
        refresh(store, CALIBRATION_ID, [1000.0 + day + i for i in range(7)], WHEN + timedelta(days=day))
    kept = store.load(CALIBRATION_ID, ENV).baseline.runs
    assert len(kept) == stored_runs.CALIBRATION_RUNS_KEPT
    assert [round(r.throughput_per_s) for r in kept[:7]] == [1005 + i for i in range(7)]
    # A test's baseline is this refresh's runs only: its level must be this code's.
    refresh(store, TEST, [1000.0] * 7, WHEN)
    refresh(store, TEST, [900.0] * 7, WHEN + timedelta(days=1))
    assert [round(r.throughput_per_s) for r in store.load(TEST, ENV).baseline.runs] == [900] * 7


def test_a_small_suite_without_a_calibration_gets_an_assumed_floor() -> None:
    # No calibration baseline (one written before it existed, or never committed) and one test: its 7 agreeing
    # runs alone set a bound an ordinary slow process crosses twice in a row.
    own = quiet_runs()
    floor = machine_floor_of([])
    base = BaselineRuns(own.runs, machine=floor)
    assert final_throughput(base, 1000.0 / 1.3, 1000.0 / 1.4) is not Status.REGRESSED
    verdict = judge(measurement(1000.0 / 1.3), measurement(1000.0), Tolerances(), runs=base)
    message = verdict.metric("throughput").message
    assert "no calibration baseline measured this machine" in message and "tfperf-calibration-" in message
    assert floor.source == "assumed" and floor.sd == stored_rule.ASSUMED_FLOOR_SD
    # A gross slowdown still fails.
    assert final_throughput(base, 1000.0 / 5, 1000.0 / 5) is Status.REGRESSED
    # Four tests (fewer than the suite floor needs) are floored the same way.
    assert stored_rule.machine_floor([(0.01, 6.0)] * 4).source == "assumed"
    assert math.isclose(stored_rule.machine_floor([(0.01, 6.0)] * 5).sd, 0.01)


def test_a_first_refresh_assumes_its_processes_shared_a_spell_until_the_calibration_spans_refreshes(
        tmp_path: Path) -> None:
    # The machine's first refresh: the calibration's 7 runs are all there is, taken back to back in one spell
    # (4% apart, as the design collection's quietest window). Unchanged code then ran 6.7 of those spreads
    # slower in two processes in a row (the design collection's case: 25-41% slower after a 4% window).
    store = BaselineStore(tmp_path)
    spell = [math.exp(0.04 * z) * 1000.0 for z in (0.0, 1.2, -1.2, 0.6, -0.6, 1.5, -1.5)]
    refresh(store, CALIBRATION_ID, spell, WHEN)
    first = machine_floor_of(store.baselines_for(ENV))
    assert first.source == "calibration" and getattr(first, "refreshes", 1) == 1
    sd = stored_rule.log_spread(spell)
    slower = 1000.0 * math.exp(-6.7 * sd)
    base = BaselineRuns(quiet_runs().runs, machine=first)
    assert final_throughput(base, slower, slower) is not Status.REGRESSED
    assert final_throughput(base, 1000.0 / 3, 1000.0 / 3) is Status.REGRESSED  # a gross change still fails
    # Once a later refresh adds its runs, their spread spans spells and none is assumed: the same quiet
    # refresh again gives a floor of 14 runs, and the bound narrows.
    refresh(store, CALIBRATION_ID, spell, WHEN + timedelta(days=2))
    later = machine_floor_of(store.baselines_for(ENV))
    assert later.refreshes == 2
    narrow = BaselineRuns(quiet_runs().runs, machine=later)
    assert final_throughput(narrow, slower, slower) is Status.REGRESSED

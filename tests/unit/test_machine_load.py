from __future__ import annotations

import sys
import types
from collections import namedtuple

import pytest

from pytest_tfperf.catalog import machine_load

SystemTimes = namedtuple("SystemTimes", "user nice system idle iowait irq softirq steal guest guest_nice")
ProcessTimes = namedtuple("ProcessTimes", "user system children_user children_system")


class FakePsutil(types.ModuleType):
    """The psutil calls machine_load makes, over counters a test moves by hand."""

    Error = OSError

    def __init__(self) -> None:
        super().__init__("psutil")
        self.system = SystemTimes(100.0, 0.0, 20.0, 500.0, 7.0, 1.0, 1.0, 2.0, 30.0, 0.0)
        self.own = ProcessTimes(10.0, 2.0, 3.0, 1.0)
        self.live_children = [(4.0, 1.0)]

    def cpu_times(self) -> SystemTimes:
        return self.system

    def Process(self) -> types.SimpleNamespace:  # noqa: N802 - psutil's name
        children = [types.SimpleNamespace(cpu_times=lambda t=t: t) for t in self.live_children]
        return types.SimpleNamespace(cpu_times=lambda: self.own, children=lambda recursive: children)


@pytest.fixture
def psutil(monkeypatch: pytest.MonkeyPatch) -> FakePsutil:
    fake = FakePsutil()
    monkeypatch.setitem(sys.modules, "psutil", fake)
    return fake


def test_busy_time_leaves_out_idle_iowait_and_the_guest_time_already_inside_user(psutil: FakePsutil) -> None:
    assert machine_load.system_busy_s() == pytest.approx(100 + 20 + 1 + 1 + 2)


def test_own_time_counts_finished_and_live_children(psutil: FakePsutil) -> None:
    assert machine_load.own_cpu_s() == pytest.approx(10 + 2 + 3 + 1 + 4 + 1)


def test_other_load_is_the_machines_busy_time_less_our_own_over_the_wall_time(
        psutil: FakePsutil, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([100.0, 102.0])
    monkeypatch.setattr(machine_load.time, "monotonic", lambda: next(clock))
    with machine_load.OtherLoad() as others:
        psutil.system = psutil.system._replace(user=psutil.system.user + 3.0)  # 3 CPU s busy in 2 s...
        psutil.own = psutil.own._replace(user=psutil.own.user + 1.0)  # ...1 of them ours
    assert others.cores == pytest.approx(1.0)


def test_idle_time_is_idle_and_iowait(psutil: FakePsutil) -> None:
    assert machine_load.idle_cpu_s() == pytest.approx(500 + 7)


def test_call_account_sums_wall_cpu_and_idle_over_the_calls_only() -> None:
    clock, cpu, idle = [0.0], [0.0], [0.0]

    def work() -> str:  # one call: 2 s of wall, 3 CPU s of this process, 0.5 s of the machine idle
        clock[0] += 2.0
        cpu[0] += 3.0
        idle[0] += 0.5
        return "done"

    account = machine_load.CallAccount(work, clock=lambda: clock[0], cpu=lambda: cpu[0], idle=lambda: idle[0])
    assert account() == "done"
    clock[0] += 100.0  # time between calls does not count
    cpu[0] += 50.0
    idle[0] += 70.0
    account()
    use = account.use()
    assert (use.calls, use.wall_s, use.cpu_s, use.idle_s) == (2, 4.0, 6.0, 1.0)
    assert use.cores == pytest.approx(1.5) and use.idle_cores == pytest.approx(0.25)


def test_call_account_counts_a_call_that_raises() -> None:
    def fail() -> None:
        raise ValueError("boom")

    account = machine_load.CallAccount(fail, clock=lambda: 0.0, cpu=lambda: 0.0, idle=lambda: 0.0)
    with pytest.raises(ValueError, match="boom"):
        account()
    assert account.use().calls == 1


def use(cores: float, idle: float, wall: float = 10.0) -> machine_load.CoreUse:
    return machine_load.CoreUse(calls=20, wall_s=wall, cpu_s=cores * wall, idle_s=idle * wall)


def test_a_fix_that_got_its_cores_is_not_excused() -> None:
    assert machine_load.cores_withheld(use(1.9, 0.0), needed=1.5) == ""


def test_a_fix_that_left_idle_cores_untaken_is_not_excused() -> None:
    # A regression (the fix back on one thread) on a quiet machine: one core used, one idle.
    assert machine_load.cores_withheld(use(1.0, 0.95), needed=1.5) == ""


def test_a_fix_short_of_cores_on_a_machine_with_none_idle_is_excused() -> None:
    reason = machine_load.cores_withheld(use(1.1, 0.05), needed=1.5)
    assert "1.10 cores" in reason and "0.05 idle" in reason and "1.5" in reason


def test_nothing_known_excuses_nothing() -> None:
    assert machine_load.cores_withheld(None, needed=1.5) == ""
    assert machine_load.cores_withheld(machine_load.CoreUse(0, 0.0, 0.0, 0.0), needed=1.5) == ""


def test_busy_machine_reason_takes_either_check() -> None:
    quiet_fix = use(1.9, 0.0)
    assert machine_load.busy_machine_reason(needed_cores=1.5, other_cores=0.2, busy_above=0.5, fix=quiet_fix) == ""
    by_others = machine_load.busy_machine_reason(needed_cores=1.5, other_cores=0.9, busy_above=0.5, fix=quiet_fix)
    assert by_others == "other processes used 0.9 cores while it was measured"
    # The whole-scenario average saw little, but the fix's own calls had no core to spare.
    in_calls = machine_load.busy_machine_reason(needed_cores=1.5, other_cores=0.3, busy_above=0.5, fix=use(1.2, 0.0))
    assert in_calls.startswith("the fix got 1.20 cores")
    both = machine_load.busy_machine_reason(needed_cores=1.5, other_cores=0.9, busy_above=0.5, fix=use(1.2, 0.0))
    assert "other processes" in both and "the fix got" in both


def test_core_use_to_dict_rounds_for_the_report() -> None:
    assert use(1.23456, 0.5).to_dict() == {"calls": 20, "wall_s": 10.0, "cores": 1.235, "idle_cores": 0.5}

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

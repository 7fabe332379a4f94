"""What the stored gate judges a test against: its baseline's runs, the runs recorded since, the machine's floor.

Storage keeps each run (``storage.runs``); the gate reads them as one
``BaselineRuns``, with the least spread this machine's processes are known to
have (``machine_floor_of``: the calibration workload's runs and the suite's
baselines, through ``stored_rule.machine_floor``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pytest_tfperf.gates.stored_rule import MachineFloor, log_spread, machine_floor
from pytest_tfperf.storage.baseline_store import StoredBaseline
from pytest_tfperf.storage.runs import CALIBRATION_ID, RunSummary


@dataclass(frozen=True, slots=True)
class BaselineRuns:
    """What the stored gate knows of a test on this machine.

    ``runs``: the baseline's own runs (refreshes, one process each; they set the
    reference level). ``history``: runs recorded since, oldest first (they only
    sharpen the estimate of the between-process spread, see ``stored_rule``).
    """

    runs: tuple[RunSummary, ...]
    history: tuple[RunSummary, ...] = ()
    # The least between-process spread of log throughput this test's bound assumes on this machine
    # (``stored_rule.machine_floor``: the calibration workload's and the suite's). sd 0: unknown.
    machine: MachineFloor = MachineFloor()

    def throughputs(self) -> list[float]:
        return [r.throughput_per_s for r in self.runs if r.throughput_per_s > 0]

    def history_throughputs(self) -> list[float]:
        return [r.throughput_per_s for r in self.history if r.throughput_per_s > 0]

    def memory(self, metric: str) -> list[int]:
        return [v for v in (r.memory(metric) for r in self.runs) if v is not None]

    def history_memory(self, metric: str) -> list[int]:
        return [v for v in (r.memory(metric) for r in self.history) if v is not None]


def machine_floor_of(baselines: Iterable[StoredBaseline]) -> MachineFloor:
    """This machine's floor on every test's between-process spread (``stored_rule.machine_floor``): the
    calibration workload's runs and the spreads of every test among ``baselines`` (one environment's)."""
    calibration: list[float] = []
    refreshes = 0
    suite: list[tuple[float, float]] = []
    for stored in baselines:
        values = [r.throughput_per_s for r in stored.runs]
        if stored.test_id == CALIBRATION_ID:
            calibration = values
            refreshes = len({r.recorded_at for r in stored.runs})  # a refresh stamps all its runs alike
        else:
            suite.append((log_spread(values), float(len(values) - 1)))
    return machine_floor(suite, calibration, refreshes=refreshes)

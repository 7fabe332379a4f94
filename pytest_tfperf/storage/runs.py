"""One run of a test, summarised: what a baseline keeps of each process that measured it.

A stored baseline holds several runs, each measured in its own pytest process
(``--tfperf-update`` starts the extra processes), and a CI job on the main
branch can add runs to the history without replacing the baseline
(``--tfperf-record``). The gate learns from them how far this machine's figures
move from one process to the next; one process's rounds cannot tell (on the
project's 2-core VM whole processes ran up to 1.35x slower than others started
seconds apart, while each process's own rounds agreed within a few percent).

Pure data: no pytest, no TensorFlow, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_tfperf.model import Measurement

# The baseline of the calibration workload (``measuring.calibration``) that every refresh process measures: stored
# like a test's, under an id no pytest node id can have (node ids never start with "::").
CALIBRATION_ID = "::tfperf-calibration"
# Runs the calibration baseline keeps: a refresh's own and, newest first, the earlier refreshes' of the same
# environment. A test's baseline holds one refresh (its level must be this code's); the calibration workload is
# the plugin's own code, so earlier refreshes measured the same thing, and their runs show how far the machine
# moves between refreshes, which one refresh's back-to-back processes cannot (``stored_rule.machine_floor``).
CALIBRATION_RUNS_KEPT = 30
REFRESH = "refresh"  # measured by --tfperf-update: part of the baseline
RECORD = "record"  # measured by --tfperf-record: history only, never the reference level


@dataclass(frozen=True, slots=True)
class RunSummary:
    """The figures of one run of one test that the stored gate compares.

    ``throughput_per_s``: items per second at the run's median iteration.
    ``memory_added_bytes``: per memory metric (``peak_tf_allocator[CPU:0]``...),
    the most any round added above the memory in use when it began (the figure
    the memory gate compares). ``traces_steady``: tf.function traces after warm-up.
    """

    run_id: str
    recorded_at: str  # UTC, ISO 8601
    kind: str  # REFRESH or RECORD
    throughput_per_s: float
    memory_added_bytes: tuple[tuple[str, int], ...] = ()
    traces_steady: int | None = None
    git_commit: str = ""

    def __post_init__(self) -> None:
        if self.kind not in (REFRESH, RECORD):
            raise ValueError(f"a run's kind is {REFRESH!r} or {RECORD!r}, got {self.kind!r}")

    def memory(self, metric: str) -> int | None:
        for name, value in self.memory_added_bytes:
            if name == metric:
                return value
        return None


def summarize(measurement: Measurement, *, run_id: str, recorded_at: str, kind: str = REFRESH,
              git_commit: str = "") -> RunSummary:
    """The run summary of ``measurement``."""
    memory = tuple(
        (peak.metric_name, int(peak.added_bytes))
        for peak in measurement.memory
        if peak.peak_bytes is not None and peak.added_bytes is not None
    )
    return RunSummary(
        run_id=run_id,
        recorded_at=recorded_at,
        kind=kind,
        throughput_per_s=measurement.throughput_per_s,
        memory_added_bytes=memory,
        traces_steady=measurement.traces_steady,
        git_commit=git_commit,
    )


"""What the HTML report is drawn from: results (one run, or the shards of one), the baselines' runs, the history.

Both ways to the page read through here: ``--tfperf-html`` at the end of a
session (``write_report``) and ``tfperf-report`` afterwards (``gather``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pytest_tfperf.gates.baseline_runs import BaselineRuns, machine_floor_of
from pytest_tfperf.gates.stored import baseline_bands
from pytest_tfperf.gates.stored_rule import MachineFloor
from pytest_tfperf.gates.verdict import Tolerances
from pytest_tfperf.model import Environment
from pytest_tfperf.reports.report_model import BaselineFigures, Report, build_report
from pytest_tfperf.reports.shards import ShardedResults, merge_results
from pytest_tfperf.storage.baseline_store import BaselineStore
from pytest_tfperf.storage.history_csv import HISTORY_FILE_NAME, HistoryRow, read_history_rows, recorded_runs
from pytest_tfperf.storage.results_json import results_from_dict
from pytest_tfperf.storage.runs import RunSummary
from pytest_tfperf.storage.documents import utc_timestamp
from pytest_tfperf.storage.fields import JsonDict, StorageError


def baseline_figures(store: BaselineStore, test_id: str, environment: Environment,
                     history: Sequence[RunSummary] = (), machine: MachineFloor = MachineFloor()) -> BaselineFigures:
    """What the stored baseline of one test in one environment holds: the one place that reads it.

    Baselines that keep a summary of each of their runs (``runs``, several
    processes per refresh) give each metric one value per run, hence a band;
    older ones have one measurement: a level, no band. ``history``: the runs recorded on main
    (``--tfperf-record``), which the gate pools into the spread: the band is the gate's bound
    (``gates.stored.baseline_bands``, default tolerances), with ``machine``, this environment's floor
    (``gates.baseline_runs.machine_floor_of``).
    """
    match = store.load(test_id, environment)
    stored = match.baseline
    if stored is None:
        return BaselineFigures()
    runs = getattr(stored, "runs", ())
    if not runs:
        return BaselineFigures.from_measurements([stored.measurement], [stored.recorded_at])
    values: dict[str, list[float]] = {"throughput_per_s": [float(r.throughput_per_s) for r in runs]}
    for run in runs:
        for metric, added in getattr(run, "memory_added_bytes", ()):
            values.setdefault(f"added_{metric}", []).append(float(added))
    steady = [float(r.traces_steady) for r in runs if getattr(r, "traces_steady", None) is not None]
    if steady:
        values["traces_steady"] = steady
    gate = BaselineRuns(runs=tuple(runs), history=tuple(history), machine=machine)
    return BaselineFigures((stored.measurement,), {k: tuple(v) for k, v in values.items()},
                           tuple(str(r.recorded_at) for r in runs), baseline_bands(gate, Tolerances()))


def gather(results: ShardedResults, baseline_dir: str | Path | None, *, title: str = "pytest-tfperf report",
           generated_at: str | None = None) -> Report:
    """Read the baselines and history that go with ``results`` and build the report's data.

    A baseline file that cannot be read costs that test its baseline points,
    not the report (the gate already said so when it ran).
    """
    history: list[HistoryRow] = []
    baselines: dict[str, BaselineFigures] = {}
    if baseline_dir is not None:
        directory = Path(baseline_dir)
        path = directory / HISTORY_FILE_NAME
        if path.exists():
            history = read_history_rows(path)
        if directory.is_dir():
            store = BaselineStore(directory)
            recorded = recorded_runs(history)
            floors: dict[str, MachineFloor] = {}  # per environment: every baseline of it read once
            for test_id, entry in results.tests.items():
                fingerprint = entry.environment.fingerprint
                try:
                    if fingerprint not in floors:
                        floors[fingerprint] = machine_floor_of(store.baselines_for(entry.environment))
                    baselines[test_id] = baseline_figures(store, test_id, entry.environment,
                                                          recorded.get((test_id, fingerprint), ()), floors[fingerprint])
                except StorageError:
                    continue
    return build_report(results, history, baselines, title=title,
                        generated_at=generated_at if generated_at is not None else utc_timestamp(None))


def write_report(document: JsonDict, baseline_dir: str | Path | None, path: str | Path) -> Path:
    """The page of one run given as its results document (``results_json.results_to_dict``): what
    ``--tfperf-html`` writes, through the same steps as ``tfperf-report``."""
    from pytest_tfperf.reports.html_report import write_html

    results = merge_results([results_from_dict(document)])
    return write_html(path, gather(results, baseline_dir))

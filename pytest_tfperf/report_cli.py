"""``tfperf-report RESULTS.json [MORE.json ...] --baseline-dir DIR -o report.html``: the HTML report, afterwards.

For pipelines that measure in one job and publish in another: the same page
as ``pytest --tfperf --tfperf-html=PATH`` writes, from one results file or
the shards of a split suite (files, directories or quoted globs), plus a
baseline directory for the baselines' rounds and the history.

Exit status: 0 written, 2 not written (bad arguments or files, shards that
cannot be merged, matplotlib missing).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from pytest_tfperf.baseline_store import BaselineStore
from pytest_tfperf.compare import Tolerances, baseline_bands
from pytest_tfperf.history import HISTORY_FILE_NAME, HistoryRow, read_history_rows, recorded_runs
from pytest_tfperf.model import Environment
from pytest_tfperf.report_model import BaselineFigures, Report, build_report
from pytest_tfperf.results_json import results_from_dict
from pytest_tfperf.runs import BaselineRuns, RunSummary
from pytest_tfperf.serialization import JsonDict, StorageError, utc_timestamp
from pytest_tfperf.shards import ShardedResults, ShardError, load_shards, merge_results

EXIT_OK = 0
EXIT_ERROR = 2


def baseline_figures(store: BaselineStore, test_id: str, environment: Environment,
                     history: Sequence[RunSummary] = ()) -> BaselineFigures:
    """What the stored baseline of one test in one environment holds: the one place that reads it.

    Baselines that keep a summary of each of their runs (``runs``, several
    processes per refresh) give each metric one value per run, hence a band;
    older ones have one measurement: a level, no band. ``history``: the runs recorded on main
    (``--tfperf-record``), which the gate pools into the spread: the band is the gate's bound
    (``compare.baseline_bands``, default tolerances).
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
    gate = BaselineRuns(runs=tuple(runs), history=tuple(history), machine=store.machine_floor(environment))
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
            for test_id, entry in results.tests.items():
                try:
                    baselines[test_id] = baseline_figures(
                        store, test_id, entry.environment, recorded.get((test_id, entry.environment.fingerprint), ()))
                except StorageError:
                    continue
    return build_report(results, history, baselines, title=title,
                        generated_at=generated_at if generated_at is not None else utc_timestamp(None))


def write_report(document: JsonDict, baseline_dir: str | Path | None, path: str | Path) -> Path:
    """The page of one run given as its results document (``results_json.results_to_dict``): what
    ``--tfperf-html`` writes, through the same steps as this command."""
    from pytest_tfperf.html_report import write_html

    results = merge_results([results_from_dict(document)])
    return write_html(path, gather(results, baseline_dir))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfperf-report",
        description="Build the self-contained HTML report from pytest-tfperf results files (--tfperf-json), "
                    "one per run or one per CI shard, and a baseline directory.",
        epilog="exit status: 0 written, 2 usage or input error",
    )
    parser.add_argument("results", nargs="+",
                        help="results files, directories of them, or quoted globs ('shards/*/results.json'); "
                             "shards are merged, a test in two of them is refused")
    parser.add_argument("--baseline-dir", metavar="DIR", default=None,
                        help="the baseline directory: baselines' rounds and history.csv (optional)")
    parser.add_argument("-o", "--output", metavar="PATH", type=Path, required=True, help="the HTML file to write")
    parser.add_argument("--title", default="pytest-tfperf report", help="the page's title")
    return parser


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 on --help
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    from pytest_tfperf.html_report import write_html
    from pytest_tfperf.plots import PlottingUnavailable

    try:
        results = load_shards(args.results)
        report = gather(results, args.baseline_dir, title=args.title)
        path = write_html(args.output, report)
    except (StorageError, ShardError, PlottingUnavailable) as exc:
        print(f"tfperf-report: {exc}", file=err)
        return EXIT_ERROR
    except OSError as exc:
        print(f"tfperf-report: cannot write {args.output}: {exc.strerror or exc}", file=err)
        return EXIT_ERROR
    failed = sum(t.failed for t in report.tests)
    print(f"report written to {path}: {len(report.tests)} test(s), {failed} failed, "
          f"{len(report.effects)} catalog comparison(s), {path.stat().st_size / 1024:,.0f} KiB", file=out)
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

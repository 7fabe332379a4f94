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

from pytest_tfperf.reports.shards import ShardError, load_shards
from pytest_tfperf.reports.sources import gather
from pytest_tfperf.storage.fields import StorageError

EXIT_OK = 0
EXIT_ERROR = 2


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
    from pytest_tfperf.reports.html_report import write_html
    from pytest_tfperf.reports.plots import PlottingUnavailable

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

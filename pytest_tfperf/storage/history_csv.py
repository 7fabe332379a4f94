"""Run history beside the baselines: a tidy CSV table, one row per (run, test, metric).

Baselines answer "is this run worse than the reference?"; the history answers
"how did this figure move over the last months?". It is a CSV file
(``history.csv`` in the baseline directory) because rows are only ever
appended: a diff shows the new rows and nothing else, and two branches that
both appended merge cleanly with git's union driver (add
``benchmarks/baselines/history.csv merge=union`` to ``.gitattributes``).
``load_history`` copes with what such merges leave: rows out of order, repeated
headers, duplicated rows.

The header is the schema. Changing the columns means a new file name
(``history-v2.csv``), never a silent reinterpretation of old rows.

pandas is imported inside the functions that return tables, so importing this
module stays cheap.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
import subprocess
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_tfperf.storage.atomic_files import DirectoryLock, atomic_write_text
from pytest_tfperf.model import Environment, Measurement
from pytest_tfperf.storage.runs import RECORD, REFRESH, RunSummary
from pytest_tfperf.storage.documents import package_version, utc_timestamp
from pytest_tfperf.storage.fields import StorageError
from pytest_tfperf.storage.serialization import summarize_timings

if TYPE_CHECKING:
    import pandas

HISTORY_FILE_NAME = "history.csv"
COLUMNS = ("recorded_at", "run_id", "test_id", "metric", "value", "unit", "fingerprint", "package_version",
           "git_commit")
_HEADER = ",".join(COLUMNS)
_UNIT_SUFFIXES = (("_ns", "ns"), ("_bytes", "bytes"), ("_per_s", "1/s"), ("_fraction", "fraction"), ("_s", "s"))
ADDED_PREFIX = "added_"
_COMMIT = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")  # SHA-1 or SHA-256


@dataclass(frozen=True, slots=True)
class HistoryRow:
    recorded_at: str
    run_id: str
    test_id: str
    metric: str
    value: float
    unit: str
    fingerprint: str
    package_version: str
    git_commit: str

    @property
    def kind(self) -> str:
        """``record`` for runs of --tfperf-record, ``refresh`` for --tfperf-update (older rows: refreshes)."""
        return RECORD if f"-{RECORD}-" in self.run_id else REFRESH

    def as_tuple(self) -> tuple[str, ...]:
        return (self.recorded_at, self.run_id, self.test_id, self.metric, _format_value(self.value), self.unit,
                self.fingerprint, self.package_version, self.git_commit)


def _format_value(value: float) -> str:
    if isinstance(value, int) or (math.isfinite(value) and value == int(value) and abs(value) < 2**53):
        return str(int(value))
    return repr(float(value))


def unit_of(metric: str) -> str:
    """The unit a metric's name carries (``_ns``, ``_bytes``, ``_per_s``...); ``""`` when it names none."""
    base = metric.split("[", 1)[0]
    for suffix, unit in _UNIT_SUFFIXES:
        if base.endswith(suffix):
            return unit
    return ""


def measurement_metrics(measurement: Measurement) -> list[tuple[str, float, str]]:
    """(metric, value, unit) of everything worth a trend line, in a stable order."""
    t = summarize_timings(measurement.timings)
    out: list[tuple[str, float, str]] = [
        ("throughput_per_s", t.throughput_per_s, "items/s"),
        ("median_ns", t.median_ns, "ns"),
        ("p95_ns", t.p95_ns, "ns"),
        ("first_call_ns", float(measurement.timings.first_call_ns), "ns"),
        ("cv", t.cv, "ratio"),
        ("iterations", float(t.iterations), "count"),
    ]
    for peak in measurement.memory:
        if peak.peak_bytes is not None:
            out.append((peak.metric_name, float(peak.peak_bytes), "bytes"))
            if peak.added_bytes is not None:
                # What the memory gate compares: the most a round added above the memory in use when it began.
                out.append((ADDED_PREFIX + peak.metric_name, float(peak.added_bytes), "bytes"))
    if measurement.traces_first_call is not None:
        out.append(("traces_first_call", float(measurement.traces_first_call), "count"))
    if measurement.traces_steady is not None:
        out.append(("traces_steady", float(measurement.traces_steady), "count"))
    for name, value in measurement.extra_metrics:
        out.append((name, float(value), unit_of(name)))
    return out


def current_git_commit(directory: str | Path = ".") -> str:
    """The commit checked out around ``directory``, or ``""``: best effort, never raises."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True, text=True,
                              timeout=10, check=False)
        commit = done.stdout.strip()
        if done.returncode == 0 and _COMMIT.match(commit):
            return commit
    except (OSError, subprocess.SubprocessError, ValueError):
        pass
    # CI systems often check out without a usable .git but say which commit it is.
    for variable in ("GITHUB_SHA", "CI_COMMIT_SHA", "BUILD_VCS_NUMBER", "GIT_COMMIT"):
        commit = os.environ.get(variable, "").strip().lower()
        if _COMMIT.match(commit):
            return commit
    return ""


def history_rows(
    measurements: Iterable[Measurement],
    environment: Environment,
    run_id: str,
    *,
    recorded_at: str,
    git_commit: str,
    version: str,
) -> list[HistoryRow]:
    """The rows of one run, sorted by test id then metric name."""
    fingerprint = environment.fingerprint
    rows = [
        HistoryRow(recorded_at, run_id, m.test_id, metric, value, unit, fingerprint, version, git_commit)
        for m in measurements
        for metric, value, unit in measurement_metrics(m)
    ]
    return sorted(rows, key=lambda r: (r.test_id, r.metric))


def append_history(
    directory: str | Path,
    measurements: Iterable[Measurement],
    environment: Environment,
    run_id: str | None = None,
    *,
    recorded_at: datetime | None = None,
    git_commit: str | None = None,
    kind: str = REFRESH,
) -> Path:
    """Append one run's rows to ``directory/history.csv`` (created with its header if missing).

    The whole file is rewritten atomically under the directory lock, so
    concurrent runs each add their rows and a crash never leaves half a row.
    ``git_commit=None`` asks git (best effort); ``run_id=None`` makes a unique one that says
    the run's ``kind`` (``refresh`` or ``record``): the gate learns its spread from recorded runs.
    """
    directory = Path(directory)
    timestamp = utc_timestamp(recorded_at)
    if run_id is None:
        run_id = f"{timestamp}-{kind}-{uuid.uuid4().hex[:8]}"
    if not run_id or "\n" in run_id:
        raise ValueError(f"run_id must be a non-empty single line, got {run_id!r}")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot create {directory} for the run history: {exc.strerror or exc}; make it "
                           f"writable, or choose another baseline directory.", directory) from None
    commit = current_git_commit(directory) if git_commit is None else git_commit
    rows = history_rows(measurements, environment, run_id, recorded_at=timestamp,
                        git_commit=commit, version=package_version())
    path = directory / HISTORY_FILE_NAME
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(r.as_tuple() for r in rows)
    lock = DirectoryLock(directory)
    try:
        lock.acquire()
        try:
            existing = path.read_text(encoding="utf-8") if path.exists() else ""
            if existing:
                _check_header(existing.split("\n", 1)[0], path)
                if not existing.endswith("\n"):
                    existing += "\n"
            else:
                existing = _HEADER + "\n"
            atomic_write_text(path, existing + buffer.getvalue())
        finally:
            lock.release()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise StorageError(f"cannot append to the run history {path}: {reason}; make it readable and writable, "
                           f"or move it away to start a new history.", path) from None
    return path


def _check_header(line: str, path: Path) -> None:
    if line.strip().lstrip("\ufeff") != _HEADER:
        raise StorageError(f"{path}: line 1 is {line[:80]!r}, not the run history header {_HEADER!r}; this is "
                           f"not a pytest-tfperf history (or a newer format): move it away to start a new one.",
                           path)


def read_history_rows(path: Path) -> list[HistoryRow]:
    """Every row of a history file, validated; repeated header lines (left by union merges) are skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise StorageError(f"{path}: not UTF-8 text ({exc.reason}): the file is corrupted; restore it from git "
                           f"or move it away to start a new history.", path) from None
    except OSError as exc:
        raise StorageError(f"{path}: cannot be read ({exc.strerror or exc}).", path) from None
    if not text.strip():
        return []
    _check_header(text.split("\n", 1)[0], path)
    rows: list[HistoryRow] = []
    reader = csv.reader(io.StringIO(text))
    for record in reader:
        line = reader.line_num
        if not record or tuple(record) == COLUMNS:
            continue
        if len(record) != len(COLUMNS):
            raise StorageError(f"{path}: line {line} has {len(record)} fields, expected {len(COLUMNS)} "
                               f"({_HEADER}); fix or delete that line (a conflicted merge?).", path)
        try:
            value = float(record[4])
        except ValueError:
            raise StorageError(f"{path}: line {line}: value {record[4]!r} is not a number; fix or delete "
                               f"that line.", path) from None
        if not record[0] or not record[2] or not record[3]:
            raise StorageError(f"{path}: line {line}: recorded_at, test_id and metric must not be empty; fix "
                               f"or delete that line.", path)
        rows.append(HistoryRow(record[0], record[1], record[2], record[3], value, *record[5:]))
    return rows


def recorded_runs(rows: Iterable[HistoryRow]) -> dict[tuple[str, str], list[RunSummary]]:
    """The recorded runs (``--tfperf-record``) per (test id, fingerprint), oldest first.

    Rows are grouped by run id; a run without a throughput figure is left out.
    Duplicated rows (left by union merges) collapse into one run.
    """
    grouped: dict[tuple[str, str, str], dict[str, object]] = {}
    for row in rows:
        if row.kind != RECORD:
            continue
        run = grouped.setdefault((row.test_id, row.fingerprint, row.run_id),
                                 {"recorded_at": row.recorded_at, "commit": row.git_commit, "memory": {}})
        if row.metric == "throughput_per_s":
            run["throughput"] = row.value
        elif row.metric == "traces_steady":
            run["traces"] = int(row.value)
        elif row.metric.startswith(ADDED_PREFIX):
            run["memory"][row.metric[len(ADDED_PREFIX):]] = int(row.value)  # type: ignore[index]
    out: dict[tuple[str, str], list[RunSummary]] = {}
    for (test_id, fingerprint, run_id), run in grouped.items():
        if "throughput" not in run:
            continue
        out.setdefault((test_id, fingerprint), []).append(RunSummary(
            run_id=run_id, recorded_at=str(run["recorded_at"]), kind=RECORD,
            throughput_per_s=float(run["throughput"]),  # type: ignore[arg-type]
            memory_added_bytes=tuple(sorted(run["memory"].items())),  # type: ignore[attr-defined]
            traces_steady=run.get("traces"), git_commit=str(run["commit"])))  # type: ignore[arg-type]
    for runs in out.values():
        runs.sort(key=lambda r: (r.recorded_at, r.run_id))
    return out


def load_history(directory: str | Path) -> pandas.DataFrame:
    """The history as a tidy table (columns ``COLUMNS``), oldest first; empty if there is none yet.

    ``recorded_at`` is a UTC timestamp column, ``value`` a float column;
    duplicate rows (a run recorded twice by a merge) appear once.
    """
    import pandas

    path = Path(directory) / HISTORY_FILE_NAME
    rows = read_history_rows(path) if path.exists() else []
    frame = pandas.DataFrame([r.as_tuple() for r in rows], columns=list(COLUMNS), dtype=object)
    frame["value"] = pandas.Series([r.value for r in rows], dtype="float64")
    try:
        frame["recorded_at"] = pandas.to_datetime(frame["recorded_at"], utc=True, format="ISO8601")
    except (ValueError, TypeError) as exc:
        raise StorageError(f"{path}: a recorded_at is not an ISO 8601 time ({exc}); fix or delete that line.",
                           path) from None
    frame = frame.drop_duplicates(ignore_index=True)
    return frame.sort_values(["recorded_at", "run_id", "test_id", "metric"], kind="mergesort", ignore_index=True)


def metric_trend(history: pandas.DataFrame, test_id: str, metric: str,
                 fingerprints: Sequence[str] | None = None) -> pandas.DataFrame:
    """One figure over time: index ``recorded_at``, one column per environment fingerprint.

    A run that recorded the figure twice (re-runs) keeps its last value.
    Raises ``ValueError`` listing what exists when there is nothing to plot.
    """
    rows = history[(history["test_id"] == test_id) & (history["metric"] == metric)]
    if fingerprints is not None:
        rows = rows[rows["fingerprint"].isin(list(fingerprints))]
    if rows.empty:
        known = sorted(set(history.loc[history["test_id"] == test_id, "metric"]))
        if not known:
            raise ValueError(f"no history for test {test_id!r}")
        raise ValueError(f"no history of {metric!r} for test {test_id!r}"
                         f"{' in the fingerprints asked for' if fingerprints is not None else ''}; "
                         f"recorded metrics: {', '.join(known)}")
    return rows.pivot_table(index="recorded_at", columns="fingerprint", values="value", aggfunc="last")

"""The extra processes of a baseline refresh: the same pytest command, run again, each in a fresh process.

``pytest --tfperf --tfperf-update`` measures every test in this session and
then runs the same command ``runs - 1`` more times, one process after the
other, each writing its results to a private JSON file (and nothing else: no
baselines, no history, no JUnit XML, no gate). The baseline stores every run,
so the gate knows how far this machine's figures move between processes
(``stored_rule``). Processes run one at a time, so the refresh takes
``runs`` times as long as one run, and its measurements never compete for
the cores.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_tfperf.config import RUN_CHILD_ENV
from pytest_tfperf.model import Measurement
from pytest_tfperf.session.git_tree import pytest_command

# Options whose files belong to the session that was started by the user; a refresh run writes none of them.
_VALUE_OPTIONS = ("--junitxml", "--junit-xml", "--tfperf-json", "--tfperf-markdown", "--tfperf-html", "--html",
                  "--json-report-file", "--report-log", "--resultlog", "--tfperf-runs")
_FLAG_OPTIONS = ("--tfperf-update", "--tfperf-update-improved", "--tfperf-record", "--tfperf-strict",
                 # the cache's selections: the extra runs are given the very tests the first one measured
                 "--lf", "--last-failed", "--ff", "--failed-first", "--nf", "--new-first", "--sw", "--stepwise",
                 "--sw-skip", "--stepwise-skip", "--cache-clear")
_SELECTION_OPTIONS = ("-k", "-m", "--deselect")
LOG_TAIL_LINES = 20


def child_arguments(args: Sequence[str], positional: Sequence[str] = (), node_ids: Sequence[str] = ()) -> list[str]:
    """``args`` without the options that write the user's files, refresh baselines or select tests.

    With ``node_ids``, the ``positional`` paths are replaced by those node ids: each extra process
    measures exactly the tests the first one did (whatever -k, -m or --lf chose there).
    """
    out: list[str] = []
    skip = False
    dropped = set(positional) if node_ids else set()
    selection = _SELECTION_OPTIONS if node_ids else ()
    for arg in args:
        if skip:
            skip = False
            continue
        name, equals, _ = arg.partition("=")
        if name in _FLAG_OPTIONS or arg in dropped:
            continue
        if name in _VALUE_OPTIONS or name in selection:
            skip = not equals
            continue
        if node_ids and len(arg) > 2 and arg[:2] in ("-k", "-m") and not arg.startswith("--"):
            continue  # -kEXPR, -mEXPR
        out.append(arg)
    return out + list(node_ids)


@dataclass(frozen=True, slots=True)
class RefreshRuns:
    """What the extra processes measured, per test id, and what went wrong in those that failed."""

    measurements: dict[str, list[Measurement]]
    processes: int
    failures: tuple[str, ...]
    seconds: float


def run_extra_processes(count: int, args: Sequence[str], cwd: Path, *, python: str = sys.executable,
                        timeout_s: float | None = None, positional: Sequence[str] = (),
                        node_ids: Sequence[str] = ()) -> RefreshRuns:
    """Run ``python -m pytest ARGS`` ``count`` times, one after the other, and collect their measurements.

    ``positional`` and ``node_ids``: see ``child_arguments``.
    """
    from pytest_tfperf.storage.results_json import load_results
    from pytest_tfperf.storage.fields import StorageError

    start = time.monotonic()
    found: dict[str, list[Measurement]] = {}
    failures: list[str] = []
    command_args = child_arguments(args, positional, node_ids)
    with tempfile.TemporaryDirectory(prefix="tfperf-refresh-") as scratch, _sigterm_stops_the_child():
        for index in range(count):
            results = Path(scratch) / f"run-{index + 2}.json"
            log = Path(scratch) / f"run-{index + 2}.log"
            env = dict(os.environ)
            env[RUN_CHILD_ENV] = str(results)
            env.pop("GITHUB_STEP_SUMMARY", None)  # the summary is the user's session's to write
            command = pytest_command(python, *command_args)
            try:
                with open(log, "wb") as out:
                    subprocess.run(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
            except (OSError, subprocess.TimeoutExpired) as exc:
                failures.append(f"run {index + 2}: {exc}")
                continue
            if not results.exists():
                failures.append(f"run {index + 2} wrote no results; its output ended with:\n    "
                                + "\n    ".join(_tail(log)))
                continue
            try:
                document = load_results(results)
            except StorageError as exc:
                failures.append(f"run {index + 2}: {exc}")
                continue
            for measurement in document.measurements + ((document.calibration,) if document.calibration else ()):
                if measurement.timings.iterations > 1:
                    found.setdefault(measurement.test_id, []).append(measurement)
    return RefreshRuns(found, count, tuple(failures), time.monotonic() - start)


@contextlib.contextmanager
def _sigterm_stops_the_child() -> Iterator[None]:
    """SIGTERM (a cancelled CI job, ``kill``) ends this process without unwinding, which would leave the
    running extra process to measure on alone; raised as SystemExit instead, it makes ``subprocess.run``
    kill the child on its way out. Ctrl-C needs nothing: it reaches the whole process group."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _tail(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    except OSError:
        return []

"""The extra processes of a baseline refresh: which options they drop, and what they bring back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pytest_tfperf.session.refresh import child_arguments, run_extra_processes


def test_the_users_output_files_and_refresh_options_are_dropped() -> None:
    args = ["--tfperf", "--tfperf-update", "--tfperf-runs=5", "--junitxml", "out.xml", "--tfperf-json=r.json",
            "-k", "fast", "--tfperf-markdown", "s.md", "--tfperf-record", "tests/", "-p", "myplugin",
            "--tfperf-budget=1", "--tfperf-update-improved", "--junit-xml=j.xml"]
    assert child_arguments(args) == ["--tfperf", "-k", "fast", "tests/", "-p", "myplugin", "--tfperf-budget=1"]


def test_given_node_ids_the_extra_processes_run_exactly_those_tests() -> None:
    args = ["--tfperf", "tests/", "-k", "fast", "--lf", "-mslow", "--tfperf-update", "-p", "myplugin", "tests/"]
    ids = ["/repo/tests/test_a.py::test_fast[x]", "/repo/tests/test_b.py::test_fast"]
    assert child_arguments(args, ["tests/"], ids) == ["--tfperf", "-p", "myplugin", *ids]


def test_a_process_that_writes_no_results_is_reported_with_its_output(tmp_path: Path) -> None:
    # A "python" that runs no pytest: each extra process fails before measuring anything.
    fake = tmp_path / "fake-python"
    fake.write_text(f"#!{sys.executable}\nprint('ImportError: no module named tensorflow')\n")
    fake.chmod(0o755)
    runs = run_extra_processes(2, ["--tfperf"], tmp_path, python=str(fake))
    assert runs.measurements == {} and runs.processes == 2 and len(runs.failures) == 2
    assert "run 2 wrote no results" in runs.failures[0] and "no module named tensorflow" in runs.failures[0]


def test_a_refresh_stopped_by_sigterm_stops_its_running_extra_process(tmp_path: Path) -> None:
    # A "python" that records its pid and would measure for a minute; the refresh is told to stop.
    fake = tmp_path / "fake-python"
    fake.write_text(f"#!{sys.executable}\nimport os, time\nopen({str(tmp_path / 'child.pid')!r}, 'w')"
                    ".write(str(os.getpid()))\ntime.sleep(60)\n")
    fake.chmod(0o755)
    driver = ("import sys; from pathlib import Path; from pytest_tfperf.session.refresh import run_extra_processes; "
              f"run_extra_processes(1, ['--tfperf'], Path({str(tmp_path)!r}), python={str(fake)!r})")
    refresh = subprocess.Popen([sys.executable, "-c", driver])
    pid_file = tmp_path / "child.pid"
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and refresh.poll() is None, "the extra process never started"
        time.sleep(0.05)
    child = int(pid_file.read_text())
    refresh.send_signal(signal.SIGTERM)
    assert refresh.wait(timeout=30) == 128 + signal.SIGTERM
    while _alive(child):
        assert time.monotonic() < deadline + 30, "the extra process outlived its refresh"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True

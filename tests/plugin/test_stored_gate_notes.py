"""What the stored gate cannot see, where reviewers look: the Markdown summary and the results JSON say which
slowdowns stored baselines catch here and which tests had no baseline for this environment; ``tfperf_strict``
in the ini fails those tests; an unreadable calibration baseline is named in one line and kept.

Pure-Python workloads (no TensorFlow), as in test_gate_and_outputs.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy  # noqa: F401  (loaded before the in-process runs: see test_gate_and_outputs.py)
import pandas  # noqa: F401
import pytest

from pytest_tfperf.model import Environment
from pytest_tfperf.storage.baseline_store import BaselineStore, baseline_file_name
from pytest_tfperf.storage.results_json import load_results
from pytest_tfperf.storage.runs import CALIBRATION_ID

WORKLOAD = """
def work():
    return sum(i * i for i in range(2000))

def test_fast(tfperf):
    tfperf(work, items=2000)

def test_other(tfperf):
    tfperf(lambda: sum(range(500)))
"""
FAST = ["--tfperf", "--tfperf-budget=0.3", "--tfperf-tolerance=90%"]
ELSEWHERE = Environment(hard=(("cpu.model", "some other CPU"),), soft=())


def refreshed(pytester: pytest.Pytester) -> Path:
    """Both tests refreshed in 3 processes; then test_other's baseline moved to another environment."""
    pytester.makepyfile(test_work=WORKLOAD)
    pytester.runpytest_inprocess(*FAST, "--tfperf-update", "--tfperf-runs=3").assert_outcomes(passed=2)
    directory = pytester.path / "benchmarks" / "baselines"
    store = BaselineStore(directory)
    path = store.path_for("test_work.py::test_other")
    (entry,) = json.loads(path.read_text())["entries"].values()
    measurement = store.load("test_work.py::test_other", _environment_of(entry)).measurement
    path.unlink()
    store.save([dataclasses.replace(measurement, environment_id=ELSEWHERE.fingerprint)], ELSEWHERE)
    return directory


def _environment_of(entry: dict) -> Environment:  # type: ignore[type-arg]
    from pytest_tfperf.storage.fields import Field
    from pytest_tfperf.storage.serialization import environment_from_dict

    return environment_from_dict(entry["environment"], Field("baseline", "environment"))


def test_markdown_and_json_say_what_the_stored_gate_catches_and_which_tests_it_could_not_judge(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    refreshed(pytester)
    step_summary = pytester.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    result = pytester.runpytest_inprocess(*FAST, "--tfperf-markdown=summary.md", "--tfperf-json=out.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*1 test(s) have baselines recorded only for other environments*not gated*"])
    text = (pytester.path / "summary.md").read_text()
    assert "stored baselines: what this run could and could not see:" in text
    caught = [line for line in text.splitlines() if line.startswith("- stored baselines: against their runs, ")]
    assert len(caught) == 1 and "are caught on this machine" in caught[0], text
    assert "- test_work.py::test_other: no baseline for this environment (fingerprint " in text
    assert "recorded only for other environments: they were measured, not gated (--tfperf-strict" in text
    assert step_summary.read_text() == text
    notes = load_results(pytester.path / "out.json").stored_gate
    assert notes is not None and notes.no_baseline_for_environment == ("test_work.py::test_other",)
    assert [line for line in notes.lines if line.startswith("stored baselines: against their runs")] == \
        [caught[0][2:]]

    # The ini key does what --tfperf-strict does.
    pytester.makeini("[pytest]\ntfperf_strict = true\n")
    strict = pytester.runpytest_inprocess(*FAST)
    strict.assert_outcomes(passed=1, failed=1)
    strict.stdout.fnmatch_lines(["*baseline required by --tfperf-strict*"])
    pytester.makeini("[pytest]\ntfperf_strict = perhaps\n")
    bad = pytester.runpytest_inprocess(*FAST)
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*ini option tfperf_strict: invalid truth value 'perhaps'; expected true or false*"])
    assert "Traceback" not in bad.stderr.str()


def test_an_unreadable_calibration_baseline_is_named_in_one_line_and_kept(pytester: pytest.Pytester) -> None:
    directory = refreshed(pytester)
    calibration = directory / baseline_file_name(CALIBRATION_ID)
    truncated = '{"entries": {"abc": {"environment": '
    calibration.write_text(truncated)
    result = pytester.runpytest_inprocess(*FAST, "--tfperf-markdown=summary.md")
    result.assert_outcomes(passed=2)  # a floor that could not be read fails nothing: it is said
    lines = [line for line in result.stdout.lines if "the calibration baseline cannot be read" in line]
    assert len(lines) == 1, result.stdout.str()
    assert lines[0].startswith(f"{calibration}: ") and "The file was kept as it is" in lines[0]
    assert calibration.name in (pytester.path / "summary.md").read_text()
    assert calibration.read_text() == truncated and os.path.exists(calibration)

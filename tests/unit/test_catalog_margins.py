"""benchmarks/catalog_margins.py: the main job's outcomes and the effects' distributions, from recorded runs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "catalog_margins.py"


@pytest.fixture(scope="module")
def margins():  # noqa: ANN201 - the script module
    spec = importlib.util.spec_from_file_location("catalog_margins", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="benchmarks.test_catalog" name="test_fix_beats_anti_pattern[allocation_in_loop]"/>
<testcase classname="benchmarks.test_catalog" name="test_fix_beats_anti_pattern[thread_starvation]">
  <failure message="thread_starvation: 'fix' does NOT beat 'anti'">details</failure></testcase>
<testcase classname="benchmarks.test_catalog" name="test_fix_beats_anti_pattern[gpu_memory_config]">
  <skipped message="needs a GPU"/></testcase>
</testsuite></testsuites>"""


def test_junit_outcomes_split_failures_skips_and_passes(margins, tmp_path: Path) -> None:  # noqa: ANN001
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT, encoding="utf-8")
    out = margins._junit_outcomes(path)
    assert [f["test"] for f in out["failed"]] == [
        "benchmarks.test_catalog::test_fix_beats_anti_pattern[thread_starvation]"]
    assert out["failed"][0]["message"].startswith("thread_starvation: 'fix' does NOT beat")
    assert [s["message"] for s in out["skipped"]] == ["needs a GPU"]
    assert len(out["passed"]) == 1
    assert margins._junit_outcomes(tmp_path / "absent.xml") == {"failed": [], "skipped": [], "passed": []}


def _effect(scenario: str, value: float, *, passed: bool = True, machine_busy: str | None = None,
            min_effect: float = 5.0) -> dict[str, object]:
    return {"scenario": scenario, "anti": "anti", "fix": "fix", "metric": "throughput", "value": value,
            "spread": None, "min_effect": min_effect, "gated": True, "passed": passed,
            "other_processes_cores": 0.2, "not_judged": "busy machine" if (machine_busy and not passed) else "",
            "test": f"t[{scenario}]", "detail": "", "machine_busy": machine_busy,
            "machine_core_use": {"fix": {"calls": 10, "wall_s": 1.0, "cores": 1.9, "idle_cores": 0.0}}
            if machine_busy is not None else None}


def _run(index: int, effects: list[dict[str, object]], failed: list[dict[str, str]] | None = None) -> dict:
    return {"label": "batch", "index": index, "start_utc": f"2026-11-26T14:{index:02d}:00+00:00", "wall_s": 200.0,
            "commit": "abc1234567", "rc": 1 if failed else 0, "red": bool(failed), "loadavg_before": [1.0, 1.0, 1.0],
            "passed": 10, "failed": failed or [], "skipped": [], "effects": effects}


def test_summary_counts_red_runs_and_rules_only_the_runs_that_would_have_been_judged(
        margins, tmp_path: Path) -> None:  # noqa: ANN001
    runs = [
        _run(0, [_effect("host_to_device", 14.0), _effect("thread_starvation", 1.8, machine_busy="")]),
        _run(1, [_effect("host_to_device", 15.0), _effect("thread_starvation", 1.9, machine_busy="")]),
        _run(2, [_effect("host_to_device", 13.0),
                 # the machine could not give the fix its cores: a miss here would not have failed
                 _effect("thread_starvation", 0.9, passed=False, machine_busy="the fix got 0.4 cores")]),
        _run(3, [_effect("host_to_device", 14.5), _effect("thread_starvation", 1.85, machine_busy="")],
             failed=[{"test": "benchmarks/test_real_models.py::test_x", "message": "AssertionError: boom\nmore"}]),
    ]
    runs_file = tmp_path / "runs.jsonl"
    runs_file.write_text("".join(json.dumps(r) + "\n" for r in runs), encoding="utf-8")
    margins.main(["summarise", "--runs-file", str(runs_file), "--out-dir", str(tmp_path)])
    doc = json.loads((tmp_path / "catalog_margins.json").read_text(encoding="utf-8"))
    batch = doc["batches"][0]
    assert (batch["runs"], batch["red"]) == (4, 1)
    assert batch["red_runs"][0]["failed"] == [{"test": "benchmarks/test_real_models.py::test_x",
                                               "why": "AssertionError: boom"}]
    rows = {e["scenario"]: e for e in batch["effects"]}
    assert rows["host_to_device"]["judgeable"] == 4 and rows["host_to_device"]["rule"]["runs"] == 4
    assert rows["host_to_device"]["min"] == 13.0 and rows["host_to_device"]["median"] == pytest.approx(14.25)
    starved = rows["thread_starvation"]
    assert (starved["judgeable"], starved["not_judged"], starved["missed_margin_judged"]) == (3, 1, 0)
    assert starved["rule"]["runs"] == 3 and starved["judged_min"] == 1.8
    assert starved["rule"]["stated_effect"] == 1.3
    text = (tmp_path / "catalog_margins.md").read_text(encoding="utf-8")
    assert "**Red runs: 1 of 4.**" in text and "`benchmarks/test_real_models.py::test_x`: AssertionError: boom" in text


def test_too_few_judgeable_runs_leave_the_floor(margins, tmp_path: Path) -> None:  # noqa: ANN001
    runs = [_run(i, [_effect("input_pipeline", 1.5, machine_busy="the fix got 0.8 cores")]) for i in range(3)]
    runs_file = tmp_path / "runs.jsonl"
    runs_file.write_text("".join(json.dumps(r) + "\n" for r in runs), encoding="utf-8")
    margins.main(["summarise", "--runs-file", str(runs_file), "--out-dir", str(tmp_path)])
    row = json.loads((tmp_path / "catalog_margins.json").read_text(encoding="utf-8"))["batches"][0]["effects"][0]
    assert row["judgeable"] == 0
    assert row["rule"]["margin"] == 1.1 and "only 0 runs" in row["rule"]["reason"]

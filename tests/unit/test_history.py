"""Run history: tidy CSV rows, loading into pandas, trends, merge leftovers, concurrent appends."""

from __future__ import annotations

import multiprocessing
import random
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest

from pytest_tfperf.storage import history_csv
from pytest_tfperf.storage.history_csv import (
    COLUMNS,
    HISTORY_FILE_NAME,
    append_history,
    current_git_commit,
    load_history,
    metric_trend,
)
from pytest_tfperf.model import Environment, Measurement, MemoryPeak, MemorySource, Timings
from pytest_tfperf.storage.fields import StorageError

CPU = Environment(hard=(("cpu_model", "Xeon"),), soft=(("hostname", "ci"),))
GPU = Environment(hard=(("cpu_model", "EPYC"), ("accelerator", "H100")))
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def at(day: int) -> datetime:
    return datetime(2025, 11, day, 10, 0, 0, tzinfo=timezone.utc)


def measurement(test_id: str = "tests/t.py::test_a[x, y]", median_ns: int = 1_000_000, seed: int = 0) -> Measurement:
    rng = random.Random(seed)
    samples = tuple(median_ns + rng.randint(-500, 500) for _ in range(20))
    return Measurement(
        test_id=test_id, mode="call", timings=Timings(samples, (10, 10), 8.0, 3_000_000),
        memory=(MemoryPeak(MemorySource.TF_ALLOCATOR, "CPU:0", 2**20, 0, (2**20, 2**20)),
                MemoryPeak(MemorySource.NVML, "GPU:0", None, unavailable="no driver")),
        traces_first_call=1, traces_steady=0, extra_metrics=(("input_bound_fraction", 0.25),),
    )


def test_append_writes_a_tidy_csv_with_one_row_per_metric(tmp_path: Path) -> None:
    m = measurement()
    path = append_history(tmp_path / "baselines", [m], CPU, "run-1", recorded_at=at(1), git_commit=COMMIT)
    assert path == tmp_path / "baselines" / HISTORY_FILE_NAME
    lines = path.read_text().splitlines()
    assert lines[0] == ",".join(COLUMNS)
    assert '"tests/t.py::test_a[x, y]"' in lines[1]  # a comma in the id is quoted, not a new column
    frame = load_history(tmp_path / "baselines")
    assert list(frame.columns) == list(COLUMNS)
    assert str(frame["value"].dtype) == "float64" and str(frame["recorded_at"].dt.tz) == "UTC"
    rows = {r.metric: (r.value, r.unit) for r in frame.itertuples()}
    assert rows["throughput_per_s"] == (pytest.approx(m.throughput_per_s), "items/s")
    assert rows["median_ns"] == (m.timings.median_ns, "ns")
    assert rows["first_call_ns"] == (3_000_000, "ns")
    assert rows["peak_tf_allocator[CPU:0]"] == (2**20, "bytes")
    assert rows["traces_steady"] == (0, "count")
    assert rows["input_bound_fraction"] == (0.25, "fraction")
    assert "peak_nvml[GPU:0]" not in rows  # an unavailable figure is not a zero
    assert set(frame["fingerprint"]) == {CPU.fingerprint} and set(frame["git_commit"]) == {COMMIT}
    assert set(frame["run_id"]) == {"run-1"} and frame["package_version"].iloc[0] != ""


def test_appending_adds_rows_and_never_rewrites_old_ones(tmp_path: Path) -> None:
    append_history(tmp_path, [measurement()], CPU, "run-1", recorded_at=at(1), git_commit="")
    first = (tmp_path / HISTORY_FILE_NAME).read_text()
    append_history(tmp_path, [measurement(median_ns=2_000_000)], CPU, "run-2", recorded_at=at(2), git_commit="")
    second = (tmp_path / HISTORY_FILE_NAME).read_text()
    assert second.startswith(first) and second.count("run-2") == first.count("run-1")


def test_a_run_id_is_made_when_none_is_given(tmp_path: Path) -> None:
    append_history(tmp_path, [measurement()], CPU, recorded_at=at(1), git_commit="")
    append_history(tmp_path, [measurement()], CPU, recorded_at=at(1), git_commit="")
    run_ids = set(load_history(tmp_path)["run_id"])
    assert len(run_ids) == 2 and all(r.startswith("2025-11-01T10:00:00Z-") for r in run_ids)


def test_trend_pivots_one_metric_by_time_and_environment(tmp_path: Path) -> None:
    for day, median in ((1, 1_000_000), (2, 1_100_000), (3, 1_250_000)):
        append_history(tmp_path, [measurement(median_ns=median), measurement("t::other")], CPU, f"cpu-{day}",
                       recorded_at=at(day), git_commit="")
    append_history(tmp_path, [measurement(median_ns=100_000)], GPU, "gpu-2", recorded_at=at(2), git_commit="")
    frame = load_history(tmp_path)
    trend = metric_trend(frame, "tests/t.py::test_a[x, y]", "median_ns")
    assert list(trend.columns) == sorted([CPU.fingerprint, GPU.fingerprint])
    assert list(trend.index.day) == [1, 2, 3]
    assert list(trend[CPU.fingerprint].round(-3)) == [1_000_000, 1_100_000, 1_250_000]
    assert trend[GPU.fingerprint].dropna().tolist() == [pytest.approx(100_000, abs=500)]
    only_cpu = metric_trend(frame, "tests/t.py::test_a[x, y]", "median_ns", fingerprints=[CPU.fingerprint])
    assert list(only_cpu.columns) == [CPU.fingerprint]
    with pytest.raises(ValueError, match=r"no history of 'nope' .* recorded metrics: added_peak_tf_allocator\[CPU:0\], cv, first_call_ns"):
        metric_trend(frame, "t::other", "nope")
    with pytest.raises(ValueError, match="no history for test 't::missing'"):
        metric_trend(frame, "t::missing", "median_ns")


def test_loading_copes_with_what_a_union_merge_leaves(tmp_path: Path) -> None:
    append_history(tmp_path, [measurement()], CPU, "run-late", recorded_at=at(5), git_commit="")
    path = tmp_path / HISTORY_FILE_NAME
    late = path.read_text().splitlines()
    other = tmp_path / "other"
    append_history(other, [measurement()], GPU, "run-early", recorded_at=at(2), git_commit="")
    early = (other / HISTORY_FILE_NAME).read_text().splitlines()
    # Both branches' rows, out of order, a repeated header and a duplicated row.
    path.write_text("\n".join(late + early + late[1:3]) + "\n")
    frame = load_history(tmp_path)
    assert len(frame) == len(late) - 1 + len(early) - 1
    assert list(frame["run_id"].drop_duplicates()) == ["run-early", "run-late"]


def test_missing_history_loads_as_an_empty_table(tmp_path: Path) -> None:
    frame = load_history(tmp_path / "nothing-here")
    assert frame.empty and list(frame.columns) == list(COLUMNS)


def test_a_file_with_another_header_is_neither_appended_to_nor_loaded(tmp_path: Path) -> None:
    path = tmp_path / HISTORY_FILE_NAME
    path.write_text("date,bench,seconds\n2025-01-01,a,1.0\n")
    with pytest.raises(StorageError, match="not the run history header"):
        append_history(tmp_path, [measurement()], CPU, "r", git_commit="")
    assert path.read_text() == "date,bench,seconds\n2025-01-01,a,1.0\n"
    with pytest.raises(StorageError, match=f"{HISTORY_FILE_NAME}: line 1"):
        load_history(tmp_path)


@pytest.mark.parametrize(
    ("bad_line", "expected"),
    [
        ("2025-11-01T10:00:00Z,r,t,m,fast,ns,fp,0.1,", "line 3: value 'fast' is not a number"),
        ("2025-11-01T10:00:00Z,r,t,m,1.0", "line 3 has 5 fields, expected 9"),
        (",r,t,m,1.0,ns,fp,0.1,", "line 3: recorded_at, test_id and metric must not be empty"),
        ("yesterday,r,t,m,1.0,ns,fp,0.1,", "recorded_at is not an ISO 8601 time"),
    ],
)
def test_a_bad_row_is_reported_with_its_line(tmp_path: Path, bad_line: str, expected: str) -> None:
    append_history(tmp_path, [measurement("t::only-one")], CPU, "r", recorded_at=at(1), git_commit="")
    path = tmp_path / HISTORY_FILE_NAME
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:2] + [bad_line] + lines[2:]) + "\n")
    with pytest.raises(StorageError, match="fix or delete that line") as info:
        load_history(tmp_path)
    assert expected in str(info.value) and str(path) in str(info.value)


def test_a_missing_final_newline_does_not_glue_rows_together(tmp_path: Path) -> None:
    append_history(tmp_path, [measurement()], CPU, "r1", recorded_at=at(1), git_commit="")
    path = tmp_path / HISTORY_FILE_NAME
    path.write_text(path.read_text().rstrip("\n"))  # e.g. edited by hand
    append_history(tmp_path, [measurement()], CPU, "r2", recorded_at=at(2), git_commit="")
    assert set(load_history(tmp_path)["run_id"]) == {"r1", "r2"}


def test_git_commit_is_found_in_a_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                              capture_output=True, text=True).stdout.strip()

    try:
        git("init", "-q")
        git("commit", "-q", "--allow-empty", "-m", "x")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("git is not usable here")
    (repo / "benchmarks").mkdir()
    assert current_git_commit(repo / "benchmarks") == git("rev-parse", "HEAD")
    append_history(repo / "benchmarks", [measurement()], CPU, "r")
    assert set(load_history(repo / "benchmarks")["git_commit"]) == {git("rev-parse", "HEAD")}


def test_git_commit_is_best_effort(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("GITHUB_SHA", "CI_COMMIT_SHA", "BUILD_VCS_NUMBER", "GIT_COMMIT"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    assert current_git_commit(tmp_path) == ""  # not a repository
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert current_git_commit(tmp_path) == ""  # no git at all
    monkeypatch.setenv("GITHUB_SHA", COMMIT.upper())
    assert current_git_commit(tmp_path) == COMMIT  # CI says which commit it is
    assert current_git_commit(tmp_path / "does-not-exist") == COMMIT


def _append_many(directory: str, tag: str, count: int) -> None:
    for i in range(count):
        append_history(directory, [measurement(f"t::{tag}")], CPU, f"{tag}-{i}", git_commit="")


def test_concurrent_appends_keep_every_row(tmp_path: Path) -> None:
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with ctx.Pool(2) as pool:
        jobs = [pool.apply_async(_append_many, (str(tmp_path), tag, 15)) for tag in ("p1", "p2")]
        for job in jobs:
            job.get(timeout=120)
    frame = load_history(tmp_path)
    per_run = len(history_csv.measurement_metrics(measurement()))
    assert len(frame) == 2 * 15 * per_run
    assert frame.groupby("run_id").size().eq(per_run).all() and frame["run_id"].nunique() == 30


def test_recorded_runs_are_grouped_by_run_and_kept_apart_from_refreshes(tmp_path: Path) -> None:
    from pytest_tfperf.storage.history_csv import read_history_rows, recorded_runs

    append_history(tmp_path, [measurement("t::a", median_ns=1_000_000)], CPU, recorded_at=at(1), git_commit="")
    for day, ns in ((3, 1_100_000), (2, 900_000)):  # out of order: union merges leave rows so
        append_history(tmp_path, [measurement("t::a", median_ns=ns)], CPU, recorded_at=at(day), git_commit=COMMIT,
                       kind="record")
    rows = read_history_rows(tmp_path / HISTORY_FILE_NAME)
    assert {r.kind for r in rows} == {"refresh", "record"}
    (runs,) = recorded_runs(rows + rows).values()  # duplicated rows (a merge) are one run
    assert [r.recorded_at[:10] for r in runs] == ["2025-11-02", "2025-11-03"]
    assert [r.throughput_per_s for r in runs] == [pytest.approx(8e9 / ns, rel=1e-2) for ns in (900_000, 1_100_000)]
    assert runs[0].memory("peak_tf_allocator[CPU:0]") == 2**20 and runs[0].git_commit == COMMIT


def _record_many(directory: str, tag: str, count: int) -> None:
    for _ in range(count):
        append_history(directory, [measurement("t::shared"), measurement(f"t::{tag}")], CPU, git_commit="",
                       kind="record")


def test_concurrent_record_runs_lose_nothing(tmp_path: Path) -> None:
    from pytest_tfperf.storage.history_csv import read_history_rows, recorded_runs

    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with ctx.Pool(2) as pool:
        jobs = [pool.apply_async(_record_many, (str(tmp_path), tag, 10)) for tag in ("p1", "p2")]
        for job in jobs:
            job.get(timeout=120)
    runs = recorded_runs(read_history_rows(tmp_path / HISTORY_FILE_NAME))
    fp = CPU.fingerprint
    assert len(runs[("t::shared", fp)]) == 20 and len(runs[("t::p1", fp)]) == 10 and len(runs[("t::p2", fp)]) == 10

"""Baseline files: naming, matching environments, merging, bad files, concurrent writers, golden files."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import multiprocessing.connection
import os
import random
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

from pytest_tfperf.storage import atomic_files
from pytest_tfperf.storage.baseline_store import (
    stable_test_key,
    SCHEMA_VERSION,
    BaselineStore,
    MatchStatus,
    baseline_file_name,
)
from pytest_tfperf.model import Environment, Measurement, MemoryPeak, MemorySource, Timings
from pytest_tfperf.storage.fields import StorageError
from pytest_tfperf.storage.serialization import subsample_timings

GOLDEN = Path(__file__).parent.parent / "data" / "baselines" / "v1"
GOLDEN_TEST_ID = "tests/perf/test_train.py::test_train_step[batch=64]"
WHEN = datetime(2025, 11, 22, 8, 0, 0, tzinfo=timezone.utc)

CPU = Environment(hard=(("cpu_model", "Xeon 8375C"), ("tensorflow", "2.21.0"), ("accelerator", "none")),
                  soft=(("hostname", "ci-7"), ("kernel", "6.1")))
GPU = Environment(hard=(("cpu_model", "EPYC 9654"), ("tensorflow", "2.21.0"), ("accelerator", "H100")),
                  soft=(("hostname", "gpu-box"),))


def measurement(test_id: str = "tests/test_a.py::test_step", *, median_ns: int = 1_000_000, rounds: int = 3,
                per_round: int = 10, seed: int = 0) -> Measurement:
    rng = random.Random(seed)
    samples = tuple(median_ns + rng.randint(-1000, 1000) for _ in range(rounds * per_round))
    return Measurement(
        test_id=test_id, mode="call",
        timings=Timings(samples, (per_round,) * rounds, 32.0, 7_000_000),
        memory=(MemoryPeak(MemorySource.TF_ALLOCATOR, "CPU:0", 2**22, 2**20, (2**22,) * rounds),),
        traces_first_call=1, traces_steady=0,
    )


def env_variant(base: Environment, **hard: str) -> Environment:
    return Environment(hard=tuple({**base.hard_dict(), **hard}.items()), soft=base.soft)


# --------------------------------------------------------------------------- file names

HOSTILE_IDS = [
    "tests/test_a.py::test_b",
    "tests/test_a.py::TestX::test_b[param-1]",
    "../../etc/passwd",
    "..",
    ".hidden",
    "a/../../b",
    "tests\\win\\path.py::t",
    "test with spaces[a b]",
    "test_ünïcödé[𝔘∑]",
    "CON",
    "aux.py::nul",
    "x" * 500,
    "[]::/",
    "test_x[\x00\n\t]",
]


@pytest.mark.parametrize("test_id", HOSTILE_IDS)
def test_file_names_are_safe_and_stay_in_the_directory(tmp_path: Path, test_id: str) -> None:
    name = baseline_file_name(test_id)
    assert name.endswith(".json") and len(name) <= 110
    assert all(c.isascii() and (c.isalnum() or c in "._-") for c in name)
    assert not name.startswith(".") and ".." not in name
    assert name.split(".")[0].upper() not in {"CON", "AUX", "NUL", "PRN"}
    assert (tmp_path / name).resolve().parent == tmp_path.resolve()


def test_file_names_are_unique_and_readable() -> None:
    ids = HOSTILE_IDS + ["test_x[a/b]", "test_x[a_b]", "test_x[a b]", "Test_X", "test_x", "test_x[A]", "test_x[a]"]
    names = [baseline_file_name(i) for i in ids]
    assert len(set(names)) == len(ids)
    # Distinct even on case-insensitive file systems.
    assert len({n.lower() for n in names}) == len(ids)
    assert baseline_file_name("tests/test_a.py::test_b[bs=64]").startswith("tests_test_a.py_test_b_bs_64-")


def test_an_empty_test_id_is_refused() -> None:
    with pytest.raises(ValueError, match="non-empty test id"):
        baseline_file_name("")


# --------------------------------------------------------------------------- save and load


def test_saved_baseline_is_found_for_the_same_environment(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path / "baselines")
    m = measurement()
    report = store.save([m], CPU, recorded_at=WHEN)
    assert report.written == ((m.test_id, CPU.fingerprint),)
    assert report.files == (store.path_for(m.test_id),)
    match = store.load(m.test_id, CPU)
    assert match.status is MatchStatus.FOUND and match.found
    assert match.measurement == dataclasses.replace(m, environment_id=CPU.fingerprint)
    assert match.baseline is not None and match.baseline.recorded_at == "2025-11-22T08:00:00Z"
    assert match.soft_differences == () and match.others == ()
    assert "2025-11-22T08:00:00Z" in match.describe()


def test_file_is_plain_sorted_json_with_the_full_test_id(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    m = measurement("tests/x.py::test_ü[a/b c]")
    store.save([m], CPU, recorded_at=WHEN)
    text = store.path_for(m.test_id).read_text(encoding="utf-8")
    data = json.loads(text)
    # without a profile the file stays version 2, readable by versions from before profiles were stored
    assert data["schema"] == "pytest-tfperf/baseline" and data["schema_version"] == 2 < SCHEMA_VERSION
    assert data["test_id"] == m.test_id
    assert text.startswith('{\n  "entries": {\n    "' + CPU.fingerprint + '": {\n      "environment": {\n')
    assert list(data) == sorted(data)
    assert '"test_id": "tests/x.py::test_ü[a/b c]"' in text


def test_missing_baseline_says_how_to_record_one(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path / "never-created")
    match = store.load("tests/test_a.py::test_new", CPU)
    assert match.status is MatchStatus.NO_BASELINE and match.measurement is None
    assert "no baseline for this test" in match.describe()
    assert "pytest --tfperf --tfperf-update" in match.describe()
    assert not (tmp_path / "never-created").exists()  # loading creates nothing


def test_baselines_of_other_environments_are_listed_with_the_hard_keys_that_differ(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    m = measurement()
    store.save([m], CPU, recorded_at=WHEN)
    here = env_variant(CPU, tensorflow="2.20.0")
    match = store.load(m.test_id, here)
    assert match.status is MatchStatus.OTHER_ENVIRONMENTS and match.measurement is None
    (other,) = match.others
    assert other.baseline.fingerprint == CPU.fingerprint
    assert [(d.key, d.stored, d.current) for d in other.hard_differences] == [("tensorflow", "2.21.0", "2.20.0")]
    text = match.describe()
    assert "no baseline for this environment" in text
    assert "tensorflow ('2.21.0' there, '2.20.0' here)" in text


def test_soft_differences_are_shown_but_do_not_prevent_the_match(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    m = measurement()
    store.save([m], CPU, recorded_at=WHEN)
    moved = Environment(hard=CPU.hard, soft=(("hostname", "ci-9"), ("numpy", "2.1")))
    match = store.load(m.test_id, moved)
    assert match.found
    assert [(d.key, d.stored, d.current) for d in match.soft_differences] == [
        ("hostname", "ci-7", "ci-9"), ("kernel", "6.1", None), ("numpy", None, "2.1")]
    assert "hostname ('ci-7' there, 'ci-9' here)" in match.describe()


def test_environments_coexist_and_saving_one_keeps_the_other_byte_for_byte(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    store.save([measurement(seed=1)], CPU, recorded_at=WHEN)
    store.save([measurement(seed=2)], GPU, recorded_at=WHEN)
    path = store.path_for(measurement().test_id)
    gpu_entry = json.loads(path.read_text())["entries"][GPU.fingerprint]
    store.save([measurement(seed=3)], CPU, recorded_at=datetime(2025, 12, 1, tzinfo=timezone.utc))
    entries = json.loads(path.read_text())["entries"]
    assert set(entries) == {CPU.fingerprint, GPU.fingerprint}
    assert entries[GPU.fingerprint] == gpu_entry
    assert entries[CPU.fingerprint]["recorded_at"] == "2025-12-01T00:00:00Z"
    assert store.load(measurement().test_id, GPU).measurement.timings == measurement(seed=2).timings  # type: ignore[union-attr]


def test_saving_some_tests_leaves_other_tests_files_untouched(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    store.save([measurement("t::a"), measurement("t::b")], CPU, recorded_at=WHEN)
    b_path = store.path_for("t::b")
    before = (b_path.read_bytes(), b_path.stat().st_mtime_ns)
    store.save([measurement("t::a", seed=5)], CPU, recorded_at=WHEN)
    assert (b_path.read_bytes(), b_path.stat().st_mtime_ns) == before
    assert store.stored_test_ids() == ("t::a", "t::b")


def test_samples_are_bounded_by_whole_rounds(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path, max_samples=50)
    m = measurement(rounds=5, per_round=400)
    store.save([m], CPU, recorded_at=WHEN)
    stored = store.load(m.test_id, CPU).measurement
    assert stored is not None
    assert stored.timings == subsample_timings(m.timings, 50)
    assert len(stored.timings.round_sizes) == 5
    raw = json.loads(store.path_for(m.test_id).read_text())["entries"][CPU.fingerprint]["measurement"]
    assert raw["timings"]["iterations_measured"] == 2000 and raw["summary"]["iterations"] == 2000


def test_only_improved_replaces_a_baseline_only_when_the_new_one_is_better(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    store.save([measurement("t::a", median_ns=1_000_000), measurement("t::b", median_ns=1_000_000)], CPU,
               recorded_at=WHEN)
    slower, faster, fresh = (measurement("t::a", median_ns=1_200_000), measurement("t::b", median_ns=800_000),
                             measurement("t::c"))
    a_before = store.path_for("t::a").read_bytes()
    report = store.save([slower, faster, fresh], CPU, only_improved=True, recorded_at=WHEN)
    assert report.not_improved == (("t::a", CPU.fingerprint),)
    assert set(report.written) == {("t::b", CPU.fingerprint), ("t::c", CPU.fingerprint)}
    assert store.path_for("t::a").read_bytes() == a_before
    assert store.load("t::b", CPU).measurement.timings == faster.timings  # type: ignore[union-attr]
    # A custom rule (e.g. the compare verdict) decides instead of throughput.
    report = store.save([slower], CPU, only_improved=True, is_improvement=lambda new, old: True)
    assert report.written == (("t::a", CPU.fingerprint),)


def test_a_measurement_from_another_environment_is_refused(tmp_path: Path) -> None:
    m = dataclasses.replace(measurement(), environment_id=GPU.fingerprint)
    with pytest.raises(ValueError, match="measured in environment"):
        BaselineStore(tmp_path).save([m], CPU)


def test_saving_nothing_creates_nothing(tmp_path: Path) -> None:
    report = BaselineStore(tmp_path / "b").save([], CPU)
    assert report.written == () and not (tmp_path / "b").exists()


# --------------------------------------------------------------------------- bad files: clear errors, nothing lost


def _saved(tmp_path: Path) -> tuple[BaselineStore, Path]:
    store = BaselineStore(tmp_path)
    store.save([measurement("t::a"), measurement("t::b")], CPU, recorded_at=WHEN)
    return store, store.path_for("t::a")


def _refused_without_writing(store: BaselineStore, path: Path, *expected: str) -> None:
    bad_bytes = path.read_bytes()
    b_before = store.path_for("t::b").read_bytes()
    with pytest.raises(StorageError) as info:
        store.load("t::a", CPU)
    for text in (str(path), *expected):
        assert text in str(info.value)
    with pytest.raises(StorageError, match="nothing was written") as info:
        store.save([measurement("t::a", seed=9), measurement("t::b", seed=9)], CPU)
    assert str(path) in str(info.value)
    assert path.read_bytes() == bad_bytes  # the bad file is never overwritten
    assert store.path_for("t::b").read_bytes() == b_before  # nor the good one in the same save
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_a_truncated_file_is_refused_and_kept(tmp_path: Path) -> None:
    store, path = _saved(tmp_path)
    path.write_bytes(path.read_bytes()[:300])
    _refused_without_writing(store, path, "truncated or corrupted", "restore it from git", "--tfperf-update")


def test_a_corrupted_sample_is_refused_and_kept(tmp_path: Path) -> None:
    store, path = _saved(tmp_path)
    data = json.loads(path.read_text())
    data["entries"][CPU.fingerprint]["measurement"]["timings"]["rounds_ns"][0][0] = None
    path.write_text(json.dumps(data))
    _refused_without_writing(store, path, f"entries.{CPU.fingerprint}.measurement.timings.rounds_ns[0][0]")


def test_a_newer_schema_is_refused_with_an_upgrade_hint(tmp_path: Path) -> None:
    store, path = _saved(tmp_path)
    data = json.loads(path.read_text())
    data["schema_version"] = SCHEMA_VERSION + 1
    data["entries"] = {"future": {"format": "unknown"}}
    path.write_text(json.dumps(data))
    _refused_without_writing(store, path, "written by a newer pytest-tfperf", "Upgrade pytest-tfperf",
                             "regenerate the file with `pytest --tfperf --tfperf-update`")


def test_a_file_of_another_schema_is_refused(tmp_path: Path) -> None:
    store, path = _saved(tmp_path)
    data = json.loads(path.read_text())
    data["schema"] = "pytest-tfperf/results"
    path.write_text(json.dumps(data))
    _refused_without_writing(store, path, "not a pytest-tfperf/baseline file")


def test_a_file_holding_another_tests_baseline_is_refused(tmp_path: Path) -> None:
    store, path = _saved(tmp_path)
    shutil.copy(store.path_for("t::b"), path)  # e.g. copied by hand
    _refused_without_writing(store, path, "holds the baseline of 't::b', not of 't::a'",
                             baseline_file_name("t::b"))


def test_an_entry_filed_under_the_wrong_fingerprint_is_refused(tmp_path: Path) -> None:
    store, path = _saved(tmp_path)
    data = json.loads(path.read_text())
    data["entries"]["0123456789abcdef"] = data["entries"].pop(CPU.fingerprint)
    path.write_text(json.dumps(data))
    _refused_without_writing(store, path, "filed under fingerprint '0123456789abcdef'")


def test_a_directory_that_cannot_be_created_is_reported(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StorageError, match="cannot create the baseline directory .*file/baselines"):
        BaselineStore(blocker / "baselines").save([measurement()], CPU)


def test_a_failed_write_is_reported_and_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, path = _saved(tmp_path)
    before = path.read_bytes()

    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(StorageError, match="cannot write the baseline .*Permission denied.*writable"):
        store.save([measurement("t::a", seed=4)], CPU)
    assert path.read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


NOBODY = 65534  # the unprivileged user and group of Linux distributions


def _save_refused(directory: Path, conn: multiprocessing.connection.Connection) -> None:
    """In a forked child: save as a user who may read ``directory`` but not write it; send back the error."""
    try:
        if os.geteuid() == 0:
            # Root writes through any mode bits; the user the test is about is an ordinary one.
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        BaselineStore(directory).save([measurement("t::a", seed=4)], CPU)
        conn.send("saved")
    except StorageError as exc:
        conn.send(f"StorageError: {exc}")
    except BaseException as exc:  # noqa: BLE001 - anything else is the test's failure, said by the parent
        conn.send(f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()


@pytest.mark.skipif(not hasattr(os, "geteuid") or "fork" not in multiprocessing.get_all_start_methods(),
                    reason="needs POSIX users and fork")
def test_a_read_only_directory_is_reported(tmp_path: Path) -> None:
    # A directory of its own under /tmp, which every user can reach (pytest's tmp_path is its owner's
    # only): readable by all, writable by its owner alone, and the save runs as another user when the
    # suite runs as root (as CI does), as the owner with the write bit removed otherwise.
    import tempfile

    directory = Path(tempfile.mkdtemp(prefix="tfperf-read-only-"))
    try:
        store, path = _saved(directory)
        before = path.read_bytes()
        directory.chmod(0o555)
        parent, child = multiprocessing.get_context("fork").Pipe(duplex=False)
        process = multiprocessing.get_context("fork").Process(target=_save_refused, args=(directory, child))
        process.start()
        child.close()
        answer = parent.recv() if parent.poll(60) else "no answer"
        process.join(60)
        assert answer.startswith("StorageError: cannot write the baseline "), answer
        assert f"{path}: Permission denied (nothing was written); make {directory} writable" in answer
        assert path.read_bytes() == before
        assert not [p for p in directory.iterdir() if p.name.endswith(".tmp")]
    finally:
        directory.chmod(0o700)
        shutil.rmtree(directory)


# --------------------------------------------------------------------------- locking and concurrency


def _save_many(directory: str, test_ids: list[str], tag: str, count: int) -> None:
    store = BaselineStore(directory)
    for i in range(count):
        env = env_variant(CPU, runner=f"{tag}-{i}")
        store.save([measurement(t, seed=i) for t in test_ids], env)


def _read_many(directory: str, test_id: str, stop_after: int) -> int:
    store, reads = BaselineStore(directory), 0
    while reads < stop_after:
        store.load(test_id, CPU)  # raises if it ever sees half a file
        reads += 1
    return reads


def _context() -> multiprocessing.context.BaseContext:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


@pytest.mark.parametrize("same_test", [False, True], ids=["different-tests", "same-test"])
def test_concurrent_writers_keep_every_entry(tmp_path: Path, same_test: bool) -> None:
    directory = str(tmp_path)
    BaselineStore(directory).save([measurement("t::shared")], CPU)
    writer_ids = (["t::shared"], ["t::shared"]) if same_test else (["t::shared", "t::one"], ["t::shared", "t::two"])
    ctx = _context()
    with ctx.Pool(3) as pool:
        results = [pool.apply_async(_save_many, (directory, writer_ids[0], "p1", 12)),
                   pool.apply_async(_save_many, (directory, writer_ids[1], "p2", 12)),
                   pool.apply_async(_read_many, (directory, "t::shared", 150))]
        for r in results:
            r.get(timeout=120)
    store = BaselineStore(directory)
    shared = json.loads(store.path_for("t::shared").read_text())["entries"]
    assert len(shared) == 1 + 2 * 12  # nobody lost anybody's entry
    for i in range(12):
        for tag in ("p1", "p2"):
            assert store.load("t::shared", env_variant(CPU, runner=f"{tag}-{i}")).found
    if not same_test:
        assert store.stored_test_ids() == ("t::one", "t::shared", "t::two")
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_without_fcntl_saving_still_works(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(atomic_files, "fcntl", None)
    store = BaselineStore(tmp_path)
    store.save([measurement()], CPU)
    assert store.load(measurement().test_id, CPU).found


@pytest.mark.skipif(atomic_files.fcntl is None, reason="needs fcntl")
def test_a_lock_file_is_used_where_directories_cannot_be_locked(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    real_flock = atomic_files.fcntl.flock
    locked: list[str] = []

    def flock(fd: int, op: int) -> None:
        target = os.readlink(f"/proc/self/fd/{fd}") if os.path.exists("/proc/self/fd") else "?"
        if os.path.isdir(target):
            raise OSError(95, "Operation not supported")
        locked.append(target)
        real_flock(fd, op)

    monkeypatch.setattr(atomic_files.fcntl, "flock", flock)
    with atomic_files.DirectoryLock(tmp_path):
        pass
    if os.path.exists("/proc/self/fd"):
        assert locked == [str(tmp_path / atomic_files.FALLBACK_LOCK_NAME)]


def test_atomic_write_gives_new_files_the_usual_permissions(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    atomic_files.atomic_write_text(path, "{}\n")
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    path.chmod(0o640)
    atomic_files.atomic_write_text(path, "{}\n")
    assert path.stat().st_mode & 0o777 == 0o640


# --------------------------------------------------------------------------- golden files


def test_golden_v1_file_loads_for_both_environments(tmp_path: Path) -> None:
    (golden,) = GOLDEN.glob("*.json")
    assert golden.name == baseline_file_name(GOLDEN_TEST_ID)
    shutil.copy(golden, tmp_path / golden.name)
    store = BaselineStore(tmp_path)
    data = json.loads(golden.read_text())
    (cpu_fp,) = [fp for fp, e in data["entries"].items() if e["environment"]["hard"]["accelerator"] == "none"]
    (gpu_fp,) = set(data["entries"]) - {cpu_fp}
    envs = {fp: Environment(hard=tuple(e["environment"]["hard"].items()), soft=tuple(e["environment"]["soft"].items()))
            for fp, e in data["entries"].items()}
    cpu = store.load(GOLDEN_TEST_ID, envs[cpu_fp])
    assert cpu.found and cpu.measurement is not None
    assert cpu.measurement.timings.round_sizes == (4, 4, 4)
    assert cpu.measurement.timings.samples_ns[:2] == (1201000, 1187000)
    assert cpu.measurement.throughput_per_s == pytest.approx(53612.6, rel=1e-5)
    assert cpu.measurement.memory_peak(MemorySource.RSS_HWM).peak_bytes == 1503238553  # type: ignore[union-attr]
    assert cpu.measurement.extra("input_bound_fraction") == 0.04
    gpu = store.load(GOLDEN_TEST_ID, envs[gpu_fp])
    assert gpu.found and gpu.measurement is not None
    assert gpu.measurement.diagnoses[0].figures == (("input_wait_fraction", 0.12),)
    assert [o.baseline.fingerprint for o in gpu.others] == [cpu_fp]
    assert "accelerator ('none' there, 'NVIDIA H100 80GB HBM3 x1' here)" in gpu.others[0].describe()


def test_a_v1_entry_is_one_run_and_is_rewritten_as_v2(tmp_path: Path) -> None:
    # Version 1 held one measurement per entry: it reads as a baseline of one run (too few for the
    # throughput gate, which says so), and re-recording writes version 2 with that run summarised.
    (golden,) = GOLDEN.glob("*.json")
    data = json.loads(golden.read_text())
    store = BaselineStore(tmp_path)
    fp, entry = sorted(data["entries"].items())[0]
    env = Environment(hard=tuple(entry["environment"]["hard"].items()),
                      soft=tuple(entry["environment"]["soft"].items()))
    shutil.copy(golden, tmp_path / golden.name)
    found = store.load(GOLDEN_TEST_ID, env)
    assert found.baseline is not None and len(found.baseline.runs) == 1
    (run,) = found.baseline.runs
    assert run.kind == "refresh" and run.recorded_at == entry["recorded_at"]
    assert run.throughput_per_s == pytest.approx(found.measurement.throughput_per_s)  # type: ignore[union-attr]
    store.save([found.measurement], env, recorded_at=WHEN)  # type: ignore[list-item]
    rewritten = json.loads((tmp_path / golden.name).read_text())
    assert rewritten["schema_version"] == 2 and len(rewritten["entries"][fp]["runs"]) == 1
    other = next(k for k in data["entries"] if k != fp)
    assert rewritten["entries"][other] == data["entries"][other]  # the other environment, exactly as read


def test_extra_runs_are_stored_beside_the_measurement(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    main = measurement(median_ns=1_000_000)
    others = [measurement(median_ns=1_100_000, seed=1), measurement(median_ns=900_000, seed=2)]
    store.save([main], CPU, recorded_at=WHEN, extra_runs={main.test_id: others}, git_commit="abc")
    found = store.load(main.test_id, CPU)
    assert found.baseline is not None
    runs = found.baseline.runs
    assert [round(r.throughput_per_s) for r in runs] == [round(m.throughput_per_s) for m in [main, *others]]
    assert len({r.run_id for r in runs}) == 3 and {r.git_commit for r in runs} == {"abc"}
    assert runs[0].memory("peak_tf_allocator[CPU:0]") == 2**22 - 2**20
    assert found.measurement == dataclasses.replace(main, environment_id=CPU.fingerprint)


def test_a_run_with_a_bad_field_is_refused_and_kept(tmp_path: Path) -> None:
    store, path = _saved(tmp_path)
    data = json.loads(path.read_text())
    (entry,) = data["entries"].values()
    entry["runs"][0]["kind"] = "guess"
    path.write_text(json.dumps(data))
    _refused_without_writing(store, path, "runs[0].kind", "expected 'refresh' or 'record'")


@pytest.mark.parametrize(("node_id", "key"), [
    ("v/lib/python3.11/site-packages/pytest_tfperf/catalog/test_catalog.py::test_x[a]",
     "pytest_tfperf/catalog/test_catalog.py::test_x[a]"),
    ("../../venv/lib/python3.12/dist-packages/pkg/tests/test_y.py::test_y",
     "pkg/tests/test_y.py::test_y"),
    ("pytest_tfperf/catalog/test_catalog.py::test_x[a]", "pytest_tfperf/catalog/test_catalog.py::test_x[a]"),
    ("tests/test_a.py::test_b[site-packages/x]", "tests/test_a.py::test_b[site-packages/x]"),
])
def test_installed_tests_are_keyed_by_their_path_in_the_package(node_id: str, key: str) -> None:
    assert stable_test_key(node_id) == key


# --------------------------------------------------------------------------- stored profiles (--tfperf-explain)


def test_a_profile_is_stored_in_its_entry_and_the_file_becomes_version_3(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    m = measurement("t.py::test_p")
    profile = {"format": 1, "name": "baseline", "groups": []}
    store.save([m], CPU, recorded_at=WHEN, profiles={m.test_id: profile})
    data = json.loads(store.path_for(m.test_id).read_text())
    assert data["schema_version"] == SCHEMA_VERSION == 3
    assert data["entries"][CPU.fingerprint]["profile"] == profile
    assert store.load(m.test_id, CPU).baseline.profile == profile
    # A refresh without a profile drops the stale one, and the file is version 2 again.
    store.save([m], CPU, recorded_at=WHEN)
    data = json.loads(store.path_for(m.test_id).read_text())
    assert "profile" not in data["entries"][CPU.fingerprint] and data["schema_version"] == 2
    assert store.load(m.test_id, CPU).baseline.profile is None


def test_a_version_2_reader_refuses_a_file_with_a_profile_as_newer(tmp_path: Path) -> None:
    from pytest_tfperf.storage import baseline_store

    store = BaselineStore(tmp_path)
    m = measurement("t.py::test_p")
    store.save([m], CPU, recorded_at=WHEN, profiles={m.test_id: {"format": 1}})
    try:
        baseline_store.SCHEMA_VERSION = 2  # the reader of the version before profiles
        with pytest.raises(StorageError, match="written by a newer pytest-tfperf"):
            store.load(m.test_id, CPU)
    finally:
        baseline_store.SCHEMA_VERSION = 3


def test_a_profile_that_is_not_an_object_is_refused_naming_its_place(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    m = measurement("t.py::test_p")
    store.save([m], CPU, recorded_at=WHEN, profiles={m.test_id: {"format": 1}})
    path = store.path_for(m.test_id)
    data = json.loads(path.read_text())
    data["entries"][CPU.fingerprint]["profile"] = [1, 2]
    path.write_text(json.dumps(data))
    with pytest.raises(StorageError, match="profile.*expected an object"):
        store.load(m.test_id, CPU)

"""Model <-> dict conversion, strict validation, sample bounding and the JSON rendering."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_tfperf.storage import serialization as ser
from pytest_tfperf.storage.documents import load_document, render_json, to_json_value, utc_timestamp
from pytest_tfperf.storage.fields import Field, StorageError
from pytest_tfperf.model import Diagnosis, Environment, GpuBusy, Measurement, MemoryPeak, MemorySource, Timings


def make_timings(rounds: int = 5, per_round: int = 40, seed: int = 0) -> Timings:
    rng = random.Random(seed)
    samples = tuple(rng.randint(900_000, 1_100_000) for _ in range(rounds * per_round))
    return Timings(samples_ns=samples, round_sizes=(per_round,) * rounds, items_per_iteration=32.0,
                   first_call_ns=5_000_000)


def make_measurement(test_id: str = "tests/test_a.py::test_step[bs=32]", **changes: object) -> Measurement:
    m = Measurement(
        test_id=test_id,
        mode="call",
        timings=make_timings(),
        memory=(
            MemoryPeak(MemorySource.TF_ALLOCATOR, "CPU:0", 4 * 2**20, 2**20, (4 * 2**20, 3 * 2**20),
                       per_round_start_bytes=(2**20, 2**20 + 4096)),
            MemoryPeak(MemorySource.NVML, "GPU:0", None, unavailable="no NVIDIA driver"),
        ),
        traces_first_call=2,
        traces_steady=0,
        diagnoses=(Diagnosis("input_bound", "warning", "The step waits on input 80% of the time.",
                             (("input_wait_fraction", 0.8), ("step_ns", 1.5e6))),),
        extra_metrics=(("input_bound_fraction", 0.8), ("memory_growth_bytes_per_iteration", 0.0)),
        environment_id="",
    )
    return dataclasses.replace(m, **changes)


def round_trip(m: Measurement, **kwargs: object) -> Measurement:
    text = render_json(ser.measurement_to_dict(m, **kwargs))  # type: ignore[arg-type]
    return ser.measurement_from_dict(json.loads(text), Field("x.json", "measurement"))


def test_measurement_round_trips_exactly() -> None:
    m = make_measurement()
    assert round_trip(m) == m


def test_mappings_come_back_sorted_by_name() -> None:
    m = make_measurement(extra_metrics=(("z_ns", 1.0), ("a_bytes", 2.0)))
    assert round_trip(m).extra_metrics == (("a_bytes", 2.0), ("z_ns", 1.0))


def test_non_finite_floats_are_stored_as_strings_and_come_back() -> None:
    m = make_measurement(extra_metrics=(("a", math.inf), ("b", -math.inf), ("c", math.nan)))
    text = render_json(ser.measurement_to_dict(m))

    def refuse(token: str) -> None:
        raise AssertionError(f"non-standard JSON token {token}")

    json.loads(text, parse_constant=refuse)  # strict JSON: no NaN/Infinity tokens
    back = dict(round_trip(m).extra_metrics)
    assert back["a"] == math.inf and back["b"] == -math.inf and math.isnan(back["c"])


def test_duplicate_metric_names_are_refused_on_write() -> None:
    m = make_measurement(extra_metrics=(("a", 1.0), ("a", 2.0)))
    with pytest.raises(ValueError, match="'a' twice"):
        ser.measurement_to_dict(m)


def test_every_model_field_is_serialised() -> None:
    # A field added to the model must be added to the stored form too (and to the schema history).
    def keys(obj: object) -> set[str]:
        return {f.name for f in dataclasses.fields(obj)}  # type: ignore[arg-type]

    # The GPU fields are optional (written only where a GPU was measured): measured on a GPU here.
    m = make_measurement(
        memory=(MemoryPeak(MemorySource.NVML, "GPU:0", 3 * 2**30, 2**30, (3 * 2**30,), per_round_start_bytes=(2**30,),
                           scope="process", detail="NVML memory of this process"),),
        gpu_busy=(GpuBusy("GPU:0", (0.98,), (0.97,), process_on_gpu=True, samples=20),
                  GpuBusy("GPU:1", unavailable="NVML stopped answering", process_unavailable="not supported")))
    stored = ser.measurement_to_dict(m)
    # trace_counting is written only where it is not the one way traces have been counted so far.
    assert keys(m) - {"trace_counting"} <= set(stored)
    assert keys(m.memory[0]) <= set(stored["memory"][0])
    assert keys(m.gpu_busy[0]) - {"unavailable", "process_unavailable"} <= set(stored["gpu_busy"][0])
    assert keys(m.gpu_busy[1]) <= set(stored["gpu_busy"][1])
    assert round_trip(m) == m
    assert keys(m.diagnoses[0]) <= set(stored["diagnoses"][0])
    # measured_iterations is stored as iterations_measured (the samples' count where nothing was dropped).
    assert keys(m.timings) - {"samples_ns", "round_sizes", "measured_iterations"} <= set(stored["timings"])
    assert stored["timings"]["iterations_measured"] == m.timings.iterations
    assert keys(Environment(())) <= set(ser.environment_to_dict(Environment(())))


def test_summary_is_computed_from_all_samples_not_the_stored_subset() -> None:
    m = make_measurement(timings=make_timings(rounds=4, per_round=1000))
    stored = ser.measurement_to_dict(m, max_samples=100)
    assert stored["summary"]["iterations"] == 4000
    assert stored["timings"]["iterations_measured"] == 4000
    assert sum(len(r) for r in stored["timings"]["rounds_ns"]) <= 100
    assert stored["summary"]["median_ns"] == pytest.approx(m.timings.median_ns, rel=1e-5)


def test_a_subsample_keeps_the_iterations_measured_for_rates_per_iteration() -> None:
    m = make_measurement(timings=make_timings(rounds=4, per_round=1000))
    loaded = round_trip(m, max_samples=100)
    assert loaded.timings.iterations <= 100 and loaded.timings.iterations_measured == 4000
    assert len(loaded.timings.round_sizes) == 4
    # Stored again (a baseline rewritten by a later refresh): still the iterations that were measured.
    assert ser.measurement_to_dict(loaded)["timings"]["iterations_measured"] == 4000
    assert round_trip(make_measurement()).timings.measured_iterations == 0  # nothing dropped: nothing to say


def test_traces_counted_another_way_are_written_and_refused_by_a_reader_that_does_not_know_it() -> None:
    m = dataclasses.replace(make_measurement(), trace_counting="every_call")
    stored = ser.measurement_to_dict(m)
    assert stored["trace_counting"] == "every_call"
    with pytest.raises(StorageError, match="trace_counting.*'every_call', a way of counting traces this "
                                           "pytest-tfperf does not know .*between_rounds.*newer version"):
        ser.measurement_from_dict(stored, Field("f.json", "measurement", "refresh it"))


# --------------------------------------------------------------------------- subsampling


def test_subsampling_is_a_no_op_under_the_bound() -> None:
    t = make_timings()
    assert ser.subsample_timings(t, t.iterations) is t


@pytest.mark.parametrize(("rounds", "per_round", "limit"), [(5, 1000, 2000), (5, 1000, 7), (3, 200_000, 2000),
                                                             (50, 100, 2000), (3000, 1, 2000)])
def test_subsampling_bounds_samples_and_keeps_rounds_in_order(rounds: int, per_round: int, limit: int) -> None:
    t = make_timings(rounds=rounds, per_round=per_round)
    small = ser.subsample_timings(t, limit)
    assert small.iterations <= limit
    assert small.iterations >= min(limit, rounds) * 0.9
    assert len(small.round_sizes) == min(rounds, limit)
    assert small.items_per_iteration == t.items_per_iteration and small.first_call_ns == t.first_call_ns
    # Each kept round is a subsequence of its own original round, rounds in their original order.
    originals = iter(t.rounds)
    for kept in small.rounds:
        assert any(_is_subsequence(kept, r) for r in originals)


def _is_subsequence(part: tuple[int, ...], whole: tuple[int, ...]) -> bool:
    it = iter(whole)
    return all(x in it for x in part)


def test_subsampling_keeps_the_distribution_and_round_throughputs() -> None:
    rng = random.Random(3)
    # Rounds with different speeds: the per-round throughput must survive.
    samples = [int(rng.gauss(1e6 * (1 + 0.1 * r), 2e4)) for r in range(5) for _ in range(20_000)]
    t = Timings(tuple(samples), (20_000,) * 5, 1.0, 0)
    small = ser.subsample_timings(t, 2000)
    assert small.round_sizes == (400,) * 5
    assert small.median_ns == pytest.approx(t.median_ns, rel=0.01)
    for full, kept in zip(t.round_throughputs_per_s, small.round_throughputs_per_s):
        assert kept == pytest.approx(full, rel=0.01)


def test_subsampling_is_deterministic() -> None:
    t = make_timings(rounds=5, per_round=999)
    assert ser.subsample_timings(t, 100) == ser.subsample_timings(t, 100)


def test_subsampling_refuses_a_zero_bound() -> None:
    with pytest.raises(ValueError, match="max_samples"):
        ser.subsample_timings(make_timings(), 0)


# --------------------------------------------------------------------------- strict loading


def _stored() -> dict:
    return json.loads(render_json(ser.measurement_to_dict(make_measurement())))


def _load_error(data: dict) -> str:
    with pytest.raises(StorageError) as info:
        ser.measurement_from_dict(data, Field("bench/x.json", "entries.abc.measurement"))
    return str(info.value)


def test_a_wrong_sample_type_is_reported_with_its_exact_place() -> None:
    data = _stored()
    data["timings"]["rounds_ns"][1][2] = "12"
    message = _load_error(data)
    assert "bench/x.json" in message
    assert "entries.abc.measurement.timings.rounds_ns[1][2]" in message
    assert "expected an integer, found a string" in message
    assert "--tfperf-update" in message  # says what to do


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda d: d.pop("timings"), "missing key(s) 'timings'"),
        (lambda d: d.update(speed=1), "unknown key(s) 'speed'"),
        (lambda d: d.update(traces_steady=True), "traces_steady': expected an integer, found a boolean"),
        (lambda d: d.update(traces_steady=-1), "expected an integer >= 0"),
        (lambda d: d["memory"][0].update(source="vram"), "unknown memory source 'vram'"),
        (lambda d: d["memory"][0].update(unavailable="x"), "exactly one of 'peak_bytes' and 'unavailable'"),
        (lambda d: d["memory"][0].update(peak_bytes=1.5), "memory[0].peak_bytes': expected an integer"),
        (lambda d: d["timings"].update(iterations_measured=3), "fewer than the 200 samples stored"),
        (lambda d: d["timings"].update(rounds_ns=[[], []]), "holds no samples"),
        (lambda d: d["timings"].update(items_per_iteration=0), "items_per_iteration': must be a positive number"),
        (lambda d: d["timings"]["rounds_ns"][0].__setitem__(0, -5), "expected an integer >= 0, found -5"),
        (lambda d: d.update(extra_metrics={"a": "fast"}), "extra_metrics.a': expected a number"),
        (lambda d: d["diagnoses"][0].pop("kind"), "diagnoses[0]': missing key(s) 'kind'"),
        (lambda d: d.update(summary=[]), "summary': expected an object"),
        (lambda d: d.update(test_id=""), "test_id': expected a non-empty string"),
    ],
)
def test_invalid_fields_are_refused_with_a_clear_message(edit: object, expected: str) -> None:
    data = _stored()
    edit(data)  # type: ignore[operator]
    assert expected in _load_error(data)


def test_environment_round_trips_and_checks_its_fingerprint() -> None:
    env = Environment(hard=(("tf", "2.21"), ("cpu", "Xeon")), soft=(("host", "ci-7"),))
    data = json.loads(render_json(ser.environment_to_dict(env)))
    back = ser.environment_from_dict(data, Field("f.json", "environment"))
    assert back.hard_dict() == env.hard_dict() and back.soft_dict() == env.soft_dict()
    assert back.fingerprint == env.fingerprint
    data["hard"]["tf"] = "2.20"  # edited by hand: the key no longer matches
    with pytest.raises(StorageError, match="environment.fingerprint.*edited"):
        ser.environment_from_dict(data, Field("f.json", "environment"))


def test_environment_with_a_repeated_key_is_refused() -> None:
    with pytest.raises(ValueError, match="same key twice"):
        ser.environment_to_dict(Environment(hard=(("tf", "1"), ("tf", "2"))))


# --------------------------------------------------------------------------- documents


def test_render_json_is_sorted_indented_and_keeps_value_lists_on_one_line() -> None:
    doc = {"b": [[1, 2, 3], [4]], "a": {"z": "é/∑", "y": [], "x": {}}, "c": [{"k": None}], "d": 1.5}
    text = render_json(doc)
    assert json.loads(text) == doc
    assert text.endswith("}\n")
    assert text.index('"a"') < text.index('"b"') < text.index('"c"')
    assert "    [1, 2, 3],\n" in text
    assert '"z": "é/∑"' in text  # readable, not \u-escaped
    assert render_json(doc) == text


def test_render_json_refuses_nan() -> None:
    with pytest.raises(ValueError):
        render_json({"a": math.nan})


def test_to_json_value_converts_and_names_what_it_cannot_store() -> None:
    value = {"s": MemorySource.NVML, "t": (1, 2.5), "f": math.inf, "n": None, "nested": {"ok": True}}
    assert to_json_value(value) == {"s": "nvml", "t": [1, 2.5], "f": "inf", "n": None, "nested": {"ok": True}}
    with pytest.raises(TypeError, match=r"verdict\.metrics\[1\]: object cannot be stored"):
        to_json_value({"metrics": [1, object()]}, "verdict")


def _doc(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _load(path: Path, migrations: dict | None = None) -> dict:
    return load_document(path, "demo/doc", 2, migrations or {}, "restore it")


def test_load_document_refuses_newer_versions_with_an_upgrade_hint(tmp_path: Path) -> None:
    path = _doc(tmp_path / "d.json", {"schema": "demo/doc", "schema_version": 3, "written_by": "9.0"})
    with pytest.raises(StorageError) as info:
        _load(path)
    message = str(info.value)
    assert str(path) in message and "version 3" in message and "newer pytest-tfperf" in message
    assert "Upgrade pytest-tfperf" in message and "pytest --tfperf --tfperf-update" in message
    assert info.value.path == path


def test_load_document_migrates_older_versions(tmp_path: Path) -> None:
    path = _doc(tmp_path / "d.json", {"schema": "demo/doc", "schema_version": 1, "old": 1})

    def v1_to_v2(d: dict) -> dict:
        return {**{k: v for k, v in d.items() if k != "old"}, "new": d["old"]}

    assert _load(path, {1: v1_to_v2}) == {"schema": "demo/doc", "schema_version": 2, "new": 1}
    with pytest.raises(StorageError, match="version 1 is no longer supported"):
        _load(path)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"schema": "demo/doc", "schema_ver', "truncated or corrupted"),
        ("", "is empty"),
        ("[1, 2]", "expected a JSON object at the top"),
        ('{"schema": "other/doc", "schema_version": 1}', "not a demo/doc file"),
        ('{"schema_version": 1}', "not a demo/doc file"),
        ('{"schema": "demo/doc", "schema_version": "2"}', "schema_version': expected a positive integer"),
        ('{"schema": "demo/doc", "schema_version": 0}', "expected a positive integer"),
    ],
)
def test_load_document_explains_bad_files(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "d.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(StorageError, match="d.json") as info:
        _load(path)
    assert expected in str(info.value)


def test_load_document_reports_binary_garbage(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(StorageError, match="not UTF-8"):
        _load(path)


def test_utc_timestamp_refuses_naive_datetimes() -> None:
    from datetime import datetime, timezone

    assert utc_timestamp(datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)) == "2025-01-02T03:04:05Z"
    with pytest.raises(ValueError, match="timezone-aware"):
        utc_timestamp(datetime(2025, 1, 2))


def test_storage_modules_import_neither_pytest_tensorflow_nor_pandas() -> None:
    code = (
        "import sys\n"
        "import pytest_tfperf.storage.serialization, pytest_tfperf.storage.baseline_store, pytest_tfperf.storage.results_json, "
        "pytest_tfperf.storage.history_csv, pytest_tfperf.storage.atomic_files\n"
        "bad = sorted(m for m in ('pytest', '_pytest', 'tensorflow', 'pandas', 'numpy') if m in sys.modules)\n"
        "print(','.join(bad))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 10, 400, 1001])
@pytest.mark.parametrize("shape", ["spread", "ties", "skewed"])
def test_summary_figures_match_the_model_definitions(n: int, shape: str) -> None:
    rng = random.Random(n)
    draw = {"spread": lambda: rng.randint(1, 5000), "ties": lambda: rng.choice([0, 7, 7, 9]),
            "skewed": lambda: int(rng.expovariate(1e-3))}[shape]
    samples = tuple(draw() for _ in range(n))
    t = Timings(samples, (n,), 3.0, 0)
    s = ser.summarize_timings(t)
    assert s.median_ns == t.median_ns and s.p95_ns == t.latency_percentile_ns(95)
    assert s.cv == pytest.approx(t.cv, rel=1e-12) and s.throughput_per_s == t.throughput_per_s
    assert s.round_throughputs_per_s == t.round_throughputs_per_s and s.iterations == n and s.rounds == 1

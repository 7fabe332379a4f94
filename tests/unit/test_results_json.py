"""The --tfperf-json results document: what it holds, atomic writing, strict loading."""

from __future__ import annotations

import dataclasses
import json
import os
import random
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from pytest_tfperf.model import Environment, Measurement, MemoryPeak, MemorySource, Timings
from pytest_tfperf.storage.results_json import (
    SCHEMA,
    SCHEMA_VERSION,
    load_results,
    results_to_dict,
    write_results,
)
from pytest_tfperf.storage.fields import StorageError
from pytest_tfperf.storage.serialization import subsample_timings

ENV = Environment(hard=(("cpu_model", "Xeon"), ("tensorflow", "2.21.0")), soft=(("hostname", "ci-3"),))
WHEN = datetime(2025, 11, 23, 12, 0, 0, tzinfo=timezone.utc)


def measurement(test_id: str, *, rounds: int = 3, per_round: int = 8, seed: int = 0) -> Measurement:
    rng = random.Random(seed)
    samples = tuple(rng.randint(90_000, 110_000) for _ in range(rounds * per_round))
    return Measurement(test_id=test_id, mode="iterate", timings=Timings(samples, (per_round,) * rounds, 16.0, 10**8),
                       memory=(MemoryPeak(MemorySource.RSS_HWM, "host", 10**9, 9 * 10**8, (10**9,) * rounds),),
                       traces_first_call=1, traces_steady=0, environment_id=ENV.fingerprint)


class FakeVerdict:
    """Stands in for gates.verdict.Verdict: only the to_dict() protocol matters here."""

    def __init__(self, status: str) -> None:
        self.status = status

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "metrics": ({"metric": "throughput_per_s", "change": -0.12},),
                "p_value": float("nan")}


@dataclasses.dataclass
class FakeOutcome:
    measurement: Measurement
    verdict: Any = None


def test_results_round_trip_with_environment_measurements_and_verdicts(tmp_path: Path) -> None:
    a, b, c = measurement("t::a"), measurement("t::b", seed=1), measurement("t::c", seed=2)
    path = write_results(tmp_path / "out" / "results.json", results_to_dict(ENV,
                         [FakeOutcome(a, FakeVerdict("regressed")), FakeOutcome(b), c],
                         {"t::c": {"status": "unchanged"}, "t::errored": {"status": "error"}}, created_at=WHEN))
    doc = load_results(path)
    assert doc.environment.fingerprint == ENV.fingerprint and doc.environment.soft_dict() == {"hostname": "ci-3"}
    assert doc.measurements == (a, b, c)
    assert doc.measurement("t::b") == b and doc.measurement("t::zzz") is None
    assert doc.verdict("t::a") == {"status": "regressed", "p_value": "nan",
                                   "metrics": [{"metric": "throughput_per_s", "change": -0.12}]}
    assert doc.verdict("t::b") is None
    assert doc.verdict("t::c") == {"status": "unchanged"}
    assert doc.test_ids == ("t::a", "t::b", "t::c", "t::errored")
    assert doc.created_at == "2025-11-23T12:00:00Z" and doc.path == path


def test_results_document_layout(tmp_path: Path) -> None:
    data = results_to_dict(ENV, [measurement("t::a")], created_at=WHEN)
    assert data["schema"] == SCHEMA == "pytest-tfperf/results" and data["schema_version"] == SCHEMA_VERSION == 6
    assert set(data) == {"created_at", "environment", "schema", "schema_version", "tests", "written_by"}
    assert data["environment"]["hard"] == {"cpu_model": "Xeon", "tensorflow": "2.21.0"}
    assert data["tests"]["t::a"]["verdict"] is None
    assert len(data["tests"]["t::a"]["measurement"]["timings"]["rounds_ns"]) == 3


def test_samples_are_bounded_unless_asked_otherwise(tmp_path: Path) -> None:
    big = measurement("t::big", rounds=4, per_round=5000)
    bounded = load_results(write_results(tmp_path / "a.json",
                                         results_to_dict(ENV, [big], max_samples=400))).measurements[0]
    assert bounded.timings == subsample_timings(big.timings, 400)
    full = load_results(write_results(tmp_path / "b.json",
                                      results_to_dict(ENV, [big], max_samples=None))).measurements[0]
    assert full == big


def test_a_test_measured_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="two measurements for 't::a'"):
        results_to_dict(ENV, [measurement("t::a"), measurement("t::a")])


def test_a_measurement_from_another_environment_is_refused() -> None:
    stray = dataclasses.replace(measurement("t::a"), environment_id="ffffffffffffffff")
    with pytest.raises(ValueError, match="measured in environment ffffffffffffffff"):
        results_to_dict(ENV, [stray])


def test_a_verdict_that_cannot_be_stored_is_refused_with_its_place() -> None:
    class Bad:
        def to_dict(self) -> dict[str, Any]:
            return {"when": datetime(2025, 1, 1)}

    with pytest.raises(TypeError, match=r"verdict of 't::a'\.when: datetime cannot be stored"):
        results_to_dict(ENV, [FakeOutcome(measurement("t::a"), Bad())])

    class NotADict:
        def to_dict(self) -> list[int]:
            return [1]

    with pytest.raises(TypeError, match="returned list, expected a dict"):
        results_to_dict(ENV, [], {"t::a": NotADict()})  # type: ignore[dict-item]


def test_a_failed_write_keeps_the_previous_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_results(tmp_path / "r.json", results_to_dict(ENV, [measurement("t::a")]))
    before = path.read_bytes()

    def refuse(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(StorageError, match="cannot write the results to .*No space left"):
        write_results(path, results_to_dict(ENV, [measurement("t::b")]))
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda d: d.update(schema_version=SCHEMA_VERSION + 1), "written by a newer pytest-tfperf"),
        (lambda d: d.update(schema="pytest-tfperf/baseline"), "not a pytest-tfperf/results file"),
        (lambda d: d.pop("environment"), "missing key(s) 'environment'"),
        (lambda d: d["tests"]["t::a"]["measurement"].update(test_id="t::b"), "measurement.test_id': is 't::b'"),
        (lambda d: d["tests"]["t::a"]["measurement"].update(environment_id="0" * 16), "document's environment"),
        (lambda d: d["tests"]["t::a"].update(verdict="regressed"), "verdict': expected an object or null"),
        (lambda d: d["environment"]["hard"].update(tensorflow="2.20"), "hard keys were edited"),
    ],
)
def test_bad_results_files_are_refused_naming_the_file(tmp_path: Path, edit: Any, expected: str) -> None:
    path = write_results(tmp_path / "r.json", results_to_dict(ENV, [measurement("t::a")]))
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(StorageError) as info:
        load_results(path)
    assert str(path) in str(info.value) and expected in str(info.value)


def test_a_truncated_results_file_is_refused(tmp_path: Path) -> None:
    path = write_results(tmp_path / "r.json", results_to_dict(ENV, [measurement("t::a")]))
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(StorageError, match="truncated or corrupted; write it again with `pytest --tfperf"):
        load_results(path)


def test_a_missing_results_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="nope.json: no such file"):
        load_results(tmp_path / "nope.json")


def test_a_compare_verdict_dataclass_is_stored_field_by_field(tmp_path: Path) -> None:
    from pytest_tfperf.gates.rounds import judge_rounds
    from pytest_tfperf.gates.verdict import Tolerances

    base, slow = measurement("t::a", rounds=6), measurement("t::a", rounds=6, seed=5)
    slow = dataclasses.replace(slow, timings=Timings(tuple(s * 2 for s in slow.timings.samples_ns),
                                                     slow.timings.round_sizes, 16.0, 10**8))
    verdict = judge_rounds(slow, base, Tolerances())
    doc = load_results(write_results(tmp_path / "r.json", results_to_dict(ENV, [FakeOutcome(slow, verdict)])))
    stored = doc.verdict("t::a")
    assert stored is not None and stored["status"] == "regressed" and stored["test_id"] == "t::a"
    throughput = stored["metrics"][0]
    assert throughput["metric"] == "throughput" and throughput["direction"] == "higher_is_better"
    assert throughput["relative_change"] == pytest.approx(verdict.metrics[0].relative_change)


def test_a_verdict_of_an_unknown_kind_is_refused() -> None:
    with pytest.raises(TypeError, match="has no to_dict"):
        results_to_dict(ENV, [FakeOutcome(measurement("t::a"), "regressed")])


GOLDEN = Path(__file__).parent.parent / "data" / "results" / "v1" / "results.json"


def test_golden_v1_results_file_loads_and_is_rewritten_identically(tmp_path: Path) -> None:
    doc = load_results(GOLDEN)
    (m,) = doc.measurements
    assert m.test_id == "tests/perf/test_input.py::test_pipeline[parallel]" and m.mode == "iterate"
    assert m.timings.rounds == ((2100000, 2050000, 2080000), (2500000, 2060000, 2070000))
    assert m.memory_peak(MemorySource.TF_ALLOCATOR).unavailable.startswith("allocator statistics")  # type: ignore[union-attr]
    assert doc.verdict(m.test_id)["metrics"][0]["relative_change"] == -0.126  # type: ignore[index]
    assert doc.environment.fingerprint == m.environment_id == "1a1c4d699a555c4d"
    created = datetime.strptime(doc.created_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    again = write_results(tmp_path / "r.json",
                          results_to_dict(doc.environment, [m], dict(doc.verdicts), created_at=created))
    text = again.read_text()
    version = json.loads(text)["written_by"]
    # Version 1 has nothing that later versions read differently: the rewrite differs in the version only.
    rewritten = text.replace(f'"written_by": "{version}"', '"written_by": "0.1.0"')
    assert rewritten.replace(f'"schema_version": {SCHEMA_VERSION}', '"schema_version": 1') == GOLDEN.read_text()


@dataclasses.dataclass
class OutcomeWithBaseline:
    measurement: Measurement
    verdict: Any = None
    baseline: str = ""


def test_each_test_says_what_its_verdict_compared_with(tmp_path: Path) -> None:
    a, b, c = measurement("t::a"), measurement("t::b", seed=1), measurement("t::c", seed=2)
    path = write_results(tmp_path / "results.json", results_to_dict(ENV, [
        OutcomeWithBaseline(a, FakeVerdict("regressed"), "measured beside origin/main"),
        OutcomeWithBaseline(b, FakeVerdict("unchanged"), "stored baseline"),
        OutcomeWithBaseline(c, None, ""),
    ], created_at=WHEN))
    doc = load_results(path)
    assert dict(doc.compared_with) == {"t::a": "measured beside origin/main", "t::b": "stored baseline"}
    assert "compared_with" not in json.loads(path.read_text())["tests"]["t::c"]


@dataclasses.dataclass
class PairedOutcome:
    measurement: Measurement
    verdict: Any = None
    baseline: str = ""
    reference: Measurement | None = None


def test_effects_and_the_partner_measurement_round_trip(tmp_path: Path) -> None:
    ours, theirs = measurement("t::a"), measurement("t::a", seed=5)
    effect = {"scenario": "input_pipeline", "anti": "anti", "fix": "fix", "metric": "throughput",
              "value": float("inf"), "spread": [1.5, 2.5], "min_effect": 1.3, "gated": True, "passed": True}
    path = write_results(tmp_path / "r.json", results_to_dict(ENV, [PairedOutcome(ours, FakeVerdict("unchanged"),
                                                                  "measured beside main", theirs)],
                         created_at=WHEN, effects=[effect]))
    doc = load_results(path)
    assert doc.references["t::a"].timings.rounds == theirs.timings.rounds
    (loaded,) = doc.effects
    assert loaded["value"] == "inf" and loaded["spread"] == [1.5, 2.5]  # non-finite floats as in the rest of the file
    plain = write_results(tmp_path / "plain.json", results_to_dict(ENV, [ours], created_at=WHEN))
    assert "effects" not in json.loads(plain.read_text()) and not load_results(plain).effects


def test_what_the_stored_gate_could_not_see_round_trips_and_version_5_files_still_load(tmp_path: Path) -> None:
    from pytest_tfperf.storage.results_json import StoredGateNotes

    notes = StoredGateNotes(
        lines=("stored baselines: against their runs, slowdowns of 38% to 74% (median 51%) are caught on this "
               "machine", "t::a: no baseline for this environment (fingerprint abc); recorded only for: ..."),
        no_baseline_for_environment=("t::a",))
    path = write_results(tmp_path / "r.json",
                         results_to_dict(ENV, [measurement("t::a")], created_at=WHEN, stored_gate=notes))
    assert json.loads(path.read_text())["stored_gate"]["no_baseline_for_environment"] == ["t::a"]
    assert load_results(path).stored_gate == notes
    # Nothing to say: no key, so the file is what version 5 wrote, and a version-5 file reads as before.
    plain = write_results(tmp_path / "plain.json", results_to_dict(ENV, [measurement("t::a")], created_at=WHEN,
                          stored_gate=StoredGateNotes()))
    data = json.loads(plain.read_text())
    assert "stored_gate" not in data
    data["schema_version"] = 5
    old = tmp_path / "v5.json"
    old.write_text(json.dumps(data))
    assert load_results(old).stored_gate is None and load_results(old).measurement("t::a") is not None
    bad = json.loads(path.read_text())
    bad["stored_gate"]["lines"] = "one"
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(StorageError, match="stored_gate.lines"):
        load_results(tmp_path / "bad.json")

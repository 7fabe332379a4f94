"""The ``--tfperf-json=PATH`` results document: one run, every measurement and verdict.

It is what CI keeps as an artifact and what ``tfperf-compare old.json new.json``
reads, so it holds the environment (hard and soft keys), every measurement
with its per-round samples (bounded like baselines) and, per test, the verdict
of the gate. Verdicts are built by the ``gates``; this module takes them through
their ``to_dict()`` (or as dicts already) and gives them back as dicts, so the
file format does not depend on the verdict classes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from pytest_tfperf.storage.atomic_files import atomic_write_text
from pytest_tfperf.model import Environment, Measurement
from pytest_tfperf.storage.documents import (
    Migration,
    load_document,
    package_version,
    render_json,
    to_json_value,
    utc_timestamp,
)
from pytest_tfperf.storage.fields import Field, JsonDict, StorageError, read_object, read_str
from pytest_tfperf.storage.serialization import (
    environment_from_dict,
    environment_to_dict,
    measurement_from_dict,
    measurement_to_dict,
)

SCHEMA = "pytest-tfperf/results"

# Results schema history (bump SCHEMA_VERSION on any change a version-1 reader
# would misread, and add the step to _MIGRATIONS):
#
# 1 - (pytest-tfperf 0.1.0) first version: environment, and "tests" keyed by
#     test id, each with "measurement" (or null) and "verdict" (or null).
# 2 - each test may carry "compared_with": what its verdict compared with
#     ("stored baseline", "measured beside origin/main", ...). A version-1
#     reader refuses unknown keys; a version-1 file is a valid version 2.
#     Within version 2, written only where a GPU was measured (so CPU-only files
#     are unchanged, and older readers refuse rather than misread GPU files): a
#     measurement's "gpu_busy" list, and "scope"/"detail" on NVML memory peaks.
# 3 - an optional top-level "effects": one object per catalog comparison (how
#     much the fix beat the anti-pattern, the gate margin, passed), and per
#     test an optional "reference_measurement": the other version's figures
#     under --tfperf-against, so a report can plot both sides' rounds. A
#     version-2 file is a valid version 3.
# 4 - an optional top-level "calibration": the calibration workload's measurement in this process (a
#     refresh's processes measure it; the refresh stores its runs as the machine's spread floor). A
#     version-3 file is a valid version 4.
#     Within version 4 (verdicts are stored as written, not validated, so a
#     reader of version 4 reads them): a verdict's "status" may be
#     "unconfirmed" (a stored-gate regression that its fresh-process
#     confirmation could not measure: not a failure), with its reason in
#     "unconfirmed_reason" ("" otherwise).
# 5 - per test an optional "explanation" (--tfperf-explain, on a failed throughput verdict): where the time
#     went, as profiling.attribution.attribution_dict writes it (ms per iteration, causes, remainder,
#     the lines as printed, the raw profiles' folders), or {"lines": [one line], "reason": why there is
#     none}. Stored as written, not validated. A version-4 reader refuses the key (it refuses unknown
#     keys), so the version is bumped; a version-4 file is a valid version 5.
# 6 - an optional top-level "stored_gate": what the stored gate could and could not see in this run, as the
#     terminal says it: {"lines": [the statements, one a line: which slowdowns the stored baselines catch on
#     this machine, a calibration baseline that could not be read, ...], "no_baseline_for_environment": [the
#     test ids whose baselines were recorded only for other environments]}. A version-5 reader refuses the key,
#     so the version is bumped; a version-5 file is a valid version 6.
SCHEMA_VERSION = 6
_MIGRATIONS: dict[int, Migration] = {1: lambda document: document, 2: lambda document: document,
                                     3: lambda document: document, 4: lambda document: document,
                                     5: lambda document: document}

DEFAULT_MAX_SAMPLES = 2000  # as for baselines: the same data judged the same way
_REGENERATE = "pytest --tfperf --tfperf-json=PATH"
_HINT = f"write it again with `{_REGENERATE}`"


class SupportsToDict(Protocol):
    """A verdict that describes itself as a JSON-ready dict (a dataclass or a plain dict is accepted too)."""

    def to_dict(self) -> Mapping[str, Any]: ...


# A verdict: a ``SupportsToDict``, a dataclass (``gates.verdict.Verdict``) or a dict; checked when written.
VerdictLike = Any


class OutcomeLike(Protocol):
    """A test's outcome as the session keeps it: its measurement and, when compared, its verdict."""

    @property
    def measurement(self) -> Measurement: ...

    @property
    def verdict(self) -> VerdictLike | None: ...


@dataclass(frozen=True, slots=True)
class StoredGateNotes:
    """What the stored gate could and could not see in one run, as the terminal said it.

    ``lines``: one statement a line (which slowdowns the stored baselines catch on this machine, a
    calibration baseline that could not be read, ...). ``no_baseline_for_environment``: test ids whose
    baselines were recorded only for other environments (not gated unless --tfperf-strict), with the
    notice for each in ``lines``.
    """

    lines: tuple[str, ...] = ()
    no_baseline_for_environment: tuple[str, ...] = ()

    def to_dict(self) -> JsonDict:
        return {"lines": list(self.lines), "no_baseline_for_environment": list(self.no_baseline_for_environment)}


def _stored_gate_from_dict(raw: object, where: Field) -> StoredGateNotes:
    data = read_object(raw, where, ("lines", "no_baseline_for_environment"), ())
    lists = {}
    for key in ("lines", "no_baseline_for_environment"):
        values = data[key]
        if not isinstance(values, list):
            raise where.key(key).error("expected a list of strings")
        lists[key] = tuple(read_str(v, where.key(key).index(i)) for i, v in enumerate(values))
    return StoredGateNotes(**lists)


@dataclass(frozen=True, slots=True)
class ResultsDocument:
    """A results file, loaded and validated."""

    environment: Environment
    measurements: tuple[Measurement, ...]  # sorted by test id
    verdicts: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # test id -> verdict dict
    created_at: str = ""
    written_by: str = ""
    path: Path | None = None
    compared_with: Mapping[str, str] = field(default_factory=dict)  # test id -> what its verdict compared with
    # test id -> the measurement its paired verdict compared with (--tfperf-against's other version)
    references: Mapping[str, Measurement] = field(default_factory=dict)
    effects: tuple[Mapping[str, Any], ...] = ()  # the catalog's fix-vs-anti effects, as written
    calibration: Measurement | None = None  # the calibration workload, measured by a refresh's processes
    explanations: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # test id -> its explanation
    stored_gate: StoredGateNotes | None = None  # what the stored gate could not see (version 6)

    def measurement(self, test_id: str) -> Measurement | None:
        for m in self.measurements:
            if m.test_id == test_id:
                return m
        return None

    def verdict(self, test_id: str) -> Mapping[str, Any] | None:
        return self.verdicts.get(test_id)

    @property
    def test_ids(self) -> tuple[str, ...]:
        return tuple(sorted({m.test_id for m in self.measurements} | set(self.verdicts)))


def _verdict_to_dict(test_id: str, verdict: VerdictLike) -> JsonDict:
    where = f"verdict of {test_id!r}"
    if hasattr(verdict, "to_dict"):
        raw = verdict.to_dict()
        if not isinstance(raw, Mapping):
            raise TypeError(f"{where}: to_dict() returned {type(raw).__name__}, expected a dict")
    elif isinstance(verdict, Mapping) or dataclasses.is_dataclass(verdict):
        # A frozen dataclass (gates.verdict.Verdict) is stored field by field.
        raw = verdict
    else:
        raise TypeError(f"{where}: {type(verdict).__name__} has no to_dict() and is neither a dict nor a dataclass")
    return to_json_value(raw, where)  # type: ignore[no-any-return]


def results_to_dict(
    environment: Environment,
    results: Iterable[Measurement | OutcomeLike],
    verdicts: Mapping[str, VerdictLike] | None = None,
    *,
    created_at: datetime | None = None,
    max_samples: int | None = DEFAULT_MAX_SAMPLES,
    effects: Sequence[Mapping[str, Any]] = (),
    calibration: Measurement | None = None,
    stored_gate: StoredGateNotes | None = None,
) -> JsonDict:
    """The results document.

    ``results`` holds measurements, or outcomes carrying ``.measurement`` and
    ``.verdict`` (and optionally ``.reference``, the measurement a paired
    verdict compared with); ``verdicts`` (test id -> verdict) adds or
    overrides verdicts. A test id appearing twice is an error. ``effects``
    are the catalog's comparisons (``catalog.effects.Effect.to_dict()``).
    """
    fingerprint = environment.fingerprint
    tests: dict[str, JsonDict] = {}
    for item in results:
        m = item if isinstance(item, Measurement) else item.measurement
        if m.test_id in tests:
            raise ValueError(f"two measurements for {m.test_id!r}; a results document holds one per test")
        if m.environment_id not in ("", fingerprint):
            raise ValueError(f"{m.test_id}: measured in environment {m.environment_id}, "
                             f"but the results are for environment {fingerprint}")
        verdict = None if isinstance(item, Measurement) else item.verdict
        tests[m.test_id] = {
            "measurement": measurement_to_dict(m, max_samples=max_samples),
            "verdict": None if verdict is None else _verdict_to_dict(m.test_id, verdict),
        }
        # What the verdict compared with: "stored baseline", "measured beside origin/main", "paired with 'main'",
        # "no baseline", ...: a CI job that reads the file can tell a stored verdict from a paired one.
        compared_with = getattr(item, "baseline", "")
        if compared_with:
            tests[m.test_id]["compared_with"] = compared_with
        reference = getattr(item, "reference", None)
        if isinstance(reference, Measurement):
            tests[m.test_id]["reference_measurement"] = measurement_to_dict(reference, max_samples=max_samples)
        explanation = getattr(item, "explanation", None)
        if explanation is not None:
            tests[m.test_id]["explanation"] = to_json_value(
                explanation.to_dict() if hasattr(explanation, "to_dict") else explanation,
                f"explanation of {m.test_id!r}")
    for test_id, verdict in (verdicts or {}).items():
        entry = tests.setdefault(test_id, {"measurement": None, "verdict": None})
        entry["verdict"] = _verdict_to_dict(test_id, verdict)
    document: JsonDict = {
        "created_at": utc_timestamp(created_at),
        "environment": environment_to_dict(environment),
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "tests": tests,
        "written_by": package_version(),
    }
    if effects:
        document["effects"] = to_json_value([dict(e) for e in effects], "effects")
    if calibration is not None:
        document["calibration"] = measurement_to_dict(calibration, max_samples=max_samples)
    if stored_gate is not None and (stored_gate.lines or stored_gate.no_baseline_for_environment):
        document["stored_gate"] = stored_gate.to_dict()
    return document


def write_results(path: str | Path, document: JsonDict) -> Path:
    """Write a results document (``results_to_dict``) to ``path`` atomically (parents created); the path."""
    path = Path(path)
    text = render_json(document)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
    except OSError as exc:
        raise StorageError(f"cannot write the results to {path}: {exc.strerror or exc}; choose a writable "
                           f"path for --tfperf-json.", path) from None
    return path


def results_from_dict(data: object, source: str = "<results>") -> ResultsDocument:
    """Validate a parsed results document (already at the current schema version)."""
    top = Field(source, "", _HINT)
    doc = read_object(data, top, ("created_at", "environment", "schema", "schema_version", "tests", "written_by"),
                      ("effects", "calibration", "stored_gate"))
    environment = environment_from_dict(doc["environment"], top.key("environment"))
    tests = doc["tests"]
    if not isinstance(tests, dict):
        raise top.key("tests").error("expected an object keyed by test id")
    measurements: list[Measurement] = []
    verdicts: dict[str, Mapping[str, Any]] = {}
    compared_with: dict[str, str] = {}
    references: dict[str, Measurement] = {}
    explanations: dict[str, Mapping[str, Any]] = {}
    for test_id, raw in sorted(tests.items()):
        where = top.key("tests").key(test_id)
        entry = read_object(raw, where, ("measurement", "verdict"), ("compared_with", "reference_measurement",
                                                                        "explanation"))
        if entry["measurement"] is not None:
            m = measurement_from_dict(entry["measurement"], where.key("measurement"))
            if m.test_id != test_id:
                raise where.key("measurement.test_id").error(f"is {m.test_id!r}, expected {test_id!r}")
            if m.environment_id not in ("", environment.fingerprint):
                raise where.key("measurement.environment_id").error(
                    f"is {m.environment_id!r}, but the document's environment is {environment.fingerprint!r}")
            measurements.append(m)
        if entry["verdict"] is not None:
            if not isinstance(entry["verdict"], dict):
                raise where.key("verdict").error("expected an object or null")
            verdicts[test_id] = MappingProxyType(entry["verdict"])
        if "compared_with" in entry:
            compared_with[test_id] = read_str(entry["compared_with"], where.key("compared_with"))
        if entry.get("reference_measurement") is not None:
            references[test_id] = measurement_from_dict(entry["reference_measurement"],
                                                        where.key("reference_measurement"))
        if entry.get("explanation") is not None:
            if not isinstance(entry["explanation"], dict):
                raise where.key("explanation").error("expected an object or null")
            explanations[test_id] = MappingProxyType(entry["explanation"])
    effects = doc.get("effects", [])
    if not isinstance(effects, list) or not all(isinstance(e, dict) for e in effects):
        raise top.key("effects").error("expected a list of objects")
    return ResultsDocument(
        environment=environment,
        measurements=tuple(measurements),
        verdicts=MappingProxyType(verdicts),
        created_at=read_str(doc["created_at"], top.key("created_at")),
        written_by=read_str(doc["written_by"], top.key("written_by")),
        path=None if source == "<results>" else Path(source),
        compared_with=MappingProxyType(compared_with),
        references=MappingProxyType(references),
        effects=tuple(MappingProxyType(e) for e in effects),
        calibration=(None if doc.get("calibration") is None
                     else measurement_from_dict(doc["calibration"], top.key("calibration"))),
        explanations=MappingProxyType(explanations),
        stored_gate=(None if doc.get("stored_gate") is None
                     else _stored_gate_from_dict(doc["stored_gate"], top.key("stored_gate"))),
    )


def load_results(path: str | Path) -> ResultsDocument:
    """Read and validate a results file; raises ``StorageError`` naming the file and field."""
    path = Path(path)
    data = load_document(path, SCHEMA, SCHEMA_VERSION, _MIGRATIONS, _HINT, regenerate=_REGENERATE)
    return results_from_dict(data, str(path))

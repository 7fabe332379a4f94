"""Baseline files: one diff-friendly JSON file per test, one entry per environment.

A file holds the baselines of one test for every environment it was recorded
on (a CI runner and a GPU workstation side by side), keyed by the environment
fingerprint (the hash of its hard keys). Saving replaces only the entries
(test, fingerprint) measured in this run; every other entry is rewritten
exactly as it was read.

No stored baseline is ever lost by mistake: a file that cannot be read
(truncated, corrupted, newer schema, wrong test) makes ``save`` refuse before
it writes anything, and every write is an atomic replace under a directory
lock, so concurrent writers (pytest-xdist workers, parallel CI jobs) leave
complete files holding all their entries.
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from pytest_tfperf.storage.atomic_files import DirectoryLock, atomic_write_text
from pytest_tfperf.model import Environment, KeyDifference, Measurement, same_environment
from pytest_tfperf.storage.runs import CALIBRATION_ID, CALIBRATION_RUNS_KEPT, REFRESH, RunSummary, summarize
from pytest_tfperf.storage.documents import Migration, load_document, package_version, render_json, utc_timestamp
from pytest_tfperf.storage.fields import (
    REFRESH_COMMAND,
    Field,
    JsonDict,
    StorageError,
    read_list,
    read_object,
    read_str,
)
from pytest_tfperf.storage.serialization import (
    environment_from_dict,
    environment_to_dict,
    measurement_from_dict,
    measurement_to_dict,
    run_summary_from_dict,
    run_summary_to_dict,
)

SCHEMA = "pytest-tfperf/baseline"

# Baseline schema history (bump SCHEMA_VERSION on any change a version-1 reader
# would misread; add the step to _MIGRATIONS and a golden file under
# tests/data/baselines/):
#
# 1 - (pytest-tfperf 0.1.0) first version: one file per test, "entries" keyed by
#     environment fingerprint, each with environment (hard, soft), measurement
#     (per-round samples bounded to DEFAULT_MAX_SAMPLES), recorded_at, written_by.
# 2 - each entry may hold "runs": a summary of every run behind the baseline, each measured in its own
#     process (run_id, recorded_at, kind, throughput_per_s, memory_added_bytes, traces_steady,
#     git_commit); "measurement" is the first of them in full. A version-1 entry has one run: its
#     measurement (the migration is the identity; the reader summarises the measurement).
# 3 - an entry may hold "profile": the compact TensorFlow profile of the refresh's first process
#     (``profiling.profile_model.Profile.to_dict()``, a few KB), stored under --tfperf-update --tfperf-explain so
#     that a stored regression can be explained (docs/explanation/explain.md). Stored as written; read by
#     ``Profile.from_dict`` when used. Only a file with a profile in one of its entries is written as
#     version 3: a version-2 reader refuses it as "written by a newer pytest-tfperf" instead of failing on
#     an unknown key, and every file without a profile stays version 2, readable by older versions. A
#     version-2 file is a valid version 3. A refresh without --tfperf-explain drops the entry's profile:
#     it would describe code that is no longer the baseline's.
SCHEMA_VERSION = 3
PLAIN_SCHEMA_VERSION = 2  # what a file without any profile is written as
_MIGRATIONS: dict[int, Migration] = {1: lambda document: document, 2: lambda document: document}

DEFAULT_DIRECTORY = Path("benchmarks/baselines")
DEFAULT_MAX_SAMPLES = 2000
_READABLE_NAME_LENGTH = 80
_UNSAFE_CHARACTERS = re.compile(r"[^A-Za-z0-9._-]+")
_WINDOWS_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(10)), *(f"LPT{i}" for i in range(10))}
_FIX_HINT = f"restore it from git, or delete it and record it again with `{REFRESH_COMMAND}`"


_INSTALLED = re.compile(r"^(?:.*/)?(?:site-packages|dist-packages)/")


def stable_test_key(node_id: str) -> str:
    """The id a test's baseline and history are stored under: its pytest node id, wherever the code is installed.

    Node ids are relative to pytest's rootdir, so a test collected from an
    installed package (``pytest --pyargs pytest_tfperf.catalog``) reads
    ``v/lib/python3.11/site-packages/pytest_tfperf/catalog/test_catalog.py::...``
    in one virtual environment and something else in the next. Everything up
    to ``site-packages/`` (or ``dist-packages/``) is dropped, leaving the path
    inside the package: the same id a source checkout of that package gives.
    Other tests keep their node id unchanged.
    """
    path, separator, rest = node_id.partition("::")
    return _INSTALLED.sub("", path.replace("\\", "/")) + separator + rest


def baseline_file_name(test_id: str) -> str:
    """A safe, unique file name for ``test_id``: readable part plus a hash of the full id.

    Only ``[A-Za-z0-9._-]`` survive, never two dots in a row nor a leading dot,
    so the name cannot leave the directory, hide itself or clash with the
    temporary files of a write; the hash keeps ids that read alike (and ids
    differing only in case, on case-insensitive file systems) apart.
    """
    if not test_id:
        raise ValueError("a baseline needs a non-empty test id")
    readable = _UNSAFE_CHARACTERS.sub("_", test_id)
    readable = re.sub(r"\.{2,}", ".", readable).strip("._-")
    readable = readable[:_READABLE_NAME_LENGTH].rstrip("._-") or "test"
    if readable.split(".")[0].upper() in _WINDOWS_RESERVED:
        readable = "_" + readable
    digest = hashlib.sha256(test_id.encode("utf-8")).hexdigest()[:12]
    return f"{readable}-{digest}.json"


def _better_throughput(new: Measurement, old: Measurement) -> bool:
    return new.throughput_per_s > old.throughput_per_s


class MatchStatus(str, enum.Enum):
    FOUND = "found"  # an entry for this very environment
    NO_BASELINE = "no_baseline"  # nothing stored for this test
    OTHER_ENVIRONMENTS = "other_environments"  # stored, but only for environments with other hard keys


@dataclass(frozen=True, slots=True)
class StoredBaseline:
    """One entry of a baseline file: a test measured in one environment."""

    test_id: str
    environment: Environment
    measurement: Measurement
    recorded_at: str  # UTC, ISO 8601
    written_by: str  # pytest-tfperf version
    runs: tuple[RunSummary, ...] = ()  # every run behind the baseline, one process each (measurement's first)
    profile: Mapping[str, object] | None = None  # the refresh's compact profile (--tfperf-explain), as stored

    @property
    def fingerprint(self) -> str:
        return self.environment.fingerprint


@dataclass(frozen=True, slots=True)
class OtherEnvironment:
    """A stored entry for the same test in an environment whose hard keys differ from the current one."""

    baseline: StoredBaseline
    hard_differences: tuple[KeyDifference, ...]

    def describe(self) -> str:
        differs = ", ".join(d.describe() for d in self.hard_differences)
        return f"{self.baseline.fingerprint} (recorded {self.baseline.recorded_at}; differs in {differs})"


@dataclass(frozen=True, slots=True)
class BaselineMatch:
    """What the store holds for one test in the current environment."""

    status: MatchStatus
    test_id: str
    path: Path
    fingerprint: str  # of the current environment
    baseline: StoredBaseline | None = None  # set when status is FOUND
    others: tuple[OtherEnvironment, ...] = ()  # entries for other environments
    soft_differences: tuple[KeyDifference, ...] = ()  # FOUND: soft keys that changed since recording

    @property
    def found(self) -> bool:
        return self.status is MatchStatus.FOUND

    @property
    def measurement(self) -> Measurement | None:
        return None if self.baseline is None else self.baseline.measurement

    def describe(self) -> str:
        """One or two sentences for the report."""
        if self.status is MatchStatus.NO_BASELINE:
            return f"no baseline for this test yet; record one with `{REFRESH_COMMAND}`."
        if self.status is MatchStatus.OTHER_ENVIRONMENTS:
            others = "; ".join(o.describe() for o in self.others)
            return (f"no baseline for this environment (fingerprint {self.fingerprint}); recorded only for: "
                    f"{others}. Record one for this environment with `{REFRESH_COMMAND}`.")
        assert self.baseline is not None
        text = f"baseline recorded {self.baseline.recorded_at} by pytest-tfperf {self.baseline.written_by}"
        if self.soft_differences:
            text += "; compared although " + ", ".join(d.describe() for d in self.soft_differences) + " changed"
        return text + "."


@dataclass(frozen=True, slots=True)
class SaveReport:
    """What ``BaselineStore.save`` did; pairs are (test id, fingerprint)."""

    written: tuple[tuple[str, str], ...]
    not_improved: tuple[tuple[str, str], ...]  # kept the stored entry (only_improved)
    files: tuple[Path, ...]


@dataclass(frozen=True, slots=True)
class BaselineStore:
    """The baselines of a project: ``directory`` holds one ``*.json`` file per test."""

    directory: Path = DEFAULT_DIRECTORY
    max_samples: int = DEFAULT_MAX_SAMPLES

    def __post_init__(self) -> None:
        object.__setattr__(self, "directory", Path(self.directory))
        if self.max_samples < 1:
            raise ValueError(f"max_samples must be at least 1, got {self.max_samples}")

    def path_for(self, test_id: str) -> Path:
        return self.directory / baseline_file_name(test_id)

    # ------------------------------------------------------------------ reading

    def load(self, test_id: str, environment: Environment) -> BaselineMatch:
        """The baseline of ``test_id`` for ``environment``, or why there is none.

        Raises ``StorageError`` when the file exists but cannot be trusted.
        """
        path = self.path_for(test_id)
        fingerprint = environment.fingerprint
        if not path.exists():
            return BaselineMatch(MatchStatus.NO_BASELINE, test_id, path, fingerprint)
        entries = {fp: parsed for fp, (_, parsed) in self._read_entries(path, test_id).items()}
        others = tuple(
            OtherEnvironment(entry, entry.environment.differences(environment, hard=True))
            for fp, entry in sorted(entries.items()) if fp != fingerprint
        )
        if fingerprint not in entries:
            status = MatchStatus.OTHER_ENVIRONMENTS if entries else MatchStatus.NO_BASELINE
            return BaselineMatch(status, test_id, path, fingerprint, others=others)
        found = entries[fingerprint]
        return BaselineMatch(
            MatchStatus.FOUND, test_id, path, fingerprint, baseline=found, others=others,
            soft_differences=found.environment.differences(environment, hard=False),
        )

    def stored_test_ids(self) -> tuple[str, ...]:
        """Every test with a baseline file in the directory (to spot baselines of deleted tests)."""
        if not self.directory.is_dir():
            return ()
        ids = []
        for path in sorted(self.directory.glob("*.json")):
            data = load_document(path, SCHEMA, SCHEMA_VERSION, _MIGRATIONS, _FIX_HINT)
            ids.append(read_str(data.get("test_id"), Field(str(path), "test_id", _FIX_HINT)))
        return tuple(sorted(ids))

    def baselines_for(self, environment: Environment) -> list[StoredBaseline]:
        """Every readable baseline recorded for ``environment``; unreadable files are skipped here (the
        test they belong to fails with the reason when it is gated)."""
        if not self.directory.is_dir():
            return []
        out = []
        for path in sorted(self.directory.glob("*.json")):
            try:
                data = load_document(path, SCHEMA, SCHEMA_VERSION, _MIGRATIONS, _FIX_HINT)
                test_id = read_str(data.get("test_id"), Field(str(path), "test_id", _FIX_HINT))
                entry = self._read_entries(path, test_id).get(environment.fingerprint)
            except StorageError:
                continue
            if entry is not None:
                out.append(entry[1])
        return out

    def _read_entries(self, path: Path, test_id: str) -> dict[str, tuple[JsonDict, StoredBaseline]]:
        """Every entry of ``path`` (which must belong to ``test_id``), raw as stored and validated."""
        data = load_document(path, SCHEMA, SCHEMA_VERSION, _MIGRATIONS, _FIX_HINT)
        top = Field(str(path), "", _FIX_HINT)
        read_object(data, top, ("entries", "schema", "schema_version", "test_id"))
        stored_id = read_str(data["test_id"], top.key("test_id"))
        if stored_id != test_id:
            raise StorageError(
                f"{path}: holds the baseline of {stored_id!r}, not of {test_id!r} (copied or renamed by hand?); "
                f"move it back to {self.path_for(stored_id).name}, or delete it and record it again with "
                f"`{REFRESH_COMMAND}`.", path)
        entries = data["entries"]
        if not isinstance(entries, dict):
            raise top.key("entries").error("expected an object keyed by environment fingerprint")
        return {fp: (raw, _entry_from_dict(raw, test_id, fp, top.key("entries").key(fp)))
                for fp, raw in entries.items()}

    # ------------------------------------------------------------------ writing

    def save(
        self,
        measurements: Iterable[Measurement],
        environment: Environment,
        *,
        only_improved: bool = False,
        is_improvement: Callable[[Measurement, Measurement], bool] = _better_throughput,
        recorded_at: datetime | None = None,
        extra_runs: Mapping[str, Sequence[Measurement]] | None = None,
        git_commit: str = "",
        profiles: Mapping[str, Mapping[str, object]] | None = None,
    ) -> SaveReport:
        """Record ``measurements`` (taken in ``environment``) as baselines, keeping every entry they do not replace.

        With ``only_improved``, a stored entry is replaced only when
        ``is_improvement(new, stored)`` (default: higher median throughput).
        A later measurement of the same test wins over an earlier one.
        ``extra_runs[test_id]``: the same test measured in other processes of
        the same refresh; each becomes one more run of the baseline.
        ``profiles[test_id]``: the test's compact profile (``Profile.to_dict()``), stored in its entry.
        If any file to update cannot be read, nothing at all is written.
        """
        fingerprint = environment.fingerprint
        wanted: dict[str, Measurement] = {}
        for measurement in measurements:
            if not same_environment(measurement.environment_id, fingerprint):
                raise ValueError(f"{measurement.test_id}: measured in environment {measurement.environment_id} "
                                 f"but saved for environment {fingerprint}")
            wanted[measurement.test_id] = measurement
        if not wanted:
            return SaveReport((), (), ())
        self._make_directory()
        timestamp = utc_timestamp(recorded_at)
        version = package_version()
        lock = DirectoryLock(self.directory)
        try:
            lock.acquire()
        except OSError as exc:
            raise StorageError(f"cannot lock the baseline directory {self.directory}: {exc.strerror or exc}; "
                               f"make it readable and writable, or choose another baseline directory.",
                               self.directory) from None
        try:
            current: dict[str, dict[str, tuple[JsonDict, StoredBaseline]]] = {}
            problems: list[str] = []
            for test_id in sorted(wanted):
                path = self.path_for(test_id)
                try:
                    current[test_id] = self._read_entries(path, test_id) if path.exists() else {}
                except StorageError as exc:
                    problems.append(str(exc))
            if problems:
                raise StorageError("baselines not saved, nothing was written:\n" + "\n".join(problems),
                                   self.directory)
            written: list[tuple[str, str]] = []
            not_improved: list[tuple[str, str]] = []
            files: list[Path] = []
            for test_id, measurement in sorted(wanted.items()):
                old = current[test_id].get(fingerprint)
                if only_improved and old is not None and not is_improvement(measurement, old[1].measurement):
                    not_improved.append((test_id, fingerprint))
                    continue
                # Entries of other environments are rewritten exactly as they were read.
                entries = {fp: raw for fp, (raw, _) in current[test_id].items()}
                others = list((extra_runs or {}).get(test_id, ()))
                entries[fingerprint] = self._entry_to_dict(measurement, environment, timestamp, version,
                                                           others=others, git_commit=git_commit,
                                                           profile=(profiles or {}).get(test_id),
                                                           earlier=old[1].runs if old and test_id == CALIBRATION_ID
                                                           else ())
                path = self.path_for(test_id)
                with_profile = any(isinstance(e, dict) and "profile" in e for e in entries.values())
                document = {"entries": entries, "schema": SCHEMA,
                            "schema_version": SCHEMA_VERSION if with_profile else PLAIN_SCHEMA_VERSION,
                            "test_id": test_id}
                self._write(path, render_json(document), files)
                files.append(path)
                written.append((test_id, fingerprint))
        finally:
            lock.release()
        return SaveReport(tuple(written), tuple(not_improved), tuple(files))

    def _entry_to_dict(self, measurement: Measurement, environment: Environment, timestamp: str,
                       version: str, *, others: Sequence[Measurement] = (), git_commit: str = "",
                       profile: Mapping[str, object] | None = None,
                       earlier: Sequence[RunSummary] = ()) -> JsonDict:
        """``earlier``: runs of earlier refreshes kept after this one's (the calibration's, newest first)."""
        if not measurement.environment_id:
            measurement = replace(measurement, environment_id=environment.fingerprint)
        runs = [summarize(m, run_id=f"{timestamp}-{i + 1}", recorded_at=timestamp, kind=REFRESH,
                          git_commit=git_commit) for i, m in enumerate([measurement, *others])]
        runs += list(earlier)[:max(0, CALIBRATION_RUNS_KEPT - len(runs))]
        entry: JsonDict = {
            "environment": environment_to_dict(environment),
            "measurement": measurement_to_dict(measurement, max_samples=self.max_samples),
            "recorded_at": timestamp,
            "runs": [run_summary_to_dict(r) for r in runs],
            "written_by": version,
        }
        if profile is not None:
            entry["profile"] = dict(profile)
        return entry

    def _make_directory(self) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create the baseline directory {self.directory}: "
                               f"{exc.strerror or exc}; create it, make it writable, or choose another "
                               f"baseline directory.", self.directory) from None

    def _write(self, path: Path, text: str, done: list[Path]) -> None:
        try:
            atomic_write_text(path, text)
        except OSError as exc:
            already = f" (already written: {', '.join(p.name for p in done)})" if done else " (nothing was written)"
            raise StorageError(f"cannot write the baseline {path}: {exc.strerror or exc}{already}; make "
                               f"{self.directory} writable, or choose another baseline directory.", path) from None


def _entry_from_dict(raw: object, test_id: str, key: str, where: Field) -> StoredBaseline:
    data = read_object(raw, where, ("environment", "measurement", "recorded_at", "written_by"), ("runs", "profile"))
    if "profile" in data and not isinstance(data["profile"], dict):
        raise where.key("profile").error("expected an object (a compact profile)")
    environment = environment_from_dict(data["environment"], where.key("environment"))
    if environment.fingerprint != key:
        raise where.error(f"is filed under fingerprint {key!r} but its environment has fingerprint "
                          f"{environment.fingerprint!r}")
    measurement = measurement_from_dict(data["measurement"], where.key("measurement"))
    if measurement.test_id != test_id:
        raise where.key("measurement.test_id").error(f"is {measurement.test_id!r}, expected {test_id!r}")
    if measurement.environment_id not in ("", key):
        raise where.key("measurement.environment_id").error(f"is {measurement.environment_id!r}, expected {key!r}")
    recorded_at = read_str(data["recorded_at"], where.key("recorded_at"))
    if "runs" in data:
        raw_runs = read_list(data["runs"], where.key("runs"))
        if not raw_runs:
            raise where.key("runs").error("is empty; a baseline has at least the run of its measurement")
        runs = tuple(run_summary_from_dict(r, where.key("runs").index(i)) for i, r in enumerate(raw_runs))
    else:  # a version-1 entry: its measurement is its only run
        runs = (summarize(measurement, run_id=f"{recorded_at}-1", recorded_at=recorded_at, kind=REFRESH),)
    return StoredBaseline(
        test_id=test_id,
        environment=environment,
        measurement=measurement,
        recorded_at=recorded_at,
        written_by=read_str(data["written_by"], where.key("written_by")),
        runs=runs,
        profile=data.get("profile"),
    )

"""Several results files read as one run: the shards of a suite split over a CI matrix.

A long suite split with pytest-split (``--splits N --group i``) or a matrix of
``-k`` selections writes one ``--tfperf-json`` file per job. ``tfperf-report``
and ``tfperf-compare`` take them all and merge them here: every test comes from
exactly one shard and keeps its own environment, because shards may run on
different runners. A test found in two shards is refused: measured in two
environments its figures cannot be told apart, and measured twice in one it is
a misconfigured matrix (the same file passed twice is read once).
"""

from __future__ import annotations

import glob
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pytest_tfperf.model import Environment, Measurement
from pytest_tfperf.storage.results_json import ResultsDocument, load_results
from pytest_tfperf.storage.fields import StorageError


class ShardError(Exception):
    """The shards cannot be merged (a test in two of them, no file found); the message says which and why."""


@dataclass(frozen=True, slots=True)
class ShardedTest:
    """One test's entry, with the environment and file it came from."""

    test_id: str
    measurement: Measurement | None
    verdict: Mapping[str, Any] | None
    compared_with: str
    environment: Environment
    source: str  # the results file, for messages
    reference: Measurement | None = None  # --tfperf-against: the other version's measurement
    explanation: Mapping[str, Any] | None = None  # --tfperf-explain: where the time (or memory) went


@dataclass(frozen=True, slots=True)
class ShardedResults:
    """The merged run: tests keyed by id, each with its own environment."""

    tests: Mapping[str, ShardedTest]
    sources: tuple[str, ...]
    environments: tuple[Environment, ...]  # distinct, in order of first appearance
    created_at: tuple[str, ...] = ()  # of each shard
    effects: tuple[Mapping[str, Any], ...] = field(default=())

    @property
    def test_ids(self) -> tuple[str, ...]:
        return tuple(sorted(self.tests))

    @property
    def measurements(self) -> tuple[Measurement, ...]:
        return tuple(t.measurement for _, t in sorted(self.tests.items()) if t.measurement is not None)

    def measurement(self, test_id: str) -> Measurement | None:
        entry = self.tests.get(test_id)
        return None if entry is None else entry.measurement

    def verdict(self, test_id: str) -> Mapping[str, Any] | None:
        entry = self.tests.get(test_id)
        return None if entry is None else entry.verdict

    def environment_of(self, test_id: str) -> Environment:
        return self.tests[test_id].environment


def expand_paths(arguments: Iterable[str | Path]) -> list[Path]:
    """Files named on a command line: a file as is, a directory as its ``*.json``, a quoted glob expanded.

    CI artifact downloads put each shard's file in a directory of its own, so
    ``shards/`` or ``'shards/*/results.json'`` name them all.
    """
    out: list[Path] = []
    for argument in arguments:
        path = Path(argument)
        if path.is_dir():
            found = sorted(path.rglob("*.json"))
            if not found:
                raise ShardError(f"{path}: a directory without any .json results file")
            out += found
        elif not path.exists() and glob.has_magic(str(argument)):
            found = sorted(Path(p) for p in glob.glob(str(argument), recursive=True))
            if not found:
                raise ShardError(f"{argument}: no file matches this pattern")
            out += found
        else:
            out.append(path)
    unique: list[Path] = []
    seen: set[Path] = set()
    for path in out:
        key = path.resolve()
        if key not in seen:  # the same shard named twice (a file and its directory) is read once
            seen.add(key)
            unique.append(path)
    return unique


def merge_results(documents: Sequence[ResultsDocument]) -> ShardedResults:
    """Merge shards; raises ``ShardError`` for a test present in two of them."""
    if not documents:
        raise ShardError("no results file given")
    tests: dict[str, ShardedTest] = {}
    environments: dict[str, Environment] = {}
    effects: list[Mapping[str, Any]] = []
    for doc in documents:
        source = str(doc.path) if doc.path is not None else "this run"
        environments.setdefault(doc.environment.fingerprint, doc.environment)
        effects += doc.effects
        for test_id in doc.test_ids:
            entry = ShardedTest(test_id, doc.measurement(test_id), doc.verdict(test_id),
                                doc.compared_with.get(test_id, ""), doc.environment, source,
                                doc.references.get(test_id), doc.explanations.get(test_id))
            earlier = tests.get(test_id)
            if earlier is not None:
                raise ShardError(_duplicate(test_id, earlier, entry))
            tests[test_id] = entry
    sources = tuple(str(d.path) if d.path is not None else "this run" for d in documents)
    return ShardedResults(MappingProxyType(tests), sources,
                          tuple(environments.values()), tuple(d.created_at for d in documents), tuple(effects))


def _duplicate(test_id: str, first: ShardedTest, second: ShardedTest) -> str:
    a, b = first.environment.fingerprint, second.environment.fingerprint
    if a != b:
        return (f"{test_id} is in two shards measured in different environments ({first.source}: {a}, "
                f"{second.source}: {b}); one test's figures cannot mix environments: give each environment "
                f"its own report")
    return (f"{test_id} is in two shards ({first.source} and {second.source}): a test must run in exactly one "
            f"shard; check the matrix's -k selections or --splits/--group")


def load_shards(arguments: Iterable[str | Path]) -> ShardedResults:
    """Read and merge results files (files, directories or globs); raises ``StorageError`` or ``ShardError``."""
    paths = expand_paths(arguments)
    if not paths:
        raise ShardError("no results file given")
    documents = []
    for path in paths:
        if not path.exists():
            raise StorageError(f"{path}: no such file; pass the files written with --tfperf-json", path)
        documents.append(load_results(path))
    return merge_results(documents)

"""Whole JSON documents: written diff-friendly, read with their schema and version checked and migrated.

Every stored document (baselines, ``--tfperf-json`` results) is rendered by
``render_json`` and read back through ``load_document``; what each field holds
is ``serialization``'s, how a field is read is ``fields``'.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pytest_tfperf.storage.fields import (
    REFRESH_COMMAND,
    Field,
    JsonDict,
    StorageError,
    describe_value,
    type_name,
    write_float,
)

PACKAGE_NAME = "pytest-tfperf"


def package_version() -> str:
    """Version of the installed pytest-tfperf, recorded in every file it writes."""
    from importlib import metadata

    try:
        return metadata.version(PACKAGE_NAME)
    except metadata.PackageNotFoundError:
        return "unknown"


def utc_timestamp(moment: datetime | None = None) -> str:
    """``2025-11-25T22:04:05Z``: sortable as text, readable in a diff."""
    moment = datetime.now(timezone.utc) if moment is None else moment
    if moment.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware (use datetime.now(timezone.utc))")
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def render_json(document: object) -> str:
    """Diff-friendly JSON: sorted keys, 2-space indent, lists of plain values on one line.

    A round of samples, or the per-round peaks, is one line: a re-recorded
    baseline changes a few lines per round instead of thousands, and the
    structure stays readable in a pull request.
    """
    parts: list[str] = []
    _render(document, 0, parts)
    parts.append("\n")
    return "".join(parts)


def _scalar(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def _render(value: object, depth: int, out: list[str]) -> None:
    pad = "  " * (depth + 1)
    if isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        out.append("{\n")
        for i, key in enumerate(sorted(value)):
            if not isinstance(key, str):
                raise TypeError(f"JSON object keys must be strings, found {key!r}")
            out.append(f"{pad}{_scalar(key)}: ")
            _render(value[key], depth + 1, out)
            out.append(",\n" if i < len(value) - 1 else "\n")
        out.append("  " * depth + "}")
    elif isinstance(value, (list, tuple)):
        if all(not isinstance(v, (dict, list, tuple)) for v in value):
            out.append("[" + ", ".join(_scalar(v) for v in value) + "]")
            return
        out.append("[\n")
        for i, item in enumerate(value):
            out.append(pad)
            _render(item, depth + 1, out)
            out.append(",\n" if i < len(value) - 1 else "\n")
        out.append("  " * depth + "]")
    else:
        out.append(_scalar(value))


def to_json_value(value: object, where: str = "value") -> Any:
    """A copy of ``value`` made of JSON types only (for dicts handed over by other modules, e.g. verdicts).

    Tuples become lists, enums their value, frozen dataclasses dicts of their
    fields, non-finite floats strings; anything else that JSON cannot hold
    raises ``TypeError`` naming where it is.
    """
    if isinstance(value, enum.Enum):
        return to_json_value(value.value, where)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json_value(getattr(value, f.name), f"{where}.{f.name}") for f in dataclasses.fields(value)}
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)):
        return write_float(value)
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{where}: keys must be strings, found {key!r}")
            out[key] = to_json_value(item, f"{where}.{key}")
        return out
    if isinstance(value, (list, tuple)):
        return [to_json_value(item, f"{where}[{i}]") for i, item in enumerate(value)]
    raise TypeError(f"{where}: {type(value).__name__} cannot be stored as JSON")


# Reads a version-checked document; each schema passes its own migrations.
Migration = Callable[[JsonDict], JsonDict]


def load_document(
    path: Path,
    schema: str,
    schema_version: int,
    migrations: Mapping[int, Migration],
    hint: str,
    *,
    regenerate: str = REFRESH_COMMAND,
) -> JsonDict:
    """Parse ``path`` and check its schema name and version, upgrading old versions through ``migrations``.

    ``migrations[v]`` turns a version-``v`` document into a version-``v + 1`` one.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise StorageError(f"{path}: no such file", path) from None
    except UnicodeDecodeError as exc:
        raise StorageError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}): the file is corrupted; "
                           f"{hint}.", path) from None
    except OSError as exc:
        raise StorageError(f"{path}: cannot be read ({exc.strerror or exc}); check its permissions.", path) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        state = "is empty" if not text.strip() else f"is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        raise StorageError(f"{path}: {state}: the file is truncated or corrupted; {hint}.", path) from None
    top = Field(str(path), "", hint)
    if not isinstance(data, dict):
        raise top.error(f"expected a JSON object at the top, found {type_name(data)}")
    found_schema = data.get("schema")
    if found_schema != schema:
        raise StorageError(f"{path}: not a {schema} file (its 'schema' is {describe_value(found_schema)}, expected "
                           f"{schema!r}); point pytest-tfperf at the right file.", path)
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise top.key("schema_version").error(f"expected a positive integer, found {describe_value(version)}")
    if version > schema_version:
        written_by = data.get("written_by", "a newer pytest-tfperf")
        raise StorageError(
            f"{path}: {schema} schema version {version} was written by a newer pytest-tfperf "
            f"({describe_value(written_by)}); this pytest-tfperf ({package_version()}) reads versions up to "
            f"{schema_version}. Upgrade pytest-tfperf, or regenerate the file with `{regenerate}`.", path)
    while version < schema_version:
        if version not in migrations:
            raise StorageError(f"{path}: {schema} schema version {version} is no longer supported; "
                               f"regenerate the file with `{regenerate}`.", path)
        data = migrations[version](data)
        version += 1
        data["schema_version"] = version
    return data

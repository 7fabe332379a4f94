"""A stored document read field by field: each value typed and checked, each error naming its place.

Loading is strict: anything unexpected raises ``StorageError`` naming the file,
the field (``entries.<fingerprint>.measurement.timings.rounds_ns[2]``) and
what to do, because a baseline misread silently is a gate that lies. Floats
that JSON cannot hold (NaN, +/-inf) are stored as the strings ``"nan"``,
``"inf"`` and ``"-inf"``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JsonDict = dict[str, Any]

REFRESH_COMMAND = "pytest --tfperf --tfperf-update"  # what regenerates a stored file


class StorageError(Exception):
    """A baseline, results or history file cannot be read or written.

    The message says which file, which field, what is wrong and what to do.
    """

    def __init__(self, message: str, path: str | Path | None = None) -> None:
        super().__init__(message)
        self.path = None if path is None else Path(path)


@dataclass(frozen=True, slots=True)
class Field:
    """Where a value sits: the file it came from and its path inside the document."""

    source: str
    path: str
    hint: str = f"fix the file, or delete it and record it again with `{REFRESH_COMMAND}`"

    def key(self, name: str) -> Field:
        return Field(self.source, f"{self.path}.{name}" if self.path else name, self.hint)

    def index(self, i: int) -> Field:
        return Field(self.source, f"{self.path}[{i}]", self.hint)

    def error(self, problem: str) -> StorageError:
        where = f"field '{self.path}'" if self.path else "document"
        return StorageError(f"{self.source}: {where}: {problem}; {self.hint}.", self.source)


def describe_value(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."


def type_name(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def read_object(value: object, where: Field, required: Sequence[str], optional: Sequence[str] = ()) -> JsonDict:
    """An object with exactly these keys (unknown keys are refused: they mean a newer or hand-edited file)."""
    if not isinstance(value, dict):
        raise where.error(f"expected an object, found {type_name(value)}")
    missing = [k for k in required if k not in value]
    if missing:
        raise where.error(f"missing key(s) {', '.join(repr(k) for k in missing)}")
    unknown = sorted(set(value) - set(required) - set(optional))
    if unknown:
        raise where.error(f"unknown key(s) {', '.join(repr(k) for k in unknown)}")
    return value


def read_str(value: object, where: Field, *, non_empty: bool = True) -> str:
    if not isinstance(value, str):
        raise where.error(f"expected a string, found {type_name(value)} {describe_value(value)}")
    if non_empty and not value:
        raise where.error("expected a non-empty string")
    return value


def read_optional_str(value: object, where: Field) -> str | None:
    return None if value is None else read_str(value, where)


def read_int(value: object, where: Field, *, minimum: int | None = 0) -> int:
    # bool is an int to Python but never a count or a byte figure.
    if not isinstance(value, int) or isinstance(value, bool):
        raise where.error(f"expected an integer, found {type_name(value)} {describe_value(value)}")
    if minimum is not None and value < minimum:
        raise where.error(f"expected an integer >= {minimum}, found {value}")
    return value


def read_optional_int(value: object, where: Field, *, minimum: int | None = 0) -> int | None:
    return None if value is None else read_int(value, where, minimum=minimum)


_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def read_float(value: object, where: Field) -> float:
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise where.error(f"expected a number, found {type_name(value)} {describe_value(value)}")
    return float(value)


def write_float(value: float) -> float | int | str:
    """A float as JSON can hold it: non-finite values become ``"nan"``/``"inf"``/``"-inf"``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def read_list(value: object, where: Field) -> list[Any]:
    if not isinstance(value, list):
        raise where.error(f"expected a list, found {type_name(value)} {describe_value(value)}")
    return value


def read_str_map(value: object, where: Field) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        raise where.error(f"expected an object, found {type_name(value)}")
    return tuple(sorted((k, read_str(v, where.key(k), non_empty=False)) for k, v in value.items()))


def read_float_map(value: object, where: Field) -> tuple[tuple[str, float], ...]:
    if not isinstance(value, dict):
        raise where.error(f"expected an object, found {type_name(value)}")
    return tuple(sorted((k, read_float(v, where.key(k))) for k, v in value.items()))

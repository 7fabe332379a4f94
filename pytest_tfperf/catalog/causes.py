"""What each catalog entry's explanation should name: the cause of the anti-pattern's cost, as a profile sees it.

``--tfperf-explain`` splits a measured change over the ops, layers and tf.data stages that moved
(``profiling.attribution``). For most entries the anti-pattern's cost is an op or a stage, and the
explanation's top cause should name it; ``pattern`` matches the cause's label (or, for the consumer's wait,
the stage named behind it). Where the cost is not an op the profile records, ``says`` is what the
explanation names instead. ``benchmarks/catalog_causes.py`` measures what it does name; docs/catalog.md
shows both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Cause:
    pattern: str  # a regular expression over the top cause's label (and the stage behind a wait)
    says: str  # the cause in words, as docs/catalog.md states it


CAUSES: dict[str, Cause] = {}


def top_cause(explanation: Mapping[str, Any]) -> str:
    """The first cause listed, in words ("RandomStandardNormal outside layers grew +3.1 ms"), or why none."""
    causes = explanation.get("causes") or []
    if not causes:
        lines = explanation.get("lines") or []
        return lines[1].strip() if len(lines) > 1 else (lines[0] if lines else "no explanation")
    top = causes[0]
    text = f"{top['label']} {top['how']} {top['delta_ms']:+.2f} ms"
    paced = explanation.get("paced_by")
    if top.get("kind") == "input wait" and paced:
        mode = "parallel" if paced.get("current_parallel") else "sequential"
        text += f", behind it {paced['label']} ({mode})"
    return text


def names_its_cause(key: str, explanation: Mapping[str, Any]) -> bool:
    """Whether the top cause (with the stage behind a wait) matches what the entry says its cause is."""
    cause = CAUSES.get(key)
    return cause is not None and re.search(cause.pattern, top_cause(explanation)) is not None

"""The catalog's effects in words: one line per comparison, from their stored (``to_dict``) form.

Pure and free of TensorFlow and of the catalog's own modules: the terminal
summary of a catalog run, ``tfperf-report`` and the HTML page all read effects
as the results JSON holds them (plain dicts; non-finite floats as ``"inf"``),
so a results file written on another machine prints the same lines.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# metric -> (what the effect is, whether it is a ratio (drawn on a log axis), the margin in words)
_KINDS: dict[str, tuple[str, bool, str]] = {
    "throughput": ("fix/anti throughput", True, ">= {m:g}x"),
    "tf_allocator_peak": ("anti/fix memory peak", True, ">= {m:g}x"),
    "device_memory_reserved": ("anti/fix device memory", True, ">= {m:g}x"),
    "memory_growth": ("anti-fix memory growth", False, ">= {m:g}/iter"),
    "traces": ("anti-fix traces per call", False, ">= {m:g}"),
    "first_non_finite_iteration": ("anti's loss NaN at iteration", False, "<= {m:g}, fix never"),
}


def as_float(value: object) -> float | None:
    """A number as the results JSON stores it (``"inf"``, ``"nan"`` included), or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


@dataclass(frozen=True, slots=True)
class EffectRow:
    """One comparison, read tolerantly from its stored dict (missing fields become None or "")."""

    scenario: str
    title: str
    anti: str
    fix: str
    metric: str
    value: float | None
    spread: tuple[float, float] | None
    min_effect: float | None
    gated: bool
    passed: bool
    detail: str
    anti_test: str
    fix_test: str
    not_judged: str = ""  # why the catalog did not hold a failure against the fix ("busy machine")

    @property
    def ratio(self) -> bool:
        """Whether the effect is a ratio (1 = no effect), so that a log axis suits it."""
        return _KINDS.get(self.metric, ("", False, ""))[1]

    @property
    def what(self) -> str:
        return _KINDS.get(self.metric, (self.metric, False, ""))[0]

    @property
    def outcome(self) -> str:
        if self.value is None:
            return "not measured"
        if not self.gated:
            return "reported"
        if not self.passed and self.not_judged:
            return f"not judged: {self.not_judged}"
        return "pass" if self.passed else "FAIL"

    def value_text(self) -> str:
        return _number(self.value, self.ratio, self.metric)

    def spread_text(self) -> str:
        if self.spread is None:
            return "-"
        low, high = self.spread
        return f"{_number(low, self.ratio, '')}..{_number(high, self.ratio, '')}"

    def margin_text(self) -> str:
        if self.min_effect is None:
            return "-"
        words = _KINDS.get(self.metric, ("", False, "{m:g}"))[2].format(m=self.min_effect)
        return words if self.gated else f"({words}, not gated)"


def _number(value: float | None, ratio: bool, metric: str) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "never" if metric == "first_non_finite_iteration" else "inf"
    if ratio:
        return f"{value:.3g}x"
    return f"{value:.3g}"


def effect_row(raw: Mapping[str, Any]) -> EffectRow:
    spread = raw.get("spread")
    pair: tuple[float, float] | None = None
    if isinstance(spread, (list, tuple)) and len(spread) == 2:
        low, high = as_float(spread[0]), as_float(spread[1])
        if low is not None and high is not None:
            pair = (low, high)
    return EffectRow(
        scenario=str(raw.get("scenario", "")), title=str(raw.get("title", "")), anti=str(raw.get("anti", "")),
        fix=str(raw.get("fix", "")), metric=str(raw.get("metric", "")), value=as_float(raw.get("value")),
        spread=pair, min_effect=as_float(raw.get("min_effect")), gated=bool(raw.get("gated", True)),
        passed=bool(raw.get("passed", False)), detail=str(raw.get("detail", "")),
        anti_test=str(raw.get("anti_test", "")), fix_test=str(raw.get("fix_test", "")),
        not_judged=str(raw.get("not_judged") or ""),
    )


def effect_lines(effects: Sequence[Mapping[str, Any]]) -> list[str]:
    """Aligned lines: scenario, fix vs anti, what the effect is, its value, spread over rounds, margin, outcome."""
    rows = [effect_row(e) for e in effects]
    if not rows:
        return []
    header = ("scenario", "fix vs anti", "effect", "value", "rounds", "gate", "result")
    body = [(r.scenario, f"{r.fix} vs {r.anti}", r.what, r.value_text(), r.spread_text(), r.margin_text(), r.outcome)
            for r in rows]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in (3, 4) else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    lines = [fmt(header).rstrip()]
    lines += [fmt(b).rstrip() for b in body]
    failed = sum(r.outcome == "FAIL" for r in rows)
    gated = sum(r.gated and r.value is not None and not r.outcome.startswith("not judged") for r in rows)
    lines.append(f"{gated - failed} of {gated} gated comparison(s) beat their margin"
                 + (f"; {failed} did not" if failed else "")
                 + "; rounds: lowest..highest per-round value, where rounds are paired")
    return lines

"""Memory growth per iteration: the slope of memory in use over iterations.

A workload that keeps what it no longer needs (a list of tensors that grows,
a variable created every step) shows a steady slope of memory in use; one that
releases it shows none. The ``GrowthLedger`` reads memory in use after every
call of every variant it wraps. Because variants run interleaved, one
variant's readings come in segments, with the other variants' growth between
them; the slope is therefore fitted within segments and pooled (the other
variants' jumps between segments never count), and the first segment of each
variant, its warm-up, is left out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def pooled_slope(segments: Sequence[Sequence[float]]) -> float | None:
    """Least-squares slope (per step) of values over their index, fitted within each segment and pooled.

    Each segment gets its own intercept; segments shorter than two points carry
    no slope. ``None`` when no segment has two points.
    """
    num = 0.0
    den = 0.0
    for seg in segments:
        n = len(seg)
        if n < 2:
            continue
        mean_x = (n - 1) / 2.0
        mean_y = sum(seg) / n
        for i, y in enumerate(seg):
            dx = i - mean_x
            num += dx * (y - mean_y)
            den += dx * dx
    if den == 0.0:
        return None
    return num / den


class GrowthLedger:
    """Records memory in use after each call of each wrapped variant, in segments."""

    def __init__(self, bytes_in_use: Callable[[], int]) -> None:
        self._bytes_in_use = bytes_in_use
        self._segments: dict[str, list[list[int]]] = {}
        self._last: str | None = None

    def wrap(self, name: str, fn: Callable[[], object]) -> Callable[[], object]:
        self._segments.setdefault(name, [])

        def recorded() -> object:
            out = fn()
            self.record(name, self._bytes_in_use())
            return out

        return recorded

    def record(self, name: str, value: int) -> None:
        segments = self._segments.setdefault(name, [])
        if self._last != name or not segments:
            segments.append([])
        segments[-1].append(value)
        self._last = name

    def segments(self, name: str) -> list[list[int]]:
        return [list(s) for s in self._segments.get(name, [])]

    def slope_bytes_per_iteration(self, name: str) -> float | None:
        """Growth of ``name`` per call, leaving out its first segment (the warm-up)."""
        return pooled_slope(self._segments.get(name, [])[1:])

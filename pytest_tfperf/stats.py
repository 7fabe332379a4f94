"""Pure statistics over sequences of numbers: no pytest, no TensorFlow, no I/O."""

from __future__ import annotations

import math
from collections.abc import Sequence


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of an empty sequence")
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    if n % 2:
        return float(ordered[mid])
    return (ordered[mid - 1] + ordered[mid]) / 2.0


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, ``q`` in [0, 100] (numpy's default method)."""
    if not values:
        raise ValueError("percentile of an empty sequence")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    if lo == hi:
        return float(ordered[lo])
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def mad(values: Sequence[float]) -> float:
    """Median absolute deviation (unscaled)."""
    med = median(values)
    return median([abs(v - med) for v in values])


def robust_cv(values: Sequence[float]) -> float:
    """1.4826 * MAD / median: the CV a normal distribution would have, robust to outliers."""
    med = median(values)
    if med == 0:
        return 0.0
    return 1.4826 * mad(values) / abs(med)

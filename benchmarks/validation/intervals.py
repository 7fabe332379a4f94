"""The Wilson interval the validation studies report their hit rates with; the plugin itself reports none."""

from __future__ import annotations

import math

from pytest_tfperf.stats import normal_quantile


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial rate (well behaved at 0 and n, unlike the Wald interval)."""
    if trials <= 0:
        raise ValueError(f"the Wilson interval needs at least one trial, got {trials}")
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must be between 0 and trials ({trials}), got {successes}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1 (exclusive), got {confidence}")
    z = normal_quantile(0.5 + confidence / 2.0)
    p = successes / trials
    denom = 1.0 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)

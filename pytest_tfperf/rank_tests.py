"""Rank tests: Mann-Whitney's two-sample test and Wilcoxon's signed-rank test, and the samples they need.

Pure statistics, like ``stats``, apart from it because the gates' throughput
rules rest on these two tests: exact for the usual handful of rounds, and
unmoved by one half-speed round. Their p-values have a floor set by the sample
size alone (``fewest_samples`` says how many samples reach a level).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pytest_tfperf.stats import normal_sf


# Mann-Whitney's two-sample rank test.


@dataclass(frozen=True, slots=True)
class RankTest:
    """One-sided Mann-Whitney U test of "``x`` tends to be larger than ``y``".

    ``min_p_value`` is the smallest p-value these sample sizes can produce at
    all: when it exceeds the significance level, the test cannot decide, however
    large the difference (asv's hidden pitfall, made explicit here).
    """

    u: float  # number of (x, y) pairs with x > y, ties counting one half
    p_value: float
    min_p_value: float
    exact: bool
    n_x: int
    n_y: int


_EXACT_LIMIT = 60  # both samples at most this long and no ties: exact null distribution


def mann_whitney_greater(x: Sequence[float], y: Sequence[float]) -> RankTest:
    """One-sided Mann-Whitney U test, alternative: ``x`` is stochastically greater than ``y``.

    Exact null distribution (Gaussian binomial coefficients) when there are no
    ties and both samples are short, which is the usual case for round-level
    statistics; otherwise the normal approximation with tie correction and
    continuity correction.
    """
    n_x, n_y = len(x), len(y)
    if n_x == 0 or n_y == 0:
        raise ValueError(f"the rank test needs values on both sides, got {n_x} and {n_y}")
    pooled = sorted([(v, 0) for v in x] + [(v, 1) for v in y])
    n = n_x + n_y
    ranks = [0.0] * n
    tie_term = 0.0
    i = 0
    while i < n:
        j = i
        while j + 1 < n and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        avg = (i + j) / 2.0 + 1.0
        for k in range(i, j + 1):
            ranks[k] = avg
        t = j - i + 1
        tie_term += t**3 - t
        i = j + 1
    rank_sum_x = sum(r for r, (_, side) in zip(ranks, pooled) if side == 0)
    u = rank_sum_x - n_x * (n_x + 1) / 2.0
    if tie_term == 0 and n_x <= _EXACT_LIMIT and n_y <= _EXACT_LIMIT:
        counts = _u_null_counts(n_x, n_y)
        total = math.comb(n, n_x)
        at_least = sum(counts[int(round(u)) :])
        return RankTest(u=u, p_value=at_least / total, min_p_value=1.0 / total, exact=True, n_x=n_x, n_y=n_y)
    mean_u = n_x * n_y / 2.0
    var_u = n_x * n_y / 12.0 * ((n + 1) - tie_term / (n * (n - 1))) if n > 1 else 0.0
    best = normal_sf((n_x * n_y - mean_u - 0.5) / math.sqrt(n_x * n_y * (n + 1) / 12.0))
    if var_u <= 0:
        # Every value is identical: no evidence in either direction.
        return RankTest(u=u, p_value=1.0, min_p_value=best, exact=False, n_x=n_x, n_y=n_y)
    z = (u - mean_u - 0.5) / math.sqrt(var_u)
    return RankTest(u=u, p_value=min(1.0, normal_sf(z)), min_p_value=best, exact=False, n_x=n_x, n_y=n_y)


def _u_null_counts(n_x: int, n_y: int) -> list[int]:
    """Number of arrangements giving U = 0, 1, ..., n_x*n_y: the coefficients of the
    Gaussian binomial [n_x + n_y choose n_x]_q = prod_{i=1..n_x} (1 - q^(n_y+i)) / (1 - q^i)."""
    size = n_x * n_y + 1
    poly = [0] * size
    poly[0] = 1
    for i in range(1, n_x + 1):
        step = n_y + i
        for k in range(size - 1, step - 1, -1):  # multiply by (1 - q^step)
            poly[k] -= poly[k - step]
        for k in range(i, size):  # divide by (1 - q^i): exact, the quotient is a polynomial
            poly[k] += poly[k - i]
    return poly


# ---------------------------------------------------------------------------
# Power, precision, rates.


def fewest_samples(alpha: float, smallest_p: Callable[[int], float]) -> int:
    """The fewest samples (per side, or pairs) for which a rank test's smallest possible p reaches ``alpha``.

    A rank test's p-value has a floor set by the sample size alone; below
    this many samples it cannot decide at that level, however large the change.
    """
    n = 1
    while smallest_p(n) > alpha:
        n += 1
    return n


def rank_sum_smallest_p(n: int) -> float:
    """The smallest one-sided p of the exact Mann-Whitney test with ``n`` values on each side."""
    return 1.0 / math.comb(2 * n, n)

"""Pure statistics over sequences of numbers: no pytest, no TensorFlow, no I/O.

numpy is imported lazily, only by the bootstrap (the one place where a vectorised
loop matters); everything else is plain Python so the core stays importable and
testable without it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any


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
    return sorted_percentile(sorted(values), q)


def sorted_percentile(ordered: Sequence[float], q: float) -> float:
    """``percentile`` of data already sorted (linear interpolation; q=50 is the median)."""
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


def sorted_mad(ordered: Sequence[float], median: float) -> float:
    """``mad`` of sorted data without building and sorting the deviations.

    Deviations below the median, read leftwards, and above it, read rightwards,
    are two ascending sequences; their k-th smallest element comes from a
    binary search over how many to take from each.
    """
    split = bisect.bisect_left(ordered, median)
    n_low, n_high = split, len(ordered) - split

    def low(i: int) -> float:
        return median - ordered[split - 1 - i]

    def high(j: int) -> float:
        return ordered[split + j] - median

    def kth(k: int) -> float:  # 0-based
        lo, hi = max(0, k + 1 - n_high), min(k + 1, n_low)
        while True:
            i = (lo + hi) // 2  # taken from the low side; j = k + 1 - i from the high side
            j = k + 1 - i
            if i < n_low and j > 0 and high(j - 1) > low(i):
                lo = i + 1
            elif i > 0 and j < n_high and low(i - 1) > high(j):
                hi = i - 1
            else:
                return max(low(i - 1) if i > 0 else -math.inf, high(j - 1) if j > 0 else -math.inf)

    n = len(ordered)
    if n % 2:
        return kth(n // 2)
    return (kth(n // 2 - 1) + kth(n // 2)) / 2.0


def robust_cv(values: Sequence[float]) -> float:
    """1.4826 * MAD / median: the CV a normal distribution would have, robust to outliers."""
    med = median(values)
    if med == 0:
        return 0.0
    return 1.4826 * mad(values) / abs(med)


# ---------------------------------------------------------------------------
# Distributions. scipy is not a dependency, so the two quantile functions the
# gate needs are written here: the normal one comes from the standard library,
# Student's t from the regularised incomplete beta function.


def normal_quantile(p: float) -> float:
    """Inverse CDF of the standard normal distribution."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"normal_quantile needs 0 < p < 1, got {p}")
    return NormalDist().inv_cdf(p)


def normal_sf(z: float) -> float:
    """Upper tail probability P(Z > z) of the standard normal distribution."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def _betacf(a: float, b: float, x: float) -> float:
    # Continued fraction of the incomplete beta function (modified Lentz).
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the CDF of the Beta(a, b) distribution at ``x``."""
    if a <= 0 or b <= 0:
        raise ValueError(f"incomplete beta needs a > 0 and b > 0, got a={a}, b={b}")
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    # The continued fraction converges fast only on its own side of the mean.
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """CDF of Student's t distribution with ``df`` (possibly fractional) degrees of freedom."""
    if df <= 0:
        raise ValueError(f"t distribution needs df > 0, got {df}")
    if math.isinf(df):
        return 1.0 - normal_sf(t)
    tail = 0.5 * regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """Inverse CDF of Student's t distribution (bisection: slow-ish but exact to 1e-10)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_quantile needs 0 < p < 1, got {p}")
    if df <= 0:
        raise ValueError(f"t distribution needs df > 0, got {df}")
    if math.isinf(df):
        return normal_quantile(p)
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


# ---------------------------------------------------------------------------
# Block bootstrap of a ratio of medians.


@dataclass(frozen=True, slots=True)
class RatioInterval:
    """A ratio of medians ``numerator / denominator`` with a bootstrap confidence interval."""

    estimate: float
    low: float
    high: float
    confidence: float
    resamples: int
    numerator_blocks: int
    denominator_blocks: int


def bootstrap_median_ratio(
    numerator_blocks: Sequence[Sequence[float]],
    denominator_blocks: Sequence[Sequence[float]],
    *,
    confidence: float = 0.99,
    resamples: int = 2000,
    seed: int = 0,
) -> RatioInterval:
    """Percentile-bootstrap CI of ``median(all numerator values) / median(all denominator values)``.

    Each side is resampled by whole blocks (rounds), with replacement, never by
    single values: TensorFlow's slow episodes (thread-pool stalls, half-speed
    stretches) last longer than one iteration, so iterations within a round are
    correlated and an iteration-level bootstrap would give a CI that is far too
    narrow. With few blocks the interval is still somewhat optimistic (the
    bootstrap cannot see more between-round variation than the rounds showed),
    which is why the gate takes its significance from a rank test instead and
    uses this interval for reporting and for borderline detection.

    Deterministic for a given ``seed``.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1 (exclusive), got {confidence}")
    if resamples < 100:
        raise ValueError(f"use at least 100 bootstrap resamples, got {resamples}")
    num = _checked_blocks(numerator_blocks, "numerator")
    den = _checked_blocks(denominator_blocks, "denominator")
    den_median = median([v for block in den for v in block])
    if den_median == 0:
        raise ValueError("the denominator's median is 0: a ratio of medians is undefined")
    estimate = median([v for block in num for v in block]) / den_median

    import numpy as np

    rng = np.random.default_rng(seed)
    num_medians = _block_bootstrap_medians(num, resamples, rng)
    den_medians = _block_bootstrap_medians(den, resamples, rng)
    with np.errstate(divide="ignore"):
        ratios = num_medians / den_medians
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(ratios, [tail, 1.0 - tail])
    return RatioInterval(
        estimate=float(estimate),
        low=float(min(low, estimate)),
        high=float(max(high, estimate)),
        confidence=confidence,
        resamples=resamples,
        numerator_blocks=len(num),
        denominator_blocks=len(den),
    )


def _checked_blocks(blocks: Sequence[Sequence[float]], side: str) -> list[Sequence[float]]:
    out = [b for b in blocks]
    if not out:
        raise ValueError(f"the {side} has no blocks (rounds) to resample")
    for i, block in enumerate(out):
        if len(block) == 0:
            raise ValueError(f"block {i} of the {side} is empty: every round needs at least one value")
    return out


def _block_bootstrap_medians(blocks: Sequence[Sequence[float]], resamples: int, rng: Any) -> Any:
    """Median of the union of ``len(blocks)`` blocks drawn with replacement, ``resamples`` times.

    Vectorised without materialising the resampled unions: the median of a
    union of blocks always lies between the smallest lower-middle value and the
    largest upper-middle value of the blocks, so only the values in that window
    are candidates; a resample is a vector of block multiplicities, and the
    cumulative count of each candidate is a weighted sum of per-block counts.
    """
    import numpy as np

    n_blocks = len(blocks)
    arrays = [np.sort(np.asarray(b, dtype=float)) for b in blocks]
    lower_mid = min(a[(len(a) - 1) // 2] for a in arrays)
    upper_mid = max(a[len(a) // 2] for a in arrays)
    below = np.array([np.searchsorted(a, lower_mid, side="left") for a in arrays], dtype=float)
    window_parts = [a[(a >= lower_mid) & (a <= upper_mid)] for a in arrays]
    values = np.concatenate(window_parts)
    labels = np.concatenate([np.full(len(p), i) for i, p in enumerate(window_parts)])
    order = np.argsort(values, kind="stable")
    values, labels = values[order], labels[order]
    # cum_by_block[r, j]: values of block r that are <= values[j] (counting those below the window)
    indicator = np.zeros((n_blocks, len(values)))
    indicator[labels, np.arange(len(values))] = 1.0
    cum_by_block = np.cumsum(indicator, axis=1) + below[:, None]

    counts = rng.multinomial(n_blocks, np.full(n_blocks, 1.0 / n_blocks), size=resamples)
    # Few rounds allow few distinct resamples (126 for 5 rounds): compute each once.
    unique, inverse = np.unique(counts, axis=0, return_inverse=True)
    unique = unique.astype(float)
    # Broadcast multiply-adds rather than ``unique @ cum_by_block``: one dimension is
    # tiny, and BLAS threads spin badly on a busy 2-core machine.
    cum = np.zeros((len(unique), len(values)))
    for r in range(n_blocks):
        cum += unique[:, r, None] * cum_by_block[r]
    total = (unique * np.array([len(a) for a in arrays], dtype=float)).sum(axis=1)
    k_low = np.floor((total + 1.0) / 2.0)  # 1-based positions of the two middle values
    k_high = np.floor(total / 2.0) + 1.0
    i_low = np.argmax(cum >= k_low[:, None], axis=1)
    i_high = np.argmax(cum >= k_high[:, None], axis=1)
    medians = (values[i_low] + values[i_high]) / 2.0
    return medians[np.asarray(inverse).reshape(-1)]


# ---------------------------------------------------------------------------
def minimum_detectable_effect(
    standard_error: float,
    *,
    alpha: float,
    power: float,
    df: float = math.inf,
    threshold: float = 0.0,
) -> float:
    """Smallest true effect detected with probability ``power`` by a rule that needs
    both significance at level ``alpha`` (one-sided) and an estimate above ``threshold``.

    Normal-theory (Student's t with ``df`` for the significance part):
    ``max(threshold + z_power * se, (t_{1-alpha, df} + z_power) * se)``. Returns
    ``inf`` when the standard error is infinite (nothing can be detected).
    """
    if not 0.0 < alpha < 1.0 or not 0.0 < power < 1.0:
        raise ValueError(f"alpha and power must be between 0 and 1, got alpha={alpha}, power={power}")
    if standard_error < 0 or math.isnan(standard_error):
        raise ValueError(f"standard error must be >= 0, got {standard_error}")
    if math.isinf(standard_error):
        return math.inf
    z_power = normal_quantile(power)
    critical = t_quantile(1.0 - alpha, df)
    return max(threshold + z_power * standard_error, (critical + z_power) * standard_error)


def welch_standard_error(sd_a: float, n_a: int, sd_b: float, n_b: int) -> tuple[float, float]:
    """Standard error of a difference of two means and its Welch-Satterthwaite degrees of freedom.

    A side with fewer than 2 values has no variance estimate: the error is ``inf``.
    """
    if n_a < 2 or n_b < 2:
        return math.inf, 1.0
    va, vb = sd_a * sd_a / n_a, sd_b * sd_b / n_b
    se = math.sqrt(va + vb)
    denominator = (va * va / (n_a - 1) if va else 0.0) + (vb * vb / (n_b - 1) if vb else 0.0)
    df = (va + vb) ** 2 / denominator if denominator > 0 else float(n_a + n_b - 2)
    return se, df


def mean(values: Sequence[float]) -> float:
    """The arithmetic mean, summed exactly (``math.fsum``); 0 for no values (a profile without windows)."""
    return math.fsum(values) / len(values) if values else 0.0


def variance(values: Sequence[float]) -> float:
    """Sample variance (n - 1 in the denominator); 0 for fewer than two values, which have no spread to read."""
    if len(values) < 2:
        return 0.0
    centre = mean(values)
    return math.fsum((v - centre) ** 2 for v in values) / (len(values) - 1)


def stdev(values: Sequence[float]) -> float:
    """Sample standard deviation (n - 1 in the denominator); 0 for a single value."""
    if not values:
        raise ValueError("standard deviation of an empty sequence")
    return math.sqrt(variance(values))


# ---------------------------------------------------------------------------
# Least squares.


@dataclass(frozen=True, slots=True)
class LinearFit:
    """Ordinary least-squares line ``y = intercept + slope * x``.

    ``slope_stderr`` is ``inf`` with only two points (no residual degrees of
    freedom). ``r_squared`` is 1.0 when the ys are constant and fitted exactly.
    """

    slope: float
    intercept: float
    slope_stderr: float
    r_squared: float
    n: int

    def predict(self, x: float) -> float:
        return self.intercept + self.slope * x


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> LinearFit:
    """Least-squares slope with its standard error and R^2 (memory-growth diagnostics)."""
    n = len(xs)
    if n != len(ys):
        raise ValueError(f"linear_fit needs as many xs as ys, got {n} and {len(ys)}")
    if n < 2:
        raise ValueError(f"linear_fit needs at least 2 points, got {n}")
    mean_x = math.fsum(xs) / n
    mean_y = math.fsum(ys) / n
    sxx = math.fsum((x - mean_x) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("linear_fit needs at least two different x values (all xs are equal)")
    sxy = math.fsum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys))
    syy = math.fsum((y - mean_y) ** 2 for y in ys)
    slope = sxy / sxx
    intercept = mean_y - slope * mean_x
    ss_res = max(0.0, math.fsum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys)))
    if syy == 0:
        r_squared = 1.0
    else:
        r_squared = max(0.0, min(1.0, 1.0 - ss_res / syy))
    slope_stderr = math.sqrt(ss_res / (n - 2) / sxx) if n > 2 else math.inf
    return LinearFit(slope=slope, intercept=intercept, slope_stderr=slope_stderr, r_squared=r_squared, n=n)

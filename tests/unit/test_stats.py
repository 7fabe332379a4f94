"""Hand-checked values for the pure statistics behind the gate."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from pytest_tfperf import rank_tests, stats


# -- basic robust statistics ------------------------------------------------


def test_median_percentile_mad_robust_cv() -> None:
    assert stats.median([3, 1, 2]) == 2.0
    assert stats.median([4, 1, 3, 2]) == 2.5
    assert stats.percentile([1, 2, 3, 4, 5], 25) == 2.0
    assert stats.percentile([10, 20], 50) == 15.0
    assert stats.mad([1, 2, 3, 4, 100]) == 1.0
    assert stats.robust_cv([9, 10, 11]) == pytest.approx(1.4826 * 1 / 10)


def test_stdev_uses_n_minus_one() -> None:
    assert stats.stdev([2, 4, 4, 4, 5, 5, 7, 9]) == pytest.approx(math.sqrt(32 / 7))
    assert stats.stdev([5.0]) == 0.0
    with pytest.raises(ValueError, match="empty"):
        stats.stdev([])


# -- distributions ----------------------------------------------------------


def test_normal_quantile_and_tail() -> None:
    assert stats.normal_quantile(0.975) == pytest.approx(1.959964, abs=1e-6)
    assert stats.normal_quantile(0.99) == pytest.approx(2.326348, abs=1e-6)
    assert stats.normal_sf(1.959964) == pytest.approx(0.025, abs=1e-7)
    with pytest.raises(ValueError):
        stats.normal_quantile(1.0)


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [(0.99, 4, 3.746947), (0.99, 8, 2.896459), (0.975, 1, 12.706205), (0.95, 30, 1.697261), (0.995, 2, 9.924843)],
)
def test_t_quantile_matches_tables(p: float, df: float, expected: float) -> None:
    assert stats.t_quantile(p, df) == pytest.approx(expected, abs=1e-5)
    assert stats.t_quantile(1 - p, df) == pytest.approx(-expected, abs=1e-5)
    assert stats.t_cdf(expected, df) == pytest.approx(p, abs=1e-6)


def test_t_with_infinite_df_is_normal_and_cdf_is_symmetric() -> None:
    assert stats.t_quantile(0.99, math.inf) == pytest.approx(stats.normal_quantile(0.99))
    assert stats.t_cdf(0.0, 3) == pytest.approx(0.5)
    assert stats.t_cdf(-1.5, 7) == pytest.approx(1 - stats.t_cdf(1.5, 7))


def test_incomplete_beta_closed_forms() -> None:
    assert stats.regularized_incomplete_beta(1, 1, 0.3) == pytest.approx(0.3)
    assert stats.regularized_incomplete_beta(2, 1, 0.3) == pytest.approx(0.09)
    assert stats.regularized_incomplete_beta(1, 3, 0.2) == pytest.approx(1 - 0.8**3)
    assert stats.regularized_incomplete_beta(2, 2, 0.0) == 0.0
    assert stats.regularized_incomplete_beta(2, 2, 1.0) == 1.0


# -- Mann-Whitney -----------------------------------------------------------


def test_rank_test_complete_separation_of_five_rounds_is_exact_1_in_252() -> None:
    result = rank_tests.mann_whitney_greater([6, 7, 8, 9, 10], [1, 2, 3, 4, 5])
    assert result.exact
    assert result.u == 25
    assert result.p_value == pytest.approx(1 / 252)
    assert result.min_p_value == pytest.approx(1 / 252)
    assert rank_tests.mann_whitney_greater([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]).p_value == 1.0


def test_rank_test_hand_computed_small_case() -> None:
    # x > y pairs: 4 beats 2, 3; 6 beats 2, 3, 5 -> U = 5. Null counts of U for 3 vs 3
    # (Gaussian binomial [6 choose 3]): 1 1 2 3 3 3 3 2 1 1, so P(U >= 5) = 10/20.
    result = rank_tests.mann_whitney_greater([1, 4, 6], [2, 3, 5])
    assert result.u == 5
    assert result.p_value == pytest.approx(0.5)
    assert result.min_p_value == pytest.approx(1 / 20)


def test_rank_test_with_ties_uses_tie_corrected_normal_approximation() -> None:
    # Ranks: 1,1 -> 1.5; four 2s -> 4.5; 3,3 -> 7.5. R_x = 24, U = 14, mean 8,
    # var = 16/12 * (9 - 72/56) = 10.2857, z = (14 - 8 - 0.5)/sqrt(var) = 1.7149.
    result = rank_tests.mann_whitney_greater([2, 2, 3, 3], [1, 1, 2, 2])
    assert not result.exact
    assert result.u == 14
    assert result.p_value == pytest.approx(0.5 * math.erfc(1.714928 / math.sqrt(2)), abs=1e-6)


def test_rank_test_of_identical_values_finds_no_evidence() -> None:
    assert rank_tests.mann_whitney_greater([3, 3, 3], [3, 3, 3]).p_value == 1.0


def test_rank_test_large_samples_match_the_exact_distribution_roughly() -> None:
    rng = random.Random(3)
    x = [rng.gauss(0.5, 1) for _ in range(70)]
    y = [rng.gauss(0.0, 1) for _ in range(70)]
    approx = rank_tests.mann_whitney_greater(x, y)
    assert not approx.exact  # too long for the exact path
    exact = rank_tests.mann_whitney_greater(x[:60], y[:60])
    assert exact.exact
    assert 0 < approx.p_value < 0.05 and 0 < exact.p_value < 0.05


def test_exact_null_counts_are_a_distribution() -> None:
    counts = rank_tests._u_null_counts(5, 7)
    assert sum(counts) == math.comb(12, 5)
    assert counts == counts[::-1]
    assert min(counts) > 0


# -- block bootstrap --------------------------------------------------------


def test_bootstrap_estimate_is_the_ratio_of_pooled_medians() -> None:
    result = stats.bootstrap_median_ratio([[1, 2, 3], [4, 5, 6]], [[2.0], [2.0]], resamples=200)
    assert result.estimate == pytest.approx(3.5 / 2)
    assert result.low <= result.estimate <= result.high
    assert (result.numerator_blocks, result.denominator_blocks) == (2, 2)


def test_bootstrap_of_identical_blocks_has_no_width() -> None:
    result = stats.bootstrap_median_ratio([[1.2, 2.4]] * 4, [[1.0, 2.0]] * 4, resamples=200)
    assert result.estimate == pytest.approx(1.2)
    assert result.low == pytest.approx(1.2) and result.high == pytest.approx(1.2)


def test_bootstrap_resamples_whole_rounds_so_round_to_round_shifts_widen_the_interval() -> None:
    # Within each round every value is the same; the rounds differ by 2x. A
    # bootstrap over single iterations would see 200 values per side and give a
    # narrow interval; resampling rounds must show the 2x uncertainty.
    blocks = [[1.0] * 50, [2.0] * 50]
    result = stats.bootstrap_median_ratio(blocks, blocks, confidence=0.95, resamples=2000)
    assert result.estimate == pytest.approx(1.0)
    assert result.low <= 0.7 and result.high >= 1.4


def test_bootstrap_is_deterministic_for_a_seed() -> None:
    rng = random.Random(1)
    a = [[rng.lognormvariate(0, 0.05) for _ in range(30)] for _ in range(5)]
    b = [[rng.lognormvariate(0.1, 0.05) for _ in range(30)] for _ in range(5)]
    first = stats.bootstrap_median_ratio(a, b, seed=7)
    assert first == stats.bootstrap_median_ratio(a, b, seed=7)
    assert first.low < first.estimate < first.high
    assert first.high < 1.0  # b is about 10% larger, so a/b is clearly below 1


def test_windowed_block_medians_equal_brute_force_medians() -> None:
    import numpy as np

    gen = random.Random(5)
    for trial in range(150):
        blocks = [[float(gen.randint(0, 15)) for _ in range(gen.randint(1, 8))] for _ in range(gen.randint(1, 6))]
        medians = stats._block_bootstrap_medians(blocks, 50, np.random.default_rng(trial))
        counts = np.random.default_rng(trial).multinomial(len(blocks), [1 / len(blocks)] * len(blocks), size=50)
        for row, got in zip(counts, medians):
            union = [v for block, k in zip(blocks, row) for _ in range(k) for v in block]
            assert got == statistics.median(union), (blocks, row)


def test_bootstrap_rejects_bad_input_with_reasons() -> None:
    with pytest.raises(ValueError, match="block 1 of the numerator is empty"):
        stats.bootstrap_median_ratio([[1.0], []], [[1.0]])
    with pytest.raises(ValueError, match="no blocks"):
        stats.bootstrap_median_ratio([[1.0]], [])
    with pytest.raises(ValueError, match="median is 0"):
        stats.bootstrap_median_ratio([[1.0]], [[0.0]])
    with pytest.raises(ValueError, match="confidence"):
        stats.bootstrap_median_ratio([[1.0]], [[1.0]], confidence=1.5)


# -- power and rates --------------------------------------------------------


def test_minimum_detectable_effect_matches_the_two_sample_power_formula() -> None:
    # Research table: CV 3%, n = 5 per side, one-sided alpha 0.01, power 80% -> 6.0%.
    se = 0.03 * math.sqrt(2 / 5)
    assert stats.minimum_detectable_effect(se, alpha=0.01, power=0.8) == pytest.approx(0.0601, abs=5e-4)
    # With an effect floor the floor plus z_power * se dominates when se is small.
    assert stats.minimum_detectable_effect(0.01, alpha=0.01, power=0.5, threshold=0.05) == pytest.approx(0.05)
    assert stats.minimum_detectable_effect(math.inf, alpha=0.01, power=0.9) == math.inf
    # Few degrees of freedom raise the critical value: t(0.99, 4) = 3.747.
    assert stats.minimum_detectable_effect(0.01, alpha=0.01, power=0.5, df=4) == pytest.approx(0.03747, abs=1e-5)


def test_welch_standard_error_and_degrees_of_freedom() -> None:
    se, df = stats.welch_standard_error(2.0, 5, 2.0, 5)
    assert se == pytest.approx(math.sqrt(8 / 5))
    assert df == pytest.approx(8.0)
    assert stats.welch_standard_error(1.0, 1, 1.0, 5)[0] == math.inf
    assert stats.welch_standard_error(0.0, 5, 0.0, 5) == (0.0, 8.0)


# -- least squares ----------------------------------------------------------


def test_linear_fit_hand_computed() -> None:
    # sxx = 5, sxy = 5.5 -> slope 1.1, intercept 1.1; residuals -0.1, 0.8, -1.3, 0.6:
    # SS_res = 2.7, SS_tot = 8.75, stderr = sqrt(2.7 / 2 / 5).
    fit = stats.linear_fit([0, 1, 2, 3], [1, 3, 2, 5])
    assert fit.slope == pytest.approx(1.1)
    assert fit.intercept == pytest.approx(1.1)
    assert fit.r_squared == pytest.approx(1 - 2.7 / 8.75)
    assert fit.slope_stderr == pytest.approx(math.sqrt(0.27))
    assert fit.n == 4
    assert fit.predict(10) == pytest.approx(12.1)


def test_linear_fit_exact_line_and_edge_cases() -> None:
    fit = stats.linear_fit([1, 2, 3, 4], [3, 5, 7, 9])
    assert (fit.slope, fit.intercept, fit.r_squared) == (pytest.approx(2), pytest.approx(1), pytest.approx(1))
    assert fit.slope_stderr == pytest.approx(0, abs=1e-12)
    assert stats.linear_fit([0, 1], [0, 5]).slope_stderr == math.inf
    flat = stats.linear_fit([0, 1, 2], [4, 4, 4])
    assert flat.slope == 0 and flat.r_squared == 1.0
    with pytest.raises(ValueError, match="two different x"):
        stats.linear_fit([1, 1, 1], [1, 2, 3])
    with pytest.raises(ValueError, match="as many xs as ys"):
        stats.linear_fit([1, 2], [1])

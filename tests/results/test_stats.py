"""evalx.results.stats against values worked out by hand (the working is in the comments)."""

from __future__ import annotations

import math

import pytest

from evalx.results.stats import (
    holm_adjust,
    mcnemar_exact,
    mean,
    paired_difference_interval,
    pass_at_k,
    pass_hat_k,
    percentile,
    wilson_interval,
)


class TestMean:
    def test_values(self) -> None:
        # (1 + 2 + 3 + 4) / 4 = 2.5
        assert mean([1, 2, 3, 4]) == 2.5

    def test_fsum_accuracy(self) -> None:
        # naive left-to-right sum of ten 0.1s is 0.9999999999999999; fsum gives 1.0
        assert mean([0.1] * 10) == 0.1

    def test_empty_is_none(self) -> None:
        assert mean([]) is None

    def test_generator(self) -> None:
        assert mean(x for x in (2.0, 4.0)) == 3.0


class TestPercentile:
    def test_median_even_count_interpolates(self) -> None:
        # sorted [1, 2, 3, 4]; rank = (4 - 1) * 0.5 = 1.5 -> 2 + 0.5 * (3 - 2) = 2.5
        assert percentile([4, 1, 3, 2], 50) == 2.5

    def test_p95_of_1_to_10(self) -> None:
        # rank = 9 * 0.95 = 8.55 -> data[8] = 9, data[9] = 10 -> 9 + 0.55 * 1 = 9.55
        assert percentile(list(range(1, 11)), 95) == pytest.approx(9.55)

    def test_p99_of_1_to_100(self) -> None:
        # rank = 99 * 0.99 = 98.01 -> 99 + 0.01 * (100 - 99) = 99.01
        assert percentile(range(1, 101), 99) == pytest.approx(99.01)

    def test_p90_uneven(self) -> None:
        # sorted [10, 20, 40, 80]; rank = 3 * 0.9 = 2.7 -> 40 + 0.7 * (80 - 40) = 68
        assert percentile([80, 10, 40, 20], 90) == pytest.approx(68.0)

    def test_bounds_are_min_and_max(self) -> None:
        assert percentile([3.0, 1.0, 2.0], 0) == 1.0
        assert percentile([3.0, 1.0, 2.0], 100) == 3.0

    def test_single_value(self) -> None:
        assert percentile([7.5], 99) == 7.5

    def test_empty_is_none(self) -> None:
        assert percentile([], 50) is None

    @pytest.mark.parametrize("q", [-1, 100.5])
    def test_q_out_of_range(self, q: float) -> None:
        with pytest.raises(ValueError, match=r"0\.\.100"):
            percentile([1.0], q)


class TestWilson:
    def test_eight_of_ten(self) -> None:
        # p = 0.8, n = 10, z = 1.959964, z^2 = 3.841459
        # denom  = 1 + 3.841459/10          = 1.3841459
        # centre = (0.8 + 3.841459/20) / d  = 0.99207295 / 1.3841459 = 0.716741
        # half   = z * sqrt(0.16/10 + 3.841459/400) / d
        #        = 1.959964 * sqrt(0.016 + 0.00960365) / 1.3841459
        #        = 1.959964 * 0.1600114 / 1.3841459 = 0.226583
        # -> (0.490158, 0.943324)
        lo, hi = wilson_interval(8, 10)
        assert lo == pytest.approx(0.490158, abs=1e-5)
        assert hi == pytest.approx(0.943324, abs=1e-5)

    def test_half(self) -> None:
        # k = 50, n = 100: centre 0.5 by symmetry;
        # half = 1.959964 * sqrt(0.0025 + 3.841459/40000) / (1 + 0.03841459)
        #      = 1.959964 * 0.0509530 / 1.0384146 = 0.0961714 -> (0.403829, 0.596171)
        lo, hi = wilson_interval(50, 100)
        assert lo == pytest.approx(0.403829, abs=1e-5)
        assert hi == pytest.approx(0.596171, abs=1e-5)
        assert lo + hi == pytest.approx(1.0)

    def test_all_pass_is_exactly_one_at_the_top(self) -> None:
        # k = n = 10, p = 1: sqrt(0 + z^2/(4n^2)) = z/(2n), so
        # half   = z^2/(2n) / denom = 0.19207295 / 1.3841459 = 0.1387664
        # centre = (1 + 0.19207295) / 1.3841459              = 0.8612336
        # lo = centre - half = 1 / denom = 10 / 13.841459    = 0.7224672
        lo, hi = wilson_interval(10, 10)
        assert hi == 1.0
        assert lo == pytest.approx(0.722467, abs=1e-5)

    def test_none_pass_is_exactly_zero_at_the_bottom(self) -> None:
        lo, hi = wilson_interval(0, 10)
        assert lo == 0.0
        assert hi == pytest.approx(1 - 0.722467, abs=1e-5)  # mirror of 10/10

    def test_no_trials_is_the_whole_interval(self) -> None:
        assert wilson_interval(0, 0) == (0.0, 1.0)

    def test_wider_z_wider_interval(self) -> None:
        lo95, hi95 = wilson_interval(8, 10)
        lo99, hi99 = wilson_interval(8, 10, z=2.575829)
        assert lo99 < lo95 and hi99 > hi95

    @pytest.mark.parametrize(("k", "n"), [(-1, 5), (6, 5), (0, -1)])
    def test_bad_counts(self, k: int, n: int) -> None:
        with pytest.raises(ValueError):
            wilson_interval(k, n)


class TestMcNemar:
    def test_no_discordant_pairs(self) -> None:
        assert mcnemar_exact(0, 0) == 1.0

    def test_one_sided_five(self) -> None:
        # n = 5, min = 0: P(X <= 0) = 1/32 -> p = 2/32 = 0.0625
        assert mcnemar_exact(5, 0) == pytest.approx(0.0625)

    def test_symmetric(self) -> None:
        assert mcnemar_exact(2, 9) == mcnemar_exact(9, 2)

    def test_two_versus_nine(self) -> None:
        # n = 11, min = 2: C(11,0) + C(11,1) + C(11,2) = 1 + 11 + 55 = 67
        # p = 2 * 67 / 2048 = 134 / 2048 = 0.0654296875
        assert mcnemar_exact(2, 9) == pytest.approx(0.0654296875)

    def test_one_versus_ten_is_significant(self) -> None:
        # n = 11, min = 1: 1 + 11 = 12 -> p = 24 / 2048 = 0.01171875
        assert mcnemar_exact(1, 10) == pytest.approx(0.01171875)

    def test_equal_counts_cap_at_one(self) -> None:
        # n = 6, min = 3: 1 + 6 + 15 + 20 = 42 -> 2 * 42 / 64 = 1.3125 -> capped at 1
        assert mcnemar_exact(3, 3) == 1.0

    def test_large_counts_do_not_overflow(self) -> None:
        # 2**2000 is far beyond a float; integer arithmetic keeps it exact
        p = mcnemar_exact(900, 1100)
        assert 0.0 <= p < 1e-5

    def test_negative(self) -> None:
        with pytest.raises(ValueError):
            mcnemar_exact(-1, 2)


class TestPassAtK:
    def test_pass_at_1_is_the_pass_rate(self) -> None:
        # 1 - C(7,1)/C(10,1) = 1 - 7/10 = 0.3 = c / n
        assert pass_at_k(10, 3, 1) == pytest.approx(0.3)

    def test_pass_at_2(self) -> None:
        # n = 5, c = 2, k = 2: 1 - C(3,2)/C(5,2) = 1 - 3/10 = 0.7
        assert pass_at_k(5, 2, 2) == pytest.approx(0.7)

    def test_pass_at_3_of_10(self) -> None:
        # n = 10, c = 3, k = 3: 1 - C(7,3)/C(10,3) = 1 - 35/120 = 0.708333...
        assert pass_at_k(10, 3, 3) == pytest.approx(85 / 120)

    def test_certain_when_failures_cannot_fill_k(self) -> None:
        # n - c = 1 < k = 2: every pair of draws holds a pass
        assert pass_at_k(3, 2, 2) == 1.0

    def test_zero_passes(self) -> None:
        assert pass_at_k(5, 0, 3) == 0.0

    @pytest.mark.parametrize(("n", "c", "k"), [(5, 6, 1), (5, 2, 0), (5, 2, 6), (5, -1, 1)])
    def test_bad_arguments(self, n: int, c: int, k: int) -> None:
        with pytest.raises(ValueError):
            pass_at_k(n, c, k)


class TestPassHatK:
    def test_all_of_k(self) -> None:
        # n = 5, c = 3, k = 2: C(3,2)/C(5,2) = 3/10 = 0.3
        assert pass_hat_k(5, 3, 2) == pytest.approx(0.3)

    def test_k1_is_the_pass_rate(self) -> None:
        # C(3,1)/C(5,1) = 3/5
        assert pass_hat_k(5, 3, 1) == pytest.approx(0.6)

    def test_fewer_passes_than_k(self) -> None:
        # C(2,3) = 0
        assert pass_hat_k(5, 2, 3) == 0.0

    def test_every_run_passed(self) -> None:
        assert pass_hat_k(4, 4, 4) == 1.0

    def test_reliability_gap(self) -> None:
        # 2 of 3 tries pass: pass@3 = 1 (n - c = 1 < 3), pass^3 = C(2,3)/C(3,3) = 0
        assert pass_at_k(3, 2, 3) == 1.0
        assert pass_hat_k(3, 2, 3) == 0.0

    def test_bad_arguments(self) -> None:
        with pytest.raises(ValueError):
            pass_hat_k(3, 4, 1)


def test_no_nan_anywhere() -> None:
    values = [wilson_interval(k, 7)[i] for k in range(8) for i in (0, 1)]
    assert all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in values)


class TestHolm:
    def test_one_test_is_unchanged(self) -> None:
        assert holm_adjust([0.031]) == [0.031]

    def test_step_down_keeps_order_and_monotonicity(self) -> None:
        # sorted 0.01, 0.03, 0.04 -> x3, x2, x1 = 0.03, 0.06, 0.04 -> made non-decreasing: 0.03, 0.06, 0.06
        assert holm_adjust([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])

    def test_three_pairs_at_0_031_are_not_significant(self) -> None:
        assert min(holm_adjust([0.031, 0.2, 0.5])) == pytest.approx(0.093)

    def test_capped_at_one(self) -> None:
        assert holm_adjust([0.6, 0.7]) == [1.0, 1.0]

    def test_empty(self) -> None:
        assert holm_adjust([]) == []


class TestPairedDifference:
    def test_reference_values(self) -> None:
        # Fagerland, Lydersen & Laake, "Statistical Analysis of Contingency Tables", ch. 8 (as tested by the
        # contingencytables R package): table [[59, 6], [16, 80]] -> -0.0621 (95% CI -0.1186 to -0.0046)
        lo, hi = paired_difference_interval(59, 6, 16, 80)
        assert (round(lo, 4), round(hi, 4)) == (-0.1186, -0.0046)

    def test_swapping_the_sides_mirrors_the_interval(self) -> None:
        lo, hi = paired_difference_interval(12, 9, 2, 21)
        assert paired_difference_interval(12, 2, 9, 21) == pytest.approx((-hi, -lo))

    @pytest.mark.parametrize("table", [(0, 0, 0, 10), (10, 0, 0, 0), (0, 10, 0, 0), (0, 0, 10, 0), (3, 0, 0, 3), (1, 2, 3, 4)])
    def test_holds_the_difference_and_stays_in_bounds(self, table: tuple[int, int, int, int]) -> None:
        both, only_a, only_b, neither = table
        diff = (only_a - only_b) / sum(table)
        lo, hi = paired_difference_interval(*table)
        assert -1.0 <= lo <= diff <= hi <= 1.0

    def test_no_pairs_is_the_whole_range(self) -> None:
        assert paired_difference_interval(0, 0, 0, 0) == (-1.0, 1.0)

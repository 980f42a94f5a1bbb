"""Small, dependency-free statistics used by summaries and baseline comparisons.

Every function is pure and works on plain Python numbers: percentiles of
latencies, a Wilson interval for a pass rate, McNemar's exact test for two
runs over the same cases with Holm's adjustment when several pairs are
tested, Newcombe's interval for a paired difference of pass rates, and the
pass@k / pass^k estimators for repeats.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = [
    "holm_adjust",
    "mcnemar_exact",
    "mean",
    "paired_difference_interval",
    "pass_at_k",
    "pass_hat_k",
    "percentile",
    "wilson_interval",
]

#: the two-sided 95% normal quantile
Z_95 = 1.959964


def mean(values: Iterable[float]) -> float | None:
    """The arithmetic mean (``math.fsum``-accurate); None when there are no values."""
    data = [float(v) for v in values]
    if not data:
        return None
    return math.fsum(data) / len(data)


def percentile(values: Iterable[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) with linear interpolation; None when empty.

    Same rule as ``numpy.percentile``'s default ("linear"): the value at
    rank ``(n - 1) * q / 100`` of the sorted data, interpolating between the
    two neighbouring ranks.
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be within 0..100, got {q}")
    data = sorted(values)  # timsort: linear on data that is already sorted
    if not data:
        return None
    rank = (len(data) - 1) * q / 100
    lo = math.floor(rank)
    hi = math.ceil(rank)
    if lo == hi:
        return float(data[lo])
    return float(data[lo] + (data[hi] - data[lo]) * (rank - lo))


def wilson_interval(k: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval for ``k`` successes in ``n`` trials.

    Unlike the normal approximation it stays inside [0, 1] and behaves at
    0% and 100%, which is where eval pass rates often sit. With ``n == 0``
    there is no evidence and the interval is the whole of [0, 1].
    """
    if n < 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    z2 = z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    lo = 0.0 if k == 0 else max(0.0, centre - half)
    hi = 1.0 if k == n else min(1.0, centre + half)
    return (lo, hi)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pair counts.

    ``b`` cases passed only in run A, ``c`` only in run B. Under "no
    difference" each discordant case is a fair coin, so the p-value is
    ``min(1, 2 * P(X <= min(b, c)))`` for ``X ~ Binomial(b + c, 0.5)``.
    No discordant pairs means no evidence of a difference: 1.0.
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    # exact integers, one correctly rounded division: no underflow in the sum. Each term comes from the
    # one before (C(n, i+1) = C(n, i)·(n−i)/(i+1), exact): a math.comb per term cost 1.9 s at b, c ≈ 4,000
    term = tail = 1
    for i in range(min(b, c)):
        term = term * (n - i) // (i + 1)
        tail += term
    return min(1.0, 2 * tail / (1 << n))


def holm_adjust(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment of ``p_values`` (in their order), for testing them all at once.

    The i-th smallest p is multiplied by ``m - i`` (m tests, i from 0), then
    made non-decreasing in that order and capped at 1. It controls the
    chance of any false "significant" across the family, with no assumption
    on how the tests depend on each other (Holm, 1979). One test: unchanged.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def paired_difference_interval(both: int, only_a: int, only_b: int, neither: int, z: float = Z_95) -> tuple[float, float]:
    """95 % interval of pass rate A − pass rate B over paired cases (Newcombe 1998, method 10).

    The four counts are the 2×2 table of the cases both sides graded. It
    combines the two Wilson intervals with the correlation of the pairs, so
    it stays inside [-1, 1] and behaves at 0 % and 100 %. No pairs: [-1, 1].
    """
    n = both + only_a + only_b + neither
    if min(both, only_a, only_b, neither) < 0:
        raise ValueError("counts must be >= 0")
    if n == 0:
        return (-1.0, 1.0)
    p1, p2 = (both + only_a) / n, (both + only_b) / n
    l1, u1 = wilson_interval(both + only_a, n, z)
    l2, u2 = wilson_interval(both + only_b, n, z)
    margins = (both + only_a) * (only_b + neither) * (both + only_b) * (only_a + neither)
    # the correlation of the pairs, with Newcombe's correction: a positive ad - bc is reduced by n/2 (not below 0)
    cross = float(both * neither - only_a * only_b)
    cross = max(0.0, cross - n / 2) if cross > 0 else cross
    phi = 0.0 if margins == 0 else cross / math.sqrt(margins)
    delta = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    epsilon = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    diff = p1 - p2
    return (max(-1.0, diff - delta), min(1.0, diff + epsilon))


def _check_nck(n: int, c: int, k: int) -> None:
    if n < 0 or not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k: the chance that at least one of ``k`` draws passes.

    ``n`` runs of a case, ``c`` of them passed: ``1 - C(n-c, k) / C(n, k)``
    (Chen et al., 2021).
    """
    _check_nck(n, c, k)
    if n - c < k:  # every k-subset holds a pass
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k: the chance that all of ``k`` draws pass, ``C(c, k) / C(n, k)``.

    The reliability counterpart of pass@k: an agent that passes 2 of 3
    tries has a high pass@3 and a low pass^3.
    """
    _check_nck(n, c, k)
    return math.comb(c, k) / math.comb(n, k)

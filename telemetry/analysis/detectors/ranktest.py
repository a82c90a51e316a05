"""The rank-sum (Mann-Whitney U) test, one implementation for every detector that compares two
stretches of a series: regression's change-point search and its confirming test, and ``diff``.

Normal approximation; tied values get their average rank and the variance its tie correction, so a
series with repeated values (a simulation without jitter, block medians of a quantized clock) is
tested as the statistic defines it, not by the order the ties happen to sort in.

>>> float(split_z(np.array([1.0, 1.0, 2.0, 2.0]), np.array([2]))[0]) > 0   # later values larger
True
"""

from __future__ import annotations

import math

import numpy as np


def average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n of ``x``'s values, ties sharing their average rank."""
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    first = np.cumsum(counts) - counts  # ranks before each distinct value
    return (first + (counts + 1) / 2.0)[inverse]


def tie_term(x: np.ndarray) -> float:
    """sum(t^3 - t) / (n (n - 1)) over groups of t tied values: what ties take from the variance."""
    n = len(x)
    if n < 2:
        return 0.0
    _, counts = np.unique(x, return_counts=True)
    return float((counts**3 - counts).sum() / (n * (n - 1)))


def _sigma(n1: np.ndarray | int, n2: np.ndarray | int, tie: float) -> np.ndarray:
    """Standard deviation of U for parts of n1 and n2 values."""
    return np.sqrt(n1 * n2 * ((n1 + n2 + 1) - tie) / 12.0)


def split_z(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    """For each split ``k`` (an array of sizes of the first part), the z that ``x[k:]`` lies above
    ``x[:k]``: U of the first part against its mean, over its standard deviation (all splits at
    once, from prefix sums of the ranks)."""
    n = len(x)
    before_sum = np.cumsum(average_ranks(x))[k - 1]
    sigma = _sigma(k, n - k, tie_term(x))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (k * (n + 1) / 2.0 - before_sum) / sigma
    return np.where(sigma > 0, z, 0.0)


def mann_whitney_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p-value that ``a`` and ``b`` come from one distribution (with continuity correction)."""
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        return 1.0
    both = np.concatenate([a, b])
    u = average_ranks(both)[:n1].sum() - n1 * (n1 + 1) / 2.0
    sigma = float(_sigma(n1, n2, tie_term(both)))
    if sigma == 0:
        return 1.0
    z = (abs(u - n1 * n2 / 2.0) - 0.5) / sigma
    return math.erfc(max(z, 0.0) / math.sqrt(2.0))

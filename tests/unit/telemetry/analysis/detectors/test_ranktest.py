"""The rank test under diff and regression (telemetry/analysis/detectors/ranktest.py): ties, split z,
Mann-Whitney p-values."""

import math

import numpy as np
import pytest

from telemetry.analysis.detectors.ranktest import average_ranks, mann_whitney_p, split_z, tie_term


def test_ties_share_their_average_rank():
    assert average_ranks(np.array([3.0, 1.0, 3.0, 2.0])).tolist() == [3.5, 1.0, 3.5, 2.0]


def test_without_ties_the_split_z_is_the_textbook_one():
    rng = np.random.default_rng(0)
    x = rng.normal(size=40)
    k = np.arange(5, 36)
    z = split_z(x, k)
    for kk, zz in zip(k, z):
        a, b = x[:kk], x[kk:]
        u_after = sum((bi > aj) for bi in b for aj in a)  # pairs where the later value is larger
        mu, n1, n2 = kk * (40 - kk) / 2, kk, 40 - kk
        assert zz == pytest.approx((u_after - mu) / math.sqrt(n1 * n2 * (41) / 12))


def test_tied_steps_are_not_split_by_their_order():
    # A level that does not change, in a quantized series: every split must be null. Ranking ties
    # in order (the old search) read the sorted order of equal values as a rise.
    x = np.array([1.0, 2.0] * 20)
    z = split_z(x, np.arange(8, 33))
    assert np.abs(z).max() < 1.0


def test_all_equal_values_give_no_evidence():
    x = np.ones(30)
    assert np.all(split_z(x, np.arange(5, 26)) == 0.0)
    assert mann_whitney_p(np.ones(5), np.ones(5)) == 1.0


def test_tie_correction_shrinks_the_variance():
    assert tie_term(np.array([1.0, 2.0, 3.0])) == 0.0
    assert tie_term(np.array([1.0, 1.0, 2.0, 2.0])) == pytest.approx((6 + 6) / 12)


def test_p_value_separates_shifted_samples_and_not_equal_ones():
    rng = np.random.default_rng(1)
    a = rng.normal(size=20)
    assert mann_whitney_p(a, a + 3.0) < 1e-5
    assert mann_whitney_p(a, rng.permutation(a)) > 0.5
    assert mann_whitney_p(np.array([]), a) == 1.0


def test_mann_whitney_p_values():
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.normal(size=30)
    assert mann_whitney_p(a, rng.normal(size=30)) > 0.01
    assert mann_whitney_p(a, rng.normal(loc=2, size=30)) < 1e-6
    assert mann_whitney_p(np.ones(5), np.ones(5)) == 1.0

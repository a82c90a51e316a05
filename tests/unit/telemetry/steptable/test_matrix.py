"""The step matrix's vectorized statistics (telemetry/steptable/matrix.py) give numpy's numbers:
a dashboard's percentile over 10,000 ranks is the same one, only faster."""

import warnings

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from telemetry.steptable.matrix import nanmedian, nanpercentile

values = st.one_of(st.floats(-1e9, 1e9, allow_nan=False), st.just(float("nan")))


@settings(max_examples=300, deadline=None)
@given(
    a=arrays(np.float64, st.tuples(st.integers(1, 7), st.integers(1, 7)), elements=values),
    q=st.one_of(st.sampled_from([0.0, 5.0, 50.0, 95.0, 100.0]), st.floats(0, 100)),
    axis=st.sampled_from([0, 1]),
)
def test_nanpercentile_is_numpy_s_to_the_bit(a, q, axis):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's all-NaN slice
        want = np.nanpercentile(a, q, axis=axis)
        median = np.nanmedian(a, axis=axis)
    assert np.array_equal(nanpercentile(a, q, axis=axis), want, equal_nan=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        both = np.nanpercentile(a, [q, 95.0], axis=axis)
    assert np.array_equal(nanpercentile(a, [q, 95.0], axis=axis), both, equal_nan=True)  # several, one sort
    assert np.allclose(nanmedian(a, axis=axis), median, equal_nan=True, rtol=1e-12, atol=0)

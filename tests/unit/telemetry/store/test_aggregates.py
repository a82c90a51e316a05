"""The run store's coarse level (telemetry/store/aggregates.py): per rank and block of 64 steps, the
count, sum, min, max and median of each step column, written with each segment (read back:
test_aggreads.py)."""

import numpy as np

from telemetry.store import aggregates
from tests.helpers.store_runs import steps_table


def test_each_block_holds_count_sum_min_max_and_the_exact_median():
    t = steps_table(3, 10, 200)
    agg = aggregates.block_aggregates(t).to_pandas()
    df = t.to_pandas()
    df["data_s"] = df["data_s"].fillna(0.0)
    df["block"] = df["step"] // 64
    g = df.groupby("block")
    assert agg["block"].tolist() == [0, 1, 2, 3] and agg["rank"].tolist() == [3] * 4
    assert agg["n"].tolist() == g.size().tolist() == [54, 64, 64, 18]
    assert agg["first_step"].tolist() == [10, 64, 128, 192] and agg["last_step"].tolist() == [63, 127, 191, 209]
    for c in ("duration_s", "forward_s", "data_s", "log.loss"):
        np.testing.assert_allclose(agg[f"{c}|sum"], g[c].sum())
        np.testing.assert_allclose(agg[f"{c}|min"], g[c].min())
        np.testing.assert_allclose(agg[f"{c}|max"], g[c].max())
        np.testing.assert_allclose(agg[f"{c}|p50"], g[c].median())
    assert agg["log.loss|n"].tolist() == [53, 64, 64, 18]  # the missing reading is not a value
    assert agg["data_s|n"].tolist() == [54, 64, 64, 18]  # a phase not run took 0 s
    compute = df["forward_s"]  # the phase less the collectives inside it
    np.testing.assert_allclose(
        agg["compute.forward_s|p50"], (compute - df["comm.forward_s"]).groupby(df["block"]).median()
    )
    np.testing.assert_allclose(agg["compute_s|sum"], (df["duration_s"] - df["comm_s"]).groupby(df["block"]).sum())
    np.testing.assert_allclose(agg["start_s|min"], g["start_s"].min())

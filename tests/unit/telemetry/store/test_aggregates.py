"""The run store's coarse level (telemetry/store/aggregates.py): per rank and block of 64 steps, the
count, sum, min, max and median of each step column, written with each segment and read back."""

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from telemetry.store import aggregates, layout
from telemetry.store.segments import read_aggregates, write_columns


def steps_table(rank, first, n, seed=0):
    rng = np.random.default_rng(seed + rank)
    step = np.arange(first, first + n)
    fwd = rng.lognormal(-3, 0.2, n)
    comm = np.full(n, 0.002)
    data = np.where(step % 7 == 0, np.nan, 0.001)  # a phase some steps lack: 0 there
    loss = np.where(step == first + 3, np.nan, 1.0 / (step + 1))  # a missing reading stays missing
    return pa.table(
        {
            "rank": np.full(n, rank),
            "step": step,
            "start_s": step * 0.1,
            "duration_s": fwd + comm + np.nan_to_num(data),
            "forward_s": fwd,
            "comm.forward_s": comm,
            "comm_s": comm,
            "data_s": data,
            "log.loss": loss,
        }
    )


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


def test_a_block_two_segments_share_is_combined(tmp_path):
    run = str(tmp_path)
    os.makedirs(os.path.join(run, layout.RANKS_DIR))
    whole = steps_table(0, 0, 300)
    write_columns(run, 0, 1, whole.slice(0, 100))  # block 1 (steps 64-127) cut at step 100
    write_columns(run, 0, 2, whole.slice(100, 200))
    write_columns(run, 1, 1, steps_table(1, 0, 300))
    warnings = []
    got = read_aggregates(run, warnings).to_pandas()
    assert warnings == []
    want = aggregates.block_aggregates(whole).to_pandas()
    mine = got[got["rank"] == 0].reset_index(drop=True)
    assert mine["block"].tolist() == [0, 1, 2, 3, 4] and got["rank"].tolist().count(1) == 5
    for c in want.columns:
        if c.endswith("|p50"):
            continue
        np.testing.assert_allclose(mine[c].astype(float), want[c].astype(float), err_msg=c)
    # the shared block's median: the parts' medians weighed by their rows (36 and 28 steps)
    a = aggregates.block_aggregates(whole.slice(64, 36)).to_pandas()["forward_s|p50"][0]
    b = aggregates.block_aggregates(whole.slice(100, 28)).to_pandas()["forward_s|p50"][0]
    assert mine["forward_s|p50"][1] == pytest.approx((36 * a + 28 * b) / 64)
    assert mine["forward_s|p50"][2] == pytest.approx(want["forward_s|p50"][2])  # whole blocks: exact

    only = read_aggregates(run, [], steps=(130, 200)).to_pandas()
    assert sorted(set(only["block"])) == [2, 3]


def test_segments_without_aggregates_and_tails_are_summarized_when_read(tmp_path):
    run = str(tmp_path)
    os.makedirs(os.path.join(run, layout.RANKS_DIR))
    write_columns(run, 0, 1, steps_table(0, 0, 128))
    with_file = read_aggregates(run, []).to_pandas()
    os.remove(layout.agg_path(run, 0, 1))  # a segment written before aggregates were
    without = read_aggregates(run, []).to_pandas()
    pd.testing.assert_frame_equal(with_file[sorted(with_file.columns)], without[sorted(without.columns)])
    open(layout.agg_path(run, 0, 1), "wb").close()  # damaged aggregates: the segment says the same
    warnings = []
    damaged = read_aggregates(run, warnings).to_pandas()
    pd.testing.assert_frame_equal(with_file[sorted(with_file.columns)], damaged[sorted(damaged.columns)])
    assert warnings == [
        "rank-00000.agg-000001.arrows: unreadable (too short to be an aggregates file); its segment's rows "
        "summarized instead"
    ]
    aggregates.write_file(layout.agg_path(run, 0, 1), aggregates.block_aggregates(steps_table(0, 0, 128)), False)
    raw = bytearray(open(layout.agg_path(run, 0, 1), "rb").read())
    raw[100] ^= 0xFF  # a flipped byte: the checksum says so, never a wrong number
    open(layout.agg_path(run, 0, 1), "wb").write(bytes(raw))
    with pytest.raises(ValueError, match="checksum"):
        aggregates.read_file(layout.agg_path(run, 0, 1))
    assert read_aggregates(run, []).num_rows == 2
    assert read_aggregates(run, [], summarize=False).num_rows == 2  # summarized: the file is there, damaged

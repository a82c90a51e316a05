"""A run's aggregates over blocks of steps read back (telemetry/store/aggreads.py): a block two
segments share combined; a segment without its aggregates, with damaged ones, and a live tail
summarized from their rows."""

import os

import numpy as np
import pandas as pd
import pytest

from telemetry.store import aggregates, layout
from telemetry.store.aggreads import read_aggregates
from telemetry.store.seal import write_columns
from tests.helpers.store_runs import steps_table


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

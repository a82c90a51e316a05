"""The demo's token file (telemetry/demo/model.py TokenShard): batches read in order from storage, a long
job's reads going round a file of bounded size instead of writing gigabytes before its first step."""

import os

import numpy as np
import pytest

from telemetry.demo.model import TokenShard


def test_a_long_job_reads_a_bounded_file_round_and_round(tmp_path, monkeypatch):
    monkeypatch.setattr(TokenShard, "MAX_ITEMS", 10)
    ts = TokenShard(str(tmp_path / "t.tokens"), 25, 4, 50, seed=0)
    assert len(ts) == 25 and os.path.getsize(tmp_path / "t.tokens") == 10 * 5 * 8  # 10 items of 5 tokens
    across = ts._read(8, 5)  # items 8, 9, then the file's start again
    assert np.array_equal(across, np.vstack([ts._read(8, 2), ts._read(0, 3)]))
    assert np.array_equal(ts._read(20, 3), ts._read(0, 3))
    x, y = zip(*ts.__getitems__([3, 4]))
    assert all(torch_row[1:].equal(nxt[:-1]) for torch_row, nxt in zip(x, y))  # y is x shifted by one


@pytest.mark.real_clock  # a slowed read measured against a real sleep
def test_a_slow_read_takes_its_factor_at_least_a_millisecond_more(tmp_path):
    import time

    ts = TokenShard(str(tmp_path / "t.tokens"), 16, 4, 50, seed=0, slow=lambda item: 6.0)
    t0 = time.perf_counter()
    ts._read(0, 8)
    assert time.perf_counter() - t0 >= 0.005  # (6 - 1) x at least 1 ms

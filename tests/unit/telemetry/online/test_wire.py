"""Online detection's wire format (telemetry/online/wire.py): a block summary is a fixed vector of medians,
read back from the store only when it is one."""

import numpy as np

from telemetry.online.wire import FIXED, BlockSummarizer, phases_key, rank_of, summary_key, summary_vector
from telemetry.pipeline.records import StepRecord


def rec(step, duration, forward, comm):
    return StepRecord(
        rank=0,
        step=step,
        start_s=0.0,
        duration_s=duration,
        ok=True,
        phases={"forward": forward, "backward": duration - forward, "data": 0.001},
        phase_comm={"backward": comm},
        comm_s=comm,
        ops={},
        tokens=None,
        samples=None,
        scalars={},
        spans=(),
    )


def test_a_block_summary_is_a_fixed_vector_of_medians():
    s = BlockSummarizer(every=3)
    assert s.add([rec(0, 0.10, 0.03, 0.02), rec(1, 0.12, 0.05, 0.02)]) == []
    [v] = s.add([rec(2, 0.11, 0.04, 0.03)])
    assert s.phases == ("backward", "forward")
    block, steps, duration, compute, comm, data, backward, forward = v
    assert (block, steps) == (0, 3)
    assert duration == 0.11 and comm == 0.02 and data == 0.001
    assert abs(compute - 0.08) < 1e-9 and abs(forward - 0.04) < 1e-9  # medians of (duration - comm), forward
    assert abs(backward - 0.05) < 1e-9  # backward compute: the comm inside it removed


def test_a_summary_is_read_back_only_when_it_is_one():
    good = np.arange(len(FIXED) + 2, dtype=np.float64)
    good[0] = 7
    assert summary_vector(good.tobytes(), 7).tolist() == good.tolist()
    assert summary_vector(good.tobytes()[:-3], 7) is None  # not whole float64s
    assert summary_vector(good[:3].tobytes(), 7) is None  # fewer than the fixed fields
    assert summary_vector(good.tobytes(), 8) is None  # another block's vector
    assert summary_vector(b"", 7) is None and summary_vector("text", 7) is None


def test_each_key_names_its_rank():
    assert summary_key(12, 345) == "s/12/345" and phases_key(345) == "phases/345"
    assert rank_of(summary_key(12, 345)) == rank_of(phases_key(345)) == 345

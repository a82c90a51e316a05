"""Online detection's wire format (telemetry/online/wire.py): a block summary is a fixed vector of medians,
read back from the store only when it is one."""

import numpy as np

from telemetry.online.wire import (
    FIXED,
    Block,
    BlockSummarizer,
    phases_key,
    rank_of,
    summary_key,
    summary_vector,
    trace_roots,
)
from telemetry.pipeline.records import Span, StepRecord


def rec(step, duration, forward, comm, start=0.0, spans=()):
    return StepRecord(
        rank=0,
        step=step,
        start_s=start,
        duration_s=duration,
        ok=True,
        phases={"forward": forward, "backward": duration - forward, "data": 0.001},
        phase_comm={"backward": comm},
        comm_s=comm,
        ops={},
        tokens=None,
        samples=None,
        scalars={},
        spans=spans,
    )


def test_a_block_summary_is_a_fixed_vector_of_medians():
    s = BlockSummarizer(every=3)
    assert s.add([rec(0, 0.10, 0.03, 0.02), rec(1, 0.12, 0.05, 0.02)]) == []
    [v] = s.add([rec(2, 0.11, 0.04, 0.03)])
    assert s.phases == ("backward", "forward")
    block, steps, duration, compute, comm, data, traced, backward, forward = v
    assert (block, steps, traced) == (0, 3, 0)  # no trace extents: this rank exports no traces
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


def test_traced_steps_carry_their_extents_and_rank_0_builds_roots_that_cover_every_rank():
    def ranks_block(rank, offset):
        traced = {0, 2}  # the steps this rank's OTLP sink exports
        s = BlockSummarizer(every=3, sampler=lambda r: r.step in traced)
        wait = Span("data", "data_wait", 9.9 + offset, 10.0 + offset)  # the data wait, before the step starts
        recs = [rec(i, 0.1, 0.04, 0.02, start=10.0 + i + offset, spans=(wait,) if i == 0 else ()) for i in range(3)]
        [v] = s.add(recs)
        assert v[FIXED.index("traced")] == 6
        return v

    v0, v1 = ranks_block(0, 0.0), ranks_block(1, 0.003)
    ext = v0[-6:].reshape(3, 2)
    assert ext[0].tolist() == [9.9, 10.1] and np.isnan(ext[1]).all() and ext[2].tolist() == [12.0, 12.1]
    roots = trace_roots(0, Block.of({0: v0, 1: v1}), every=3)
    assert [(s, n) for s, _, _, n in roots] == [(0, 2), (2, 2)]  # step 1 was traced by nobody
    step, start, end, _ = roots[0]
    assert start == 9.9 and abs(end - 10.103) < 1e-9  # rank 0's wait starts first, rank 1 ends last
    plain = BlockSummarizer(every=3).add([rec(i, 0.1, 0.04, 0.02) for i in range(3)])[0]
    assert trace_roots(0, Block.of({0: plain, 1: v1}), every=3) == [(0, 9.903, 10.103, 1), (2, 12.003, 12.103, 1)]

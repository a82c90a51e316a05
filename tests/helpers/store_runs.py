"""Runs written with the run store's own functions, for its unit tests: a step record with spans, a
rank's five sealed segments and live tail, a rank's step columns."""

import os

import numpy as np
import pyarrow as pa

from telemetry.pipeline.records import Span, StepRecord
from telemetry.store import layout
from telemetry.store.seal import write_segment
from telemetry.store.tails import TailEncoder


def record(step, duration=0.1, rank=0):
    spans = (
        Span("phase", "forward", step + 0.01, step + 0.05),
        Span("collective", "all_reduce", step + 0.05, step + 0.06, True, 4096),
    )
    return StepRecord(
        rank,
        step,
        float(step),
        duration,
        True,
        {"forward": 0.04},
        {},
        0.01,
        {},
        64,
        2,
        {"loss": 1.0 / (step + 1)},
        spans,
    )


def make_run(root, rank=0):
    """5 sealed segments of rank ``rank`` (steps 0-49, the last one writing steps 45-49 again, as a
    restart would, longer: the later file wins), and a live tail (steps 50-54)."""
    run = str(root)
    os.makedirs(os.path.join(run, layout.RANKS_DIR), exist_ok=True)
    for seq in range(1, 5):
        write_segment(run, rank, seq, [record(s, rank=rank) for s in range((seq - 1) * 10, seq * 10)])
    write_segment(
        run, rank, 5, [record(s, 0.3, rank) for s in range(40, 50)] + [record(s, 0.5, rank) for s in range(45, 50)]
    )
    enc = TailEncoder()
    with open(layout.tail_path(run, rank, 6), "w") as f:
        f.write('{"format": 2}\n' + "".join(enc.lines(record(s, rank=rank)) for s in range(50, 55)))
    return run


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

"""Large inputs, in bounded memory: a 35 MB profiler trace streamed (telemetry/analysis/inputs/tracefile.py).
Here, not under tests/unit/, for its cost (seconds of CPU), as a slow test."""

import os
import tracemalloc

import pytest

from telemetry.analysis.inputs.load import open_input
from tests.helpers import kineto_traces as kt

US = 1e-6


def test_a_large_trace_is_streamed_with_bounded_memory(tmp_path):
    """200,000 events (about 35 MB): the reader's peak Python allocation stays a small part of it."""
    d = tmp_path / "big"
    d.mkdir()
    path = d / "rank0.pt.trace.json"
    steps = 4000
    n = kt.write_big_trace(str(path), steps)  # ProfilerStep, 2 phases, 23 launches, 23 kernels, NCCL
    assert n == 200_000
    size = os.path.getsize(path)
    tracemalloc.start()
    try:
        run = open_input(str(d))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    t = run.table
    assert len(t) == steps
    assert t["forward_s"].iloc[0] == pytest.approx(14 * 100 * US)  # 14 kernels launched at 150..4050
    assert t["comm_s"].iloc[0] == pytest.approx(500 * US)
    print(f"trace {size / 1e6:.1f} MB, {n} events: peak {peak / 1e6:.1f} MB")  # 35.8 MB: 8.1 MB here
    assert peak < size / 3, (peak, size)

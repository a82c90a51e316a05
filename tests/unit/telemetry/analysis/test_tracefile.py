"""A Chrome trace file's traceEvents, streamed one event at a time (telemetry/analysis/tracefile.py):
the same events as json.load at every chunk boundary, in bounded memory."""

import json
import os
import tracemalloc

import pytest

from telemetry.analysis import kineto, tracefile
from telemetry.analysis.load import open_input
from tests.helpers import kineto_traces as kt

US = 1e-6


def test_streaming_reader_matches_json_load_at_every_chunk_boundary(tmp_path, monkeypatch):
    trace = kt.gpu_trace(1, steps=2)
    trace["traceEvents"].append(
        {"ph": "i", "name": "n", "ts": 12345678901234.5, "s": "g", "args": {"x": [1, 2.5e-3, None, True]}}
    )
    trace["after"] = {"unicode": "ü∑", "n": 17}
    path = str(tmp_path / "rank1.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(trace, f, indent=1, ensure_ascii=False)
    for chunk in (1, 3, 7, 64, 1 << 20):
        monkeypatch.setattr(tracefile, "_CHUNK", chunk)
        top = {}
        events = list(kineto.iter_trace(path, top))
        assert events == trace["traceEvents"], chunk
        assert top == {k: v for k, v in trace.items() if k != "traceEvents"}, chunk


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

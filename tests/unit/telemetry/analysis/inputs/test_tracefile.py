"""A Chrome trace file's traceEvents, streamed one event at a time (telemetry/analysis/inputs/tracefile.py):
the same events as json.load at every chunk boundary, in bounded memory."""

import json

from telemetry.analysis.inputs import kineto, tracefile
from tests.helpers import kineto_traces as kt


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

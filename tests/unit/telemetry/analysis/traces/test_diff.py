"""Slow rank against peer (telemetry/analysis/traces/diff.py): self time per op, kernel and collective per
step, exact on a hand-made trace, and on real CPU profiler traces the extra op of the slow side ranked
first."""

import gzip
import json

import torch

from telemetry.analysis.traces.diff import diff_text, profile, trace_diff


def write(path, events, steps=2):
    ann = [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "ts": i * 1000, "dur": 1000, "tid": 1}
        for i in range(steps)
    ]
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": ann + events}, f)
    return str(path)


def op(name, ts, dur, tid=1, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": tid}


def test_self_time_leaves_out_the_children_and_counts_per_step(tmp_path):
    events = []
    for s in range(2):
        t = s * 1000
        events += [
            op("aten::linear", t, 100),  # holds addmm (60 of its 100)
            op("aten::addmm", t + 20, 60),
            op("aten::relu", t + 200, 10),
            op("record_param_comms", t + 300, 50),
            op("ncclDevKernel_AllReduce_Sum_f32_RING_LL", t + 400, 40, tid=7, cat="kernel"),
            op("sm90_xmma_gemm", t + 500, 30, tid=7, cat="kernel"),
            op("forward", t, 600, cat="user_annotation"),  # an annotation: left out
        ]
    p = profile(write(tmp_path / "a.json.gz", events))
    per = p.per_step()
    assert p.steps == 2
    assert per[("op", "aten::linear")] == (0.04, 1.0)  # 100 - 60 us, per step
    assert per[("op", "aten::addmm")] == (0.06, 1.0)
    assert per[("collective", "record_param_comms")] == (0.05, 1.0)
    assert per[("collective", "ncclDevKernel_AllReduce_Sum_f32_RING_LL")] == (0.04, 1.0)  # a new NCCL name
    assert per[("kernel", "sm90_xmma_gemm")] == (0.03, 1.0)
    assert not [k for k in per if k[1] in ("forward",) or k[1].startswith("ProfilerStep")]


def test_the_diff_ranks_by_the_flagged_ranks_extra_time(tmp_path):
    peer = write(
        tmp_path / "peer.json.gz", [op("aten::mm", 0, 100), op("aten::mm", 1000, 100), op("aten::add", 700, 5)]
    )
    flagged = write(
        tmp_path / "flagged.json.gz",
        [op("aten::mm", 0, 300), op("aten::mm", 1000, 300), op("aten::cdist", 400, 50), op("aten::add", 700, 5)],
    )
    rows = trace_diff(profile(flagged), profile(peer))
    assert [r["name"] for r in rows] == ["aten::mm", "aten::cdist"]  # aten::add: no more than the peer
    assert rows[0] == {
        "name": "aten::mm",
        "kind": "op",
        "flagged_ms_per_step": 0.3,
        "peer_ms_per_step": 0.1,
        "ratio": 3.0,
        "flagged_count": 1.0,
        "peer_count": 1.0,
    }
    assert rows[1]["ratio"] is None and rows[1]["peer_count"] == 0  # the peer never ran it
    assert "aten::mm" in diff_text(rows, "rank 1", "rank 0")


def test_on_real_profiler_traces_the_slow_sides_extra_op_comes_first(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
    x, big = torch.randn(32, 64), torch.randn(1024, 1024)
    model(x).sum().backward()  # first calls (lazy set-up) outside both traces: the traced steps compare like with like
    torch.exp(big)

    def traced(path, extra):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(3):
                y = model(x)
                if extra:
                    for _ in range(20):
                        torch.exp(big)  # the slow rank's extra work in its forward
                y.sum().backward()
                prof.step()
        prof.export_chrome_trace(str(path))
        return str(path)

    rows = trace_diff(profile(traced(tmp_path / "flagged.json", True)), profile(traced(tmp_path / "peer.json", False)))
    assert rows[0]["name"] == "aten::exp" and rows[0]["peer_ms_per_step"] == 0.0, rows[:3]
    assert rows[0]["flagged_count"] >= 20


def test_telemetry_diff_of_two_traces_prints_the_diff(tmp_path, capsys):
    from telemetry.cli import main

    peer = write(tmp_path / "peer.json.gz", [op("aten::mm", 0, 100), op("aten::mm", 1000, 100)])
    flagged = write(tmp_path / "flagged.json.gz", [op("aten::mm", 0, 300), op("aten::mm", 1000, 300)])
    assert main(["diff", peer, flagged, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["trace_diff"][0]["name"] == "aten::mm" and doc["steps"] == {"base": 2, "new": 2}
    assert main(["diff", peer, flagged]) == 0
    assert "aten::mm" in capsys.readouterr().out
    assert main(["diff", peer, flagged, "--steps", "0:1"]) == 2  # steps are for runs

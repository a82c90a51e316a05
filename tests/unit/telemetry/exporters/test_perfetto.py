"""`telemetry export RUN_DIR --to trace.json` (telemetry/exporters/perfetto.py): Chrome trace events
Perfetto can load."""

import json
import time

import pytest

import telemetry
from telemetry.cli import main as cli


@pytest.fixture
def recorded(run_dir):
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    from tests.helpers.servers import free_port

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        telemetry.init(run_dir=run_dir, job="trace", sinks=["store"])
        for _i in range(6):
            with telemetry.step(tokens=10):
                with telemetry.phase("forward"):
                    time.sleep(0.002)
                with telemetry.phase("backward"):
                    dist.all_reduce(torch.ones(1000))
        telemetry.shutdown()
    finally:
        dist.destroy_process_group()
    return run_dir


def test_trace_has_a_process_per_rank_and_tracks_for_steps_phases_collectives(recorded, tmp_path, capsys):
    out = tmp_path / "trace.json"
    assert cli(["export", recorded, "--to", str(out)]) == 0
    assert "open it in https://ui.perfetto.dev" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    events = doc["traceEvents"]
    meta = [e for e in events if e["ph"] == "M"]
    assert {
        "name": "process_name",
        "ph": "M",
        "pid": 0,
        "args": {"name": f"rank 0 ({__import__('os').uname().nodename})"},
    } in meta
    threads = {e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert threads == {"steps", "phases", "collectives", "data wait"}
    spans = [e for e in events if e["ph"] == "X"]
    for e in spans:  # the fields every complete event needs, in microseconds
        assert {"name", "ph", "pid", "tid", "ts", "dur"} <= set(e) and e["dur"] >= 0 and e["ts"] >= 0
    steps = [e for e in spans if e["cat"] == "step"]
    assert [e["name"] for e in steps] == [f"step {i}" for i in range(6)]
    colls = [e for e in spans if e["cat"] == "collective"]
    assert len(colls) == 6 and all(e["name"] == "all_reduce" and e["args"]["bytes"] == 4000 for e in colls)
    back = [e for e in spans if e["name"] == "backward"]
    for c, b in zip(colls, back):  # each collective lies inside its phase
        assert b["ts"] <= c["ts"] and c["ts"] + c["dur"] <= b["ts"] + b["dur"] + 0.01


def test_step_range_limits_the_trace(recorded, tmp_path):
    out = tmp_path / "part.json"
    assert cli(["export", recorded, "--to", str(out), "--steps", "2:3"]) == 0
    names = [e["name"] for e in json.loads(out.read_text())["traceEvents"] if e.get("cat") == "step"]
    assert names == ["step 2", "step 3"]


def test_bad_step_range_is_refused(recorded, tmp_path, capsys):
    assert cli(["export", recorded, "--to", str(tmp_path / "x.json"), "--steps", "9:3"]) == 2
    assert "the end is before the start" in capsys.readouterr().err

"""The training-thread side of a profiler capture (telemetry/recorder/capture.py): started at the first
planned step's begin, stopped at the step after the last, written gzipped by its own thread; a plan
already past is missed, and the user's own profiler session is never disturbed."""

import gzip
import json

import torch

import telemetry
from telemetry.recorder import current
from telemetry.recorder.capture import ProfilerCapture


def steps(n, start=0):
    x = torch.randn(64, 64)
    for i in range(start, start + n):
        with telemetry.step():
            with telemetry.phase("forward"):
                torch.mm(x, x) if i != 3 else torch.exp(x)


def test_a_capture_covers_its_steps_and_is_written_gzipped(run_dir, tmp_path):
    telemetry.init(run_dir=run_dir, job="cap", sinks=["store"], online=False)
    rec = current.active()
    cap = ProfilerCapture(rec, 0)
    path = str(tmp_path / "captures" / "c1" / "rank-0.json.gz")
    cap.arm("c1", 2, 3, path)
    assert rec.capture is cap
    steps(6)
    assert rec.capture is None  # disarmed after its last step: the hot path is back to one test
    cap.join(10.0)
    assert cap.stats["taken"] == 1 and cap.stats["bytes"] > 0
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    names = [e.get("name") for e in events]
    assert names.count("aten::mm") == 1 and names.count("aten::exp") == 1  # steps 2 and 3 only
    telemetry.shutdown()


def test_a_plan_already_past_is_missed_and_the_users_profiler_is_left_alone(run_dir, tmp_path):
    telemetry.init(run_dir=run_dir, job="cap2", sinks=["store"], online=False)
    rec = current.active()
    cap = ProfilerCapture(rec, 0)
    steps(3)
    cap.arm("late", 0, 1, str(tmp_path / "late.json.gz"))
    steps(1, start=3)
    assert cap.stats["missed"] == 1 and rec.capture is None
    cap.arm("busy", 4, 5, str(tmp_path / "busy.json.gz"))
    with torch.profiler.profile() as mine:
        steps(3, start=4)
    assert cap.stats["skipped"] == 1 and not (tmp_path / "busy.json.gz").exists()
    assert any(e.name == "aten::mm" for e in mine.events())  # the user's session got its events
    telemetry.shutdown()


def test_two_plans_on_disjoint_steps_are_each_taken_in_turn(run_dir, tmp_path):
    """A baseline and a finding's capture held at once (armed in either order): each covers its steps."""
    telemetry.init(run_dir=run_dir, job="cap3", sinks=["store"], online=False)
    rec = current.active()
    cap = ProfilerCapture(rec, 0)
    later, first = str(tmp_path / "later.json.gz"), str(tmp_path / "first.json.gz")
    cap.arm("later", 4, 4, later)
    cap.arm("first", 2, 3, first)
    cap.arm("first", 2, 3, first)  # the same plan read twice: held once
    assert [p[0] for p in cap.plans] == ["first", "later"]
    steps(6)
    assert rec.capture is None
    cap.join(10.0)
    assert cap.stats["taken"] == 2
    for path, want in ((first, {"aten::mm": 1, "aten::exp": 1}), (later, {"aten::mm": 1, "aten::exp": 0})):
        with gzip.open(path, "rt") as f:
            names = [e.get("name") for e in json.load(f)["traceEvents"]]
        assert {k: names.count(k) for k in want} == want
    telemetry.shutdown()

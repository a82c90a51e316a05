"""init(profiler_ranges=True) (telemetry/recorder/ranges.py): every step and phase is also a
torch.profiler range of the same name."""

import json

import pytest

import telemetry
from telemetry.analysis.inputs.load import open_input
from telemetry.recorder import Recorder, build_recorder, current
from telemetry.recorder.cuda import EventPool
from telemetry.recorder.ranges import STEP_RANGE, RangedCudaRecorder, RangedRecorder


class FakeRanges:
    """(enter, exit) that log what a profiler would see."""

    def __init__(self):
        self.log = []

    def enter(self, name):
        self.log.append(("open", name))
        return name

    def exit(self, handle):
        self.log.append(("close", handle))

    @property
    def pair(self):
        return self.enter, self.exit


def test_on_builds_the_ranged_strategy():
    rec = build_recorder(1024, "wall", profiler_ranges=True)
    assert type(rec) is RangedRecorder
    assert type(build_recorder(1024, "wall")) is Recorder


def test_steps_and_phases_open_and_close_ranges_in_order():
    fake = FakeRanges()
    rec = RangedRecorder(1024, ranges=fake.pair, start_step=5)
    with rec.step():
        with rec.phase("forward"):
            with rec.phase("inner"):
                pass
        with pytest.raises(ValueError):
            with rec.phase("backward"):
                raise ValueError("user code")
    assert fake.log == [
        ("open", "telemetry.step#5"),
        ("open", "forward"),
        ("open", "inner"),
        ("close", "inner"),
        ("close", "forward"),
        ("open", "backward"),
        ("close", "backward"),
        ("close", "telemetry.step#5"),
    ]
    kinds = [e[0] for e in rec.drain()]
    assert kinds == [2, 2, 2, 1]  # the same events as the wall-clock recorder's


def test_a_rejected_step_or_phase_opens_no_range():
    fake = FakeRanges()
    rec = RangedRecorder(1024, ranges=fake.pair)
    with rec.step():
        with rec.step():  # nested: reported, ignored
            with rec.phase("not an identifier"):
                pass
    assert fake.log == [("open", "telemetry.step#0"), ("close", "telemetry.step#0")]


def test_decorators_and_the_active_recorder():
    fake = FakeRanges()
    rec = RangedRecorder(1024, ranges=fake.pair)

    @telemetry.step
    def train():
        with telemetry.phase("forward"):
            pass

    current.set_active(rec)
    try:
        train()
        train()
    finally:
        current.set_active(telemetry.recorder.NULL)
    assert [n for k, n in fake.log if k == "open"] == ["telemetry.step#0", "forward", "telemetry.step#1", "forward"]


class FakeEvent:
    def record(self):
        pass


def test_cuda_strategy_marks_events_and_opens_ranges():
    fake = FakeRanges()
    rec = RangedCudaRecorder(1024, EventPool(FakeEvent), ranges=fake.pair)
    with rec.step():
        with rec.phase("forward"):
            pass
    assert fake.log == [
        ("open", "telemetry.step#0"),
        ("open", "forward"),
        ("close", "forward"),
        ("close", "telemetry.step#0"),
    ]
    kinds = [e[0] for e in rec.drain()]
    assert kinds == [8, 7]  # PHASE_DEV, STEP_END_DEV
    assert rec.pool.created == 4


@pytest.mark.real_clock  # the profiler's clock against telemetry's
def test_a_real_profiler_trace_holds_the_ranges_and_reads_back(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    telemetry.init(
        run_dir=str(tmp_path / "run"),
        job="ranges",
        sinks=["store"],
        profiler_ranges=True,
        device_timing="wall",
        announce=False,
        collectives=False,
    )
    assert type(current.active()) is RangedRecorder
    a = torch.randn(64, 64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            with telemetry.step():
                with telemetry.phase("forward"):
                    b = a @ a
                with telemetry.phase("backward"):
                    b = torch.tanh(b @ a)
            prof.step()
    telemetry.shutdown()
    (tmp_path / "traces").mkdir()
    path = str(tmp_path / "traces" / "rank0.pt.trace.json")
    prof.export_chrome_trace(path)
    events = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in events if e["name"].startswith(STEP_RANGE)]
    assert [e["name"] for e in steps] == ["telemetry.step#0", "telemetry.step#1", "telemetry.step#2"]
    assert {e["cat"] for e in steps} == {"user_annotation"}
    fwd = [e for e in events if e["name"] == "forward"]
    assert len(fwd) == 3 and all(
        s["ts"] <= f["ts"] and f["ts"] + f["dur"] <= s["ts"] + s["dur"] for s, f in zip(steps, fwd)
    )
    trace = open_input(str(tmp_path / "traces")).table
    store = open_input(str(tmp_path / "run")).table
    assert trace["step"].tolist() == store["step"].tolist() == [0, 1, 2]
    assert (trace["forward_s"] > 0).all() and (trace["backward_s"] > 0).all()
    assert abs(trace["start_s"] - store["start_s"]).max() < 1e-3
    # A step's range opens just after its start is read and closes just after its end is read: the two
    # durations differ by the few microseconds between, unless the thread was preempted there (a busy
    # machine); the median over the steps holds the claim, the maximum only bounds a preemption.
    diff = abs(trace["duration_s"] - store["duration_s"])
    assert diff.median() < 1e-4 and diff.max() < 0.05, diff.tolist()


def test_environment_variable_turns_it_on(monkeypatch, tmp_path):
    pytest.importorskip("torch")
    monkeypatch.setenv("TELEMETRY_PROFILER_RANGES", "1")
    telemetry.init(
        run_dir=str(tmp_path / "run"), sinks=["store"], device_timing="wall", announce=False, collectives=False
    )
    assert type(current.active()) is RangedRecorder

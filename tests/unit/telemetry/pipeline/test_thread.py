"""The pipeline (telemetry/pipeline/thread.py): records reach every sink; a failing or hanging sink
costs only itself; a value still on the device is waited for, within a bound."""

import threading
import time

import pytest

from telemetry.pipeline.assembler import Assembler
from telemetry.pipeline.sinks import GuardedSink, Sink
from telemetry.pipeline.thread import Pipeline
from telemetry.recorder import Recorder
from telemetry.recorder import events as ev
from telemetry.recorder.values import PendingValue

NEVER = 60.0  # a flush interval the thread never reaches within a test: ticks are by hand


class FakeClock:
    """A ``perf_counter_ns`` stand-in that moves only when told to."""

    def __init__(self, t_ns=1_000_000_000):
        self.t = t_ns

    def __call__(self):
        return self.t

    def advance(self, seconds):
        self.t += round(seconds * 1e9)


class FakeMonotonic:
    def __init__(self, t=100.0):
        self.t = t

    def __call__(self):
        return self.t


class ListSink(Sink):
    name = "list"

    def __init__(self):
        self.records = []
        self.closed = False
        self._cond = threading.Condition()

    def write(self, records):
        with self._cond:
            self.records.extend(records)
            self._cond.notify_all()

    def close(self, timeout_s):
        self.closed = True

    def wait_for(self, n, timeout_s):
        with self._cond:
            return self._cond.wait_for(lambda: len(self.records) >= n, timeout_s)


class BrokenSink(Sink):
    name = "broken"

    def write(self, records):
        raise ConnectionRefusedError("backend down")


class HangingSink(Sink):
    name = "hanging"

    def __init__(self):
        self.entered = threading.Event()
        self.release = threading.Event()

    def write(self, records):
        self.entered.set()
        self.release.wait(60)

    def close(self, timeout_s):
        self.release.wait(60)


class Flag:
    """A device event stand-in: ``query()`` says whether the copy to the host has completed."""

    def __init__(self, done=False):
        self.done = done

    def query(self):
        return self.done


class HostScalar:
    def __init__(self, v):
        self.v = v

    def item(self):
        return self.v


def run_steps(rec, n, clock=None, forward_s=0.010, between_s=0.002):
    for _ in range(n):
        with rec.step():
            with rec.phase("forward"):
                if clock is not None:
                    clock.advance(forward_s)
        if clock is not None:
            clock.advance(between_s)


def to_epoch(ns):
    return ns * 1e-9


def make_pipeline(rec, *sinks, interval=NEVER, start=False):
    p = Pipeline(rec, [GuardedSink(s) for s in sinks], 0, to_epoch, interval)
    if start:
        p.start()
    return p


def test_records_reach_sinks_on_ticks_and_at_stop():
    clock = FakeClock()
    rec = Recorder(4096, clock=clock)
    good = ListSink()
    p = make_pipeline(rec, good)
    run_steps(rec, 5, clock)
    p.tick()
    p.tick()  # a finished step is held for one tick (late events), then delivered
    assert p.settle()  # each sink has a worker thread of its own: wait for it to deliver
    assert [r.step for r in good.records] == list(range(5))  # delivered while running, before any stop
    for r in good.records:  # the times are the injected clock's, exactly
        assert abs(r.duration_s - 0.010) < 1e-12 and abs(r.phases["forward"] - 0.010) < 1e-12
    assert abs(good.records[1].start_s - good.records[0].start_s - 0.012) < 1e-9
    run_steps(rec, 3, clock)
    assert p.stop(5.0)
    assert [r.step for r in good.records] == list(range(8))  # the rest at the final drain
    assert good.closed


def test_the_thread_delivers_every_interval_without_being_asked():
    rec = Recorder(4096)
    good = ListSink()
    p = make_pipeline(rec, good, interval=0.01, start=True)
    try:
        run_steps(rec, 5)
        assert good.wait_for(5, timeout_s=10.0)  # by the thread, before any stop
        assert [r.step for r in good.records] == list(range(5))
    finally:
        assert p.stop(5.0)
    assert p.stats()["ticks"] >= 2


def test_a_failing_sink_is_isolated_counted_and_logged_once(caplog):
    rec = Recorder(4096)
    good = ListSink()
    p = make_pipeline(rec, BrokenSink(), good)
    for _ in range(3):
        run_steps(rec, 2)
        p.tick()
    p.stop(5.0)
    assert len(good.records) == 6
    broken = p.stats()["sinks"]["broken"]
    assert broken["dropped"] == 6 and broken["failures"] == 3  # three non-empty batches, each refused
    assert p.stats()["sinks"]["list"]["written"] == 6 and p.stats()["pipeline_errors"] == 0
    assert caplog.text.count("sink 'broken' failed in write") == 1


def test_a_step_waits_for_its_device_value_at_most_the_pending_timeout():
    clock = FakeClock()
    rec = Recorder(4096, clock=clock)
    good = ListSink()
    p = make_pipeline(rec, good)
    mono = FakeMonotonic()
    p.assembler = Assembler(0, to_epoch, pending_timeout_s=10.0, monotonic=mono)
    late, never = Flag(), Flag()
    for flag, v in ((late, 0.5), (never, 0.25)):
        with rec.step():
            clock.advance(0.001)
            rec.emit((ev.LOG, rec.now(), {"loss": PendingValue(HostScalar(v), flag)}))
            clock.advance(0.001)
    with rec.step():
        clock.advance(0.001)
        rec.log({"loss": 0.125})
        clock.advance(0.001)
    p.tick()
    p.tick()
    assert p.settle() and good.records == []  # step 0's value is still on the device; the others wait behind it
    late.done = True
    p.tick()
    assert p.settle() and [(r.step, r.scalars) for r in good.records] == [(0, {"loss": 0.5})]
    mono.t += 9.9
    p.tick()
    assert p.settle() and len(good.records) == 1  # step 1 still within its 10 s
    mono.t += 0.2
    p.tick()
    assert p.settle()
    assert [(r.step, r.scalars) for r in good.records[1:]] == [(1, {}), (2, {"loss": 0.125})]
    assert p.stats()["unread_values"] == 1  # given up on, and counted
    assert p.stop(5.0)


@pytest.mark.real_clock  # the bound is on real elapsed time
def test_shutdown_is_bounded_when_a_sink_hangs():
    rec = Recorder(4096)
    hanging = HangingSink()
    p = make_pipeline(rec, hanging, interval=0.01, start=True)
    run_steps(rec, 3)
    assert hanging.entered.wait(10)  # the pipeline thread is now stuck in write()
    t0 = time.monotonic()
    finished = p.stop(1.0)
    elapsed = time.monotonic() - t0
    hanging.release.set()
    assert not finished
    assert elapsed < 2.0


def test_a_stuck_sink_stops_neither_training_nor_the_pipeline_nor_the_other_sinks():
    rec = Recorder(1 << 16)  # room for every event: what is measured is the sinks, not the buffer
    hanging, good = HangingSink(), ListSink()
    p = Pipeline(rec, [GuardedSink(hanging), GuardedSink(good)], 0, to_epoch, 0.01, backlog_records=1000)
    p.start()
    run_steps(rec, 1)
    assert hanging.entered.wait(10)  # its worker is stuck in write() from now on
    t0 = time.monotonic()
    for done in range(501, 5002, 500):  # batches within the backlog: the other sink keeps up
        run_steps(rec, 500)
        assert good.wait_for(done, timeout_s=10.0)  # ... and has every step
    assert time.monotonic() - t0 < 10.0
    stats = p.stats()
    assert stats["events_dropped"] == 0
    stuck = stats["sinks"][hanging.name]
    assert stuck["backlog"] <= 1000 and stuck["dropped"] == 5001 - 1 - stuck["backlog"]  # bounded, and counted
    hanging.release.set()
    p.stop(2.0)

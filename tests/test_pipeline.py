"""The pipeline thread: records reach every sink; a failing or hanging sink costs only itself."""

import threading
import time


from telemetry.pipeline import Pipeline
from telemetry.recorder import Recorder
from telemetry.sinks import GuardedSink, Sink


class ListSink(Sink):
    name = "list"

    def __init__(self):
        self.records = []
        self.closed = False

    def write(self, records):
        self.records.extend(records)

    def close(self, timeout_s):
        self.closed = True


class BrokenSink(Sink):
    name = "broken"

    def write(self, records):
        raise ConnectionRefusedError("backend down")


class HangingSink(Sink):
    name = "hanging"

    def __init__(self):
        self.release = threading.Event()

    def write(self, records):
        self.release.wait(60)

    def close(self, timeout_s):
        self.release.wait(60)


def run_steps(rec, n):
    for _ in range(n):
        with rec.step():
            with rec.phase("forward"):
                pass


def make_pipeline(rec, *sinks, interval=0.02):
    p = Pipeline(rec, [GuardedSink(s) for s in sinks], 0, lambda ns: ns * 1e-9, interval)
    p.start()
    return p


def test_records_reach_sinks_while_running_and_at_stop():
    rec = Recorder(4096)
    good = ListSink()
    p = make_pipeline(rec, good)
    run_steps(rec, 5)
    deadline = time.monotonic() + 5
    while len(good.records) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(good.records) == 5  # delivered by the thread, before any stop
    run_steps(rec, 3)
    assert p.stop(5.0)
    assert [r.step for r in good.records] == list(range(8))
    assert good.closed


def test_a_failing_sink_is_isolated_counted_and_logged_once(caplog):
    rec = Recorder(4096)
    good = ListSink()
    p = make_pipeline(rec, BrokenSink(), good)
    for _ in range(3):
        run_steps(rec, 2)
        time.sleep(0.06)
    p.stop(5.0)
    assert len(good.records) == 6
    broken = p.stats()["sinks"]["broken"]
    assert broken["dropped"] == 6 and broken["failures"] >= 2
    assert caplog.text.count("sink 'broken' failed in write") == 1


def test_shutdown_is_bounded_when_a_sink_hangs():
    rec = Recorder(4096)
    hanging = HangingSink()
    p = make_pipeline(rec, hanging)
    run_steps(rec, 3)
    time.sleep(0.1)  # the pipeline thread is now stuck in write()
    t0 = time.monotonic()
    finished = p.stop(1.0)
    elapsed = time.monotonic() - t0
    hanging.release.set()
    assert not finished
    assert elapsed < 2.0


def test_training_thread_never_waits_for_a_stuck_pipeline():
    rec = Recorder(2048)
    hanging = HangingSink()
    p = make_pipeline(rec, hanging)
    run_steps(rec, 1)
    time.sleep(0.1)
    t0 = time.monotonic()
    run_steps(rec, 5000)  # the buffer fills; the loop carries on, dropping and counting
    assert time.monotonic() - t0 < 5.0
    assert rec.dropped > 0
    hanging.release.set()
    p.stop(2.0)
    assert p.stats()["events_dropped"] == rec.dropped

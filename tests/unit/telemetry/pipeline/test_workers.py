"""Each sink on its own worker thread (telemetry/pipeline/workers.py): one call at a time and in order,
on one thread; heartbeats superseded, never queued; a bounded backlog with counted drops; a stuck
sink said once, and abandoned at the shutdown deadline with what it held counted."""

import logging
import threading
import time

from telemetry.pipeline.records import OnlineResult, Progress
from telemetry.pipeline.sinks import GuardedSink, Sink
from telemetry.pipeline.workers import SinkWorker


class Rec:
    """The least of a StepRecord a sink here looks at."""

    def __init__(self, step):
        self.step = step


def progress(n, finished=False):
    return Progress(
        rank=0,
        time_s=float(n),
        last_step=n,
        last_step_end_s=float(n),
        open_step=None,
        open_step_since_s=None,
        phase=None,
        collective=None,
        collective_since_s=None,
        finished=finished,
    )


class Recording(Sink):
    """Records each call, the thread it came on, and whether two calls ever overlapped."""

    name = "recording"

    def __init__(self, delay_s=0.0):
        self.calls = []
        self.threads = set()
        self.delay_s = delay_s
        self._inside = 0
        self.overlapped = False
        self.gate = threading.Event()
        self.gate.set()

    def _enter(self, what):
        self._inside += 1
        self.overlapped |= self._inside > 1
        self.threads.add(threading.get_ident())
        self.gate.wait(30)
        time.sleep(self.delay_s)
        self.calls.append(what)
        self._inside -= 1

    def write(self, records):
        self._enter(("write", [r.step for r in records]))

    def progress(self, p):
        self._enter(("progress", p.last_step))

    def findings(self, result):
        self._enter(("findings", result.counts))

    def flush(self, timeout_s):
        self._enter(("flush",))

    def close(self, timeout_s):
        self._enter(("close",))


def worker(sink, max_records=1000, stall_after_s=30.0):
    return SinkWorker(GuardedSink(sink), max_records, 0.05, stall_after_s=stall_after_s)


def test_calls_come_one_at_a_time_in_order_on_one_thread_that_is_not_the_callers():
    sink = Recording(delay_s=0.001)
    w = worker(sink)
    for i in range(20):
        w.write([Rec(i)])
        if i == 10:
            w.findings(OnlineResult([], {}, {"straggler": 1}))
    w.progress(progress(19))
    assert w.settle(time.monotonic() + 10)
    writes = [c[1] for c in sink.calls if c[0] == "write"]
    assert writes == [[i] for i in range(20)]
    assert sink.calls.index(("findings", {"straggler": 1})) == 11  # after write 10, before write 11
    assert sink.calls[-2:] == [("progress", 19), ("flush",)]  # the heartbeat, then a flush
    assert not sink.overlapped and len(sink.threads) == 1 and threading.get_ident() not in sink.threads
    w.close(time.monotonic() + 5)
    assert w.join(time.monotonic() + 5) and sink.calls[-1] == ("close",)


def test_a_heartbeat_supersedes_the_one_not_yet_delivered():
    sink = Recording()
    sink.gate.clear()  # the sink is busy: heartbeats arrive while it is
    w = worker(sink)
    w.write([Rec(0)])
    for n in range(1, 50):
        w.progress(progress(n))
    sink.gate.set()
    assert w.settle(time.monotonic() + 10)
    assert [c for c in sink.calls if c[0] == "progress"] == [("progress", 49)]


def test_the_backlog_is_bounded_and_what_does_not_fit_is_counted(caplog):
    sink = Recording()
    sink.gate.clear()  # stuck inside its first write
    w = worker(sink, max_records=10)
    w.write([Rec(0)])
    deadline = time.monotonic() + 10
    while w.busy_call is None and time.monotonic() < deadline:
        time.sleep(0.001)  # until the worker is inside write() (then its backlog is empty)
    with caplog.at_level(logging.WARNING, logger="telemetry"):
        w.write([Rec(i) for i in range(1, 8)])  # 7 fit
        w.write([Rec(i) for i in range(8, 14)])  # 3 of 6 fit
        w.write([Rec(14)])  # none
    stats = w.stats()
    assert stats["backlog"] == 10 and stats["dropped"] == 4
    assert "step record(s) never reached the sink" in stats["dropped_detail"]
    assert caplog.text.count("backlog of 10 records is full") == 1
    sink.gate.set()
    assert w.settle(time.monotonic() + 10)
    assert [s for c in sink.calls if c[0] == "write" for s in c[1]] == list(range(11))


def test_a_stuck_sink_is_said_once_and_abandoned_at_the_deadline_with_its_backlog_counted(caplog):
    sink = Recording()
    sink.gate.clear()
    w = worker(sink, stall_after_s=0.05)
    w.write([Rec(0)])
    w.write([Rec(1), Rec(2)])
    deadline = time.monotonic() + 10
    while w.busy_call is None and time.monotonic() < deadline:
        time.sleep(0.001)
    while time.monotonic() - w.busy_since < 0.06:  # past stall_after_s (0.05 s), on the worker's own clock
        time.sleep(0.005)
    with caplog.at_level(logging.WARNING, logger="telemetry"):
        w.check_stalled()
        w.check_stalled()
        t0 = time.monotonic()
        w.close(t0 + 0.3)
        assert not w.join(t0 + 0.3)
        assert time.monotonic() - t0 < 1.0
    assert caplog.text.count("has been inside write()") == 1
    assert w.stats()["dropped"] == 2 and "still queued at the shutdown deadline" in w.stats()["dropped_detail"]
    sink.gate.set()  # let the thread end


def test_records_handed_after_close_are_counted_not_queued():
    sink = Recording()
    w = worker(sink)
    w.close(time.monotonic() + 5)
    assert w.join(time.monotonic() + 5)
    w.write([Rec(0), Rec(1)])
    assert w.stats()["dropped"] == 2 and ("write", [0, 1]) not in sink.calls

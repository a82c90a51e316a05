"""Each sink on a thread of its own (:class:`SinkWorker`), behind a bounded backlog, so that one sink that
blocks (an NFS stall under the run store, a socket with no timeout, a user's sink) delays no other
sink, no step of training and no shutdown beyond its bound.

The pipeline thread hands a worker each batch, online result and the latest heartbeat and never
waits; the worker calls its sink (through :class:`~telemetry.pipeline.sinks.GuardedSink`) one call at a
time, in order, so a sink need not be thread-safe. A batch over ``max_records`` is dropped and counted,
a call past ``stall_after_s`` is said once, and a worker still in a call at the shutdown deadline is
abandoned (a daemon thread; what it held counts as dropped). A thread per sink, not one thread with a
watchdog: a Python call cannot be interrupted, so a watchdog could not free the thread a sink holds.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Callable, Sequence, TypeVar

from ..logonce import LogOnce
from .records import OnlineResult, Progress, StepRecord, TraceRoots
from .sinks import GuardedSink

A = TypeVar("A")

log = logging.getLogger("telemetry")
STALL_AFTER_S = 30.0  # a sink call running this long is said (once per sink)
_WRITE, _FINDINGS = 0, 1


class SinkWorker:
    """One sink, its backlog and its thread. The pipeline thread calls :meth:`write`,
    :meth:`findings` and :meth:`progress` (none blocks); :meth:`close` ends the worker within a
    deadline. ``stats()`` may be called from any thread."""

    def __init__(
        self,
        sink: GuardedSink,
        max_records: int,
        flush_interval_s: float,
        stall_after_s: float = STALL_AFTER_S,
    ) -> None:
        self.sink = sink
        self.name = sink.name
        self.max_records = max_records
        self.flush_interval_s = flush_interval_s
        self.stall_after_s = stall_after_s
        self._cv = threading.Condition(threading.Lock())
        self._queue: collections.deque = collections.deque()  # (_WRITE, records) | (_FINDINGS, result)
        self._queued_records = 0
        self._progress: Progress | None = None  # the latest heartbeat not yet delivered
        self._working = False  # inside a sink call (under the lock: settle() waits for idle)
        self._closing_deadline: float | None = None
        self._finished = threading.Event()
        self.dropped_records = 0  # records that did not fit in the backlog, or were abandoned at shutdown
        self.abandoned_records = 0
        self.busy_call: str | None = None  # the sink call in progress, and since when (monotonic)
        self.busy_since: float | None = None
        self._stall_said = False
        self._once = LogOnce()
        self._thread = threading.Thread(target=self._run, name=f"telemetry-sink-{self.name}", daemon=True)
        self._thread.start()

    # ---- the pipeline thread ----------------------------------------------------------
    def write(self, records: Sequence[StepRecord]) -> None:
        if not records:
            return
        with self._cv:
            room = 0 if self._closing_deadline is not None else max(0, self.max_records - self._queued_records)
            if room:
                taken = records if len(records) <= room else records[:room]
                self._queue.append((_WRITE, taken))
                self._queued_records += len(taken)
                self._cv.notify()
            lost = len(records) - min(room, len(records))
            self.dropped_records += lost
        if lost and self._closing_deadline is None:
            self._once(
                "full",
                "telemetry: sink %r is %s; its backlog of %d records is full: new records for it are dropped "
                "and counted (train_telemetry_dropped_total{sink=%r}); the other sinks and training go on",
                self.name,
                self._busy_text(),
                self.max_records,
                self.name,
            )

    def findings(self, result: OnlineResult | TraceRoots) -> None:
        with self._cv:
            if self._closing_deadline is None:
                self._queue.append((_FINDINGS, result))
                self._cv.notify()

    def progress(self, progress: Progress) -> None:
        with self._cv:
            if self._closing_deadline is None or progress.finished:
                self._progress = progress  # supersedes an older one not yet delivered
                self._cv.notify()

    def check_stalled(self, now: float | None = None) -> None:
        """Say once that the sink's current call has run longer than ``stall_after_s``."""
        since = self.busy_since
        if since is None or self._stall_said:
            return
        if (now if now is not None else time.monotonic()) - since >= self.stall_after_s:
            self._stall_said = True
            log.warning(
                "telemetry: sink %r has been inside %s() for %.0f s; it is isolated: the other sinks and "
                "training go on, and at most %d records wait for it (more are dropped and counted)",
                self.name,
                self.busy_call,
                time.monotonic() - since,
                self.max_records,
            )

    def close(self, deadline: float) -> None:
        """Deliver what is queued, then close the sink, all before ``deadline`` (monotonic); does
        not wait (see :meth:`join`)."""
        with self._cv:
            if self._closing_deadline is None:
                self._closing_deadline = deadline
                self._cv.notify()

    def settle(self, deadline: float) -> bool:
        """Wait until everything handed to the worker so far is delivered (and flushed); False if it
        is still busy at ``deadline`` (monotonic)."""
        with self._cv:
            while self._queue or self._progress is not None or self._working:
                left = deadline - time.monotonic()
                if left <= 0 or self._finished.is_set():
                    return not (self._queue or self._progress is not None or self._working)
                self._cv.wait(left)
            return True

    def join(self, deadline: float) -> bool:
        """Wait for the worker to finish until ``deadline``; False (and what it held counted as
        dropped) when it is still inside a call then."""
        self._finished.wait(max(0.0, deadline - time.monotonic()))
        if self._finished.is_set():
            return True
        with self._cv:
            held = self._queued_records
            self._queue.clear()
            self._queued_records = 0
            self.abandoned_records += held
            self.dropped_records += held
        log.warning(
            "telemetry: sink %r did not finish by the shutdown deadline (%s); %d queued record(s) were not delivered",
            self.name,
            self._busy_text(),
            held,
        )
        return False

    # ---- the worker's thread ----------------------------------------------------------
    def _run(self) -> None:
        try:
            while True:
                with self._cv:
                    self._working = False
                    self._cv.notify_all()  # settle() waits for an idle worker
                    while not self._queue and self._progress is None and self._closing_deadline is None:
                        self._cv.wait()
                    self._working = True
                    item = self._queue.popleft() if self._queue else None
                    if item is not None and item[0] == _WRITE:
                        self._queued_records -= len(item[1])
                    progress = None
                    if item is None:  # the queue is drained: the latest heartbeat, then a flush
                        progress, self._progress = self._progress, None
                    closing = self._closing_deadline if item is None and progress is None else None
                if item is not None:
                    if item[0] == _WRITE:
                        self._call("write", self.sink.write, item[1])
                    elif isinstance(item[1], TraceRoots):
                        self._call("trace_roots", self.sink.trace_roots, item[1])
                    else:
                        self._call("findings", self.sink.findings, item[1])
                elif progress is not None:
                    self._call("progress", self.sink.progress, progress)
                    if self._closing_deadline is None:
                        self._call("flush", self.sink.flush, self.flush_interval_s)
                elif closing is not None:
                    # 90% of what is left, so that a sink that gives up can still count its losses
                    self._call("close", self.sink.close, max(0.05, 0.9 * (closing - time.monotonic())))
                    return
        finally:
            self._finished.set()

    def _call(self, what: str, fn: Callable[[A], object], arg: A) -> None:
        self.busy_call, self.busy_since = what, time.monotonic()
        try:
            fn(arg)  # GuardedSink: never raises
        finally:
            self.busy_call, self.busy_since = None, None

    def _busy_text(self) -> str:
        since, call = self.busy_since, self.busy_call
        if since is None:
            return "behind"
        return f"inside {call}() for {time.monotonic() - since:.1f} s"

    def stats(self) -> dict[str, Any]:
        out = self.sink.stats()
        # the sink counts its losses in step records, or in its own unit (otlp: spans; then records apart)
        key = "dropped" if out.get("dropped_unit", "records") == "records" else "records_dropped"
        out[key] = out.get(key, 0) + self.dropped_records
        out["backlog"] = self._queued_records
        since = self.busy_since
        if since is not None and time.monotonic() - since >= self.flush_interval_s:
            out["blocked_s"] = round(time.monotonic() - since, 3)
        if self.dropped_records:
            detail = f"{self.dropped_records} step record(s) never reached the sink (its backlog was full"
            detail += (
                f", or {self.abandoned_records} still queued at the shutdown deadline)"
                if self.abandoned_records
                else ")"
            )
            out["dropped_detail"] = "; ".join(filter(None, (out.get("dropped_detail", ""), detail)))
        return out

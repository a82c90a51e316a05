"""The pipeline thread: drain the recorder, assemble step records, hand them to the sinks.

Every ``flush_interval_s`` it drains the buffer, builds records, hands them to each sink's worker
(:mod:`.workers`: a thread and a bounded backlog per sink, so that a sink that fails or blocks costs
only itself), gives them to each listener (online detection) and hands the listeners' results to
the sinks, and sends a progress heartbeat (each worker flushes its sink after delivering it). It
never runs user code and never waits for a sink. ``stop()`` does a last drain and closes every
sink at once within a deadline; whatever could not be delivered by then is counted.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Protocol, Sequence

from ..logonce import LogOnce
from ..recorder import Recorder
from .assembler import Assembler
from .records import OnlineResult, Progress, StepRecord, TraceRoots
from .sinks import GuardedSink
from .workers import SinkWorker

log = logging.getLogger("telemetry")
FINISH_S = 1.5  # at shutdown, a listener's last results may take this long (and 30% of what is left)


class Listener(Protocol):
    """Sees every batch of new records on the pipeline thread (online detection is one); may have
    results for the sinks. Must not block: slow work belongs on a thread of its own."""

    def on_records(self, records: Sequence[StepRecord]) -> object: ...  # what it returns is not read

    def poll(self) -> Sequence[OnlineResult | TraceRoots]:
        """Results ready since the last call (each handed to every sink: ``findings`` or ``trace_roots``)."""
        ...

    def stats(self) -> dict[str, Any]: ...

    def stop(self) -> None: ...

    # optional: ``finish(budget_s) -> results``, at shutdown after the last records (see Pipeline.stop)


class Pipeline:
    def __init__(
        self,
        recorder: Recorder,
        sinks: list[GuardedSink],
        rank: int,
        to_epoch_s: Callable[[int], float],
        interval_s: float,
        flops_per_token: float = 0.0,
        peak_flops: float = 0.0,
        release_events: Callable[[list], None] | None = None,
        backlog_records: int = 8192,
        hold: bool = False,
    ) -> None:
        self.recorder = recorder
        self.sinks = sinks
        self.backlog_records = backlog_records
        self.workers = [SinkWorker(s, backlog_records, interval_s) for s in sinks]
        # Until the rank is known (hold): records wait here, at most backlog_records, for attach().
        self.holding = hold
        self.held: list[StepRecord] = []
        self.held_dropped = 0
        self.rank = rank
        self.interval_s = interval_s
        self._to_epoch = to_epoch_s
        self.assembler = Assembler(
            rank, to_epoch_s, flops_per_token=flops_per_token, peak_flops=peak_flops, release_events=release_events
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.records = 0
        self.ticks = 0
        self.errors = 0
        self.finished = False
        self._tick_lock = threading.Lock()
        self.listeners: list[Listener] = []
        self._once = LogOnce()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="telemetry-pipeline", daemon=True)
        self._thread.start()

    def add_listener(self, listener: Listener) -> None:
        self.listeners.append(listener)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.tick()

    def tick(self, final: bool = False) -> None:
        with self._tick_lock:
            try:
                events = self.recorder.drain()
                records = self.assembler.feed(events)
                if final:
                    records.extend(self.assembler.flush_waiting())
                self.records += len(records)
                self.ticks += 1
                if self.holding:
                    self._hold(records)
                for worker in self.workers:
                    worker.write(records)
                for listener in self.listeners:
                    self._listen(listener, records)
                progress = self.progress(finished=final)
                for worker in self.workers:
                    worker.progress(progress)
                    worker.check_stalled()
            except Exception:  # noqa: BLE001 - the pipeline must outlive its own bugs
                self.errors += 1
                self._once("tick", "telemetry: pipeline tick failed (further failures counted)", exc_info=True)

    def _hold(self, records: list[StepRecord]) -> None:
        room = max(0, self.backlog_records - len(self.held))
        self.held.extend(records[:room])
        self.held_dropped += max(0, len(records) - room)

    def attach(self, sinks: list[GuardedSink], rank: int) -> None:
        """The rank is known now: this pipeline's records are ``rank``'s from here on, the sinks start
        receiving them, and what was held for it is handed on first, as ``rank``'s records. Called on
        the pipeline thread (by a listener) or before the thread starts."""
        self.rank = rank
        self.assembler.rank = rank
        self.sinks = list(sinks)
        self.workers = [SinkWorker(s, self.backlog_records, self.interval_s) for s in self.sinks]
        held, self.held, self.holding = self.held, [], False
        records = [r._replace(rank=rank) for r in held]
        for worker in self.workers:
            worker.write(records)

    def _listen(self, listener: Listener, records: list[StepRecord]) -> None:
        try:
            listener.on_records(records)
            results = listener.poll()
        except Exception:  # noqa: BLE001 - a listener costs only itself
            self._once(
                f"listener:{type(listener).__name__}",
                "telemetry: %s failed (further failures counted)",
                type(listener).__name__,
                exc_info=True,
            )
            return
        for result in results:
            for worker in self.workers:
                worker.findings(result)

    def _finish_listeners(self, deadline: float) -> None:
        """At shutdown, after the last tick: each listener that has ``finish(budget_s)`` gets a bounded
        share of what is left of the deadline for its last results (online detection's last blocks)."""
        for listener in self.listeners:
            finish = getattr(listener, "finish", None)
            if finish is None:
                continue
            budget = min(FINISH_S, 0.3 * max(0.0, deadline - time.monotonic()))
            try:
                results = finish(budget)
            except Exception:  # noqa: BLE001 - a listener costs only itself
                self._once(
                    f"finish:{type(listener).__name__}",
                    "telemetry: %s failed at shutdown",
                    type(listener).__name__,
                    exc_info=True,
                )
                continue
            for result in results:
                for worker in self.workers:
                    worker.findings(result)

    def progress(self, finished: bool = False) -> Progress:
        rec = self.recorder
        open_step = rec.open_step
        coll = rec.current_collective or rec.waiting_collective
        return Progress(
            rank=self.rank,
            time_s=time.time(),
            last_step=self.assembler.last_step,
            last_step_end_s=self.assembler.last_step_end_s,
            open_step=open_step[0] if open_step else None,
            open_step_since_s=self._to_epoch(open_step[1]) if open_step else None,
            phase=rec.current_phase,
            collective=coll[0] if coll else None,
            collective_since_s=self._to_epoch(coll[1]) if coll else None,
            finished=finished,
            device=self.assembler.last_device,
            collective_gid=(coll[2] or None) if coll and len(coll) > 3 else None,
            collective_seq=coll[3] if coll and len(coll) > 3 and coll[3] >= 0 else None,
        )

    def stop(self, timeout_s: float, before_final: Callable[[], None] | None = None) -> bool:
        """Final drain and close within ``timeout_s``; returns False if the deadline passed.
        ``before_final`` runs once the thread has stopped, before the last drain (the session's last
        chance to attach the sinks of a rank it was still waiting for)."""
        deadline = time.monotonic() + timeout_s
        self._stop.set()
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
        done = threading.Event()

        def final() -> None:
            if before_final is not None:
                try:
                    before_final()
                except Exception:  # noqa: BLE001 - shutdown goes on: what was held is then counted lost
                    self._once("before_final", "telemetry: starting the sinks at shutdown failed", exc_info=True)
            self.tick(final=True)
            self._finish_listeners(deadline)
            for worker in self.workers:  # all at once: a sink that blocks costs the others nothing
                worker.close(deadline)
            if all([worker.join(deadline) for worker in self.workers]):
                done.set()

        closer = threading.Thread(target=final, name="telemetry-shutdown", daemon=True)
        closer.start()
        closer.join(max(0.0, deadline - time.monotonic()) + 0.1)  # the workers' joins end at the deadline
        self.finished = done.is_set()
        if not self.finished:
            log.warning(
                "telemetry: shutdown passed its %.1f s deadline; %d buffered events and "
                "undelivered sink data are abandoned",
                timeout_s,
                self.recorder.buffered,
            )
        return self.finished

    def settle(self, timeout_s: float = 5.0) -> bool:
        """Wait until every sink's worker has delivered what it was handed (tests, and a caller that
        must see the sinks up to date); False if one is still busy at ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        return all([worker.settle(deadline) for worker in self.workers])

    def stats(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "held_dropped": self.held_dropped,
            "ticks": self.ticks,
            "pipeline_errors": self.errors,
            "events_dropped": self.recorder.dropped,
            "events_buffered": self.recorder.buffered,
            "unread_values": self.assembler.unread_values,
            "nonfinite_values": self.assembler.nonfinite_values,
            "usage_errors": dict(self.recorder.usage.counts),
            "sinks": {w.name: w.stats() for w in self.workers},
            **{k: v for listener in self.listeners for k, v in listener.stats().items()},
        }

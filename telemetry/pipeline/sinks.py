"""The one small interface every sink implements (:class:`Sink`), and the guard that isolates a failing one.

A sink receives batches of :class:`~telemetry.pipeline.records.StepRecord` on a worker thread of its
own (:mod:`.workers`), one call at a time: it need not be thread-safe, and one that blocks delays only
itself (its backlog is bounded; what does not fit is dropped and counted). Sinks are found as entry
points of the group ``training_telemetry.sinks`` (:mod:`telemetry.plugins`; the built-in ones too), so
the recorder imports no exporter and a new backend is one new module plus one entry point.

>>> class Printer(Sink):
...     name = "printer"
...     def write(self, records):
...         for r in records: print(r.rank, r.step)
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .. import plugins
from ..logonce import LogOnce
from .records import OnlineResult, Progress, StepRecord, TraceRoots

if TYPE_CHECKING:
    from ..config import Config
    from ..rank import RankContext

# run_info key: a started OTLP sink sets it to a factory of its step samplers (which steps it traces):
# the Prometheus sink puts exemplars on those steps, online detection posts their extents.
TRACE_SAMPLER = "trace_sampler"

log = logging.getLogger("telemetry")


class Sink:
    """Receives step records. ``write``, ``progress``, ``findings``, ``flush`` and ``close`` are called
    from the sink's own worker thread, one at a time and in order (never from the training thread);
    the constructor, ``describe`` and ``stats`` may be called from others."""

    name = "sink"

    def write(self, records: Sequence[StepRecord]) -> None:
        raise NotImplementedError

    def progress(self, progress: Progress) -> None:
        """A heartbeat of what the rank is doing now (about once per flush interval)."""

    def findings(self, result: OnlineResult) -> None:
        """An online analysis: new findings, per-rank straggler scores, counts by kind (rank 0 only)."""

    def trace_roots(self, roots: TraceRoots) -> None:
        """Traced steps' extents across ranks, read by online detection (rank 0 only; the OTLP sink)."""

    def flush(self, timeout_s: float) -> None:
        """Deliver what was written so far, giving up after ``timeout_s``."""

    def close(self, timeout_s: float) -> None:
        """Flush and release resources; the sink receives nothing afterwards."""

    def stats(self) -> dict[str, Any]:
        """Sink-specific health numbers. ``dropped``: what the sink accepted but could not deliver,
        in ``dropped_unit`` (default step records; the otlp sink counts spans), with
        ``dropped_detail``, one line saying how many of what and why, for the shutdown warning."""
        return {}

    def describe(self) -> str | None:
        """Where this sink's data can be seen, for the line each process prints at start (e.g.
        ``metrics http://127.0.0.1:9464/metrics``); None to say nothing."""
        return None


class GuardedSink:
    """Wraps a sink so that its failures are counted, logged once per kind, and never propagate.

    Every exception of the sink's work is caught, SystemExit and KeyboardInterrupt included: that
    work runs on the pipeline (or shutdown) thread, never the training thread, so neither can be
    the user's Ctrl-C or exit there, and one escaping (a client library that calls sys.exit) would
    end the pipeline thread silently and with it all telemetry of the process. ``describe`` and
    ``stats``, which the training thread calls, let those two through."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.name = sink.name
        self.failures = 0
        self.dropped_records = 0
        self.written_records = 0
        self.closed = False
        self._once = LogOnce()

    def _fail(self, what: str, exc: BaseException) -> None:
        self.failures += 1
        self._once(
            f"{what}:{type(exc).__name__}",
            "telemetry: sink %r failed in %s: %s: %s (isolated; further failures of this kind are counted, not logged)",
            self.name,
            what,
            type(exc).__name__,
            exc,
        )

    def write(self, records: Sequence[StepRecord]) -> None:
        if self.closed or not records:
            if self.closed:
                self.dropped_records += len(records)
            return
        try:
            self.sink.write(records)
            self.written_records += len(records)
        except BaseException as exc:  # noqa: BLE001 - a sink must never break the pipeline (class note)
            self.dropped_records += len(records)
            self._fail("write", exc)

    def progress(self, progress: Progress) -> None:
        if self.closed:
            return
        try:
            self.sink.progress(progress)
        except BaseException as exc:  # noqa: BLE001 - a sink must never break the pipeline (class note)
            self._fail("progress", exc)

    def findings(self, result: OnlineResult) -> None:
        if self.closed:
            return
        try:
            self.sink.findings(result)
        except BaseException as exc:  # noqa: BLE001 - a sink must never break the pipeline (class note)
            self._fail("findings", exc)

    def trace_roots(self, roots: TraceRoots) -> None:
        if self.closed:
            return
        try:
            self.sink.trace_roots(roots)
        except BaseException as exc:  # noqa: BLE001 - a sink must never break the pipeline (class note)
            self._fail("trace_roots", exc)

    def flush(self, timeout_s: float) -> None:
        if self.closed:
            return
        try:
            self.sink.flush(timeout_s)
        except BaseException as exc:  # noqa: BLE001 - a sink must never break the pipeline (class note)
            self._fail("flush", exc)

    def close(self, timeout_s: float) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.sink.close(timeout_s)
        except BaseException as exc:  # noqa: BLE001 - a sink must never break the pipeline (class note)
            self._fail("close", exc)

    def describe(self) -> str | None:
        try:
            return self.sink.describe()
        except Exception as exc:  # noqa: BLE001 - called at init, on the training thread: Ctrl-C passes
            self._fail("describe", exc)
            return None

    def stats(self) -> dict[str, Any]:
        try:
            extra = dict(self.sink.stats())
        except Exception:  # noqa: BLE001 - a sink's own health numbers are optional
            extra = {}
        sink_dropped = int(extra.pop("dropped", 0))
        sink_failures = int(extra.pop("failures", 0))  # a sink that catches its own errors counts them
        out = {"written": self.written_records, "failures": self.failures + sink_failures, **extra}
        if extra.get("dropped_unit", "records") == "records":
            out["dropped"] = self.dropped_records + sink_dropped
        else:  # the sink counts its losses in another unit (otlp: spans): the guard's, records, apart
            out["dropped"] = sink_dropped
            out["records_dropped"] = self.dropped_records
            if self.dropped_records:
                out["dropped_detail"] = "; ".join(
                    filter(
                        None,
                        (
                            f"{self.dropped_records} step record(s) the sink failed to take",
                            extra.get("dropped_detail", ""),
                        ),
                    )
                )
        return out


class SinkStartError(RuntimeError):
    """A sink cannot start as the user asked, and they asked to be told (``strict``): raised by
    ``init`` rather than the sink being skipped."""


def build_sinks(config: "Config", ctx: "RankContext", run_info: dict[str, Any]) -> list[GuardedSink]:
    """Instantiate the configured sinks; one that cannot start is skipped with one warning (or,
    when it raises :class:`SinkStartError`, ``init`` fails with its message)."""
    out = []
    for name in config.sinks:
        try:
            factory: Callable[..., Sink | None] = plugins.load(plugins.SINKS, name)
        except (KeyError, ImportError) as exc:
            log.warning("telemetry: sink %r is unavailable (%s); continuing without it", name, exc)
            continue
        try:
            sink = factory(config, ctx, run_info)
        except SinkStartError:
            for started in out:  # init fails: the sinks already started are closed, not left open
                started.close(1.0)
            raise
        except Exception as exc:  # noqa: BLE001 - e.g. an unwritable run dir, a port in use
            log.warning(
                "telemetry: sink %r disabled: %s: %s; training continues without it", name, type(exc).__name__, exc
            )
            continue
        if sink is not None:
            out.append(GuardedSink(sink))
    return out

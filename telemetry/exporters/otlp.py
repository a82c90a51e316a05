"""OpenTelemetry traces (and optionally metrics) over OTLP, built after the fact: the ``otlp`` sink.

The pipeline thread turns each exported step record into spans with the exact recorded times: each
rank's ``train.rank_step`` (children per phase, per collective inside its phase, and the data wait)
under the job's ``train.step`` root, which rank 0 emits late, from every rank's step extents that
online detection carries (:class:`~telemetry.pipeline.records.TraceRoots`), else from its own span.
Trace ids come from (job, step), so all ranks' spans of a step are one trace with no communication;
which steps are traced: :class:`StepSampler`. Spans wait in a bounded queue for a worker thread, so a
dead collector costs only that thread, and ``stats()`` accounts for every span. The shapes, the
exporters, sampling and the accounting: docs/exporters.md, "OpenTelemetry".
"""

from __future__ import annotations

import collections
import logging
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Sequence

from opentelemetry import trace as otel_trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags

from telemetry.logonce import LogOnce
from telemetry.pipeline import records as rt
from telemetry.pipeline.records import StepRecord, TraceRoots, span_extent
from telemetry.pipeline.sinks import TRACE_SAMPLER, Sink
from telemetry.traceids import StepSampler, step_root_span_id, trace_id

from .otel_sdk import ErrorNote, route_sdk_loggers, sdk_calls, traces_exporter

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

    from telemetry.config import Config
    from telemetry.rank import RankContext

log = logging.getLogger("telemetry")

QUEUE_SPANS = 8192
ROOT_WAIT_S = 30.0  # rank 0 holds its own root this long for the other ranks' extents
ROOTS_HELD = 4096  # at most this many roots held (the oldest goes out on rank 0's own extent)
ROOTS_DONE = 4096  # steps whose root went out, remembered so that none goes out twice
BATCH_SPANS = 512
DROP_REASONS = ("queue_full", "export_failed", "closed_before_delivery")


class _PresetIds(RandomIdGenerator):
    """Random ids, except the ones the sink sets for the step root it is about to start."""

    def __init__(self) -> None:
        self.next_trace: int | None = None
        self.next_span: int | None = None

    def generate_trace_id(self) -> int:
        if self.next_trace is not None:
            value, self.next_trace = self.next_trace, None
            return value
        return super().generate_trace_id()

    def generate_span_id(self) -> int:
        if self.next_span is not None:
            value, self.next_span = self.next_span, None
            return value
        return super().generate_span_id()


class _Collect(SpanProcessor):
    """Ended spans go to the sink's bounded queue (never exported on the pipeline thread)."""

    def __init__(self, sink: "OtlpSink") -> None:
        self.sink = sink

    def on_end(self, span: ReadableSpan) -> None:
        self.sink._enqueue(span)


def _endpoint(base: str, protocol: str) -> str:
    if protocol == "grpc":
        return base
    base = base.rstrip("/")
    return base if base.endswith("/v1/traces") else base + "/v1/traces"


def make_span_exporter(config: Config) -> SpanExporter:
    """The span exporter ``traces_exporter(config)`` names: the SDK's ConsoleSpanExporter on this
    process's stdout, or an OTLP exporter (HTTP/protobuf or gRPC) to ``otlp_endpoint``."""
    kind = traces_exporter(config)
    if kind == "none":
        raise ValueError("OTEL_TRACES_EXPORTER=none: no traces are exported")
    if kind == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(out=sys.stdout)  # the stdout of now (the default is import time's)
    if not config.otlp_endpoint:
        raise ValueError(
            "no OTLP endpoint: set otlp_endpoint or OTEL_EXPORTER_OTLP_ENDPOINT "
            "(or OTEL_TRACES_EXPORTER=console to print spans without a collector)"
        )
    endpoint = _endpoint(config.otlp_endpoint, config.otlp_protocol)
    if config.otlp_protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc

        return Grpc(endpoint=endpoint, insecure=endpoint.startswith("http://"), timeout=config.otlp_timeout_s)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

    return Http(endpoint=endpoint, timeout=config.otlp_timeout_s)


class OtlpSink(ErrorNote, Sink):
    name = "otlp"

    def __init__(
        self, config: Config, ctx: RankContext, run_info: dict[str, Any], exporter: SpanExporter | None = None
    ) -> None:
        self.kind = traces_exporter(config)
        if self.kind == "none":
            raise ValueError("OTEL_TRACES_EXPORTER=none: no traces are exported")
        route_sdk_loggers()
        self.job = config.job
        self.rank = ctx.rank
        self.every = config.otlp_sample_every
        self.target = "stdout" if self.kind == "console" else _endpoint(config.otlp_endpoint, config.otlp_protocol)
        self.resource = Resource.create(
            {
                "service.name": config.job,
                "service.namespace": "training",
                "training.rank": ctx.rank,
                "training.local_rank": ctx.local_rank,
                "training.node_rank": ctx.node_rank,
                "training.world_size": ctx.world_size,
                "host.name": ctx.node,
            }
        )
        self.exporter = exporter or make_span_exporter(config)
        self._ids = _PresetIds()
        self.provider = TracerProvider(
            sampler=ALWAYS_ON, resource=self.resource, id_generator=self._ids, shutdown_on_exit=False
        )
        self.provider.add_span_processor(_Collect(self))
        self.tracer = self.provider.get_tracer("training-telemetry")
        self._queue: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        # every span built is in exactly one of: delivered, dropped (by reason), pending
        self.spans_accepted = 0
        self.spans_delivered = 0
        self._dropped: dict[str, int] = dict.fromkeys(DROP_REASONS, 0)
        self._inflight = 0
        self._closed = False
        self.export_failures = 0  # export calls that failed (each loses a batch)
        self.steps_sampled = 0
        self._sampler = StepSampler(self.every)
        # rank 0: roots held for the other ranks' extents (step -> own start, end, when held)
        self.emits_roots = ctx.rank == 0
        self.late_roots = ctx.rank == 0 and ctx.world_size > 1 and bool(getattr(config, "online", False))
        self._held_roots: collections.OrderedDict = collections.OrderedDict()
        self._roots_done: collections.OrderedDict = collections.OrderedDict()
        self.roots_emitted = 0
        self.roots_own_extent = 0  # roots that cover rank 0's span alone (no extents came)
        self._once = LogOnce()
        self.metrics = None
        if config.otlp_metrics:
            from .otlp_metrics import OtlpMetrics

            self.metrics = OtlpMetrics(config, ctx, self.resource)
        self._worker = threading.Thread(target=self._run, name="telemetry-otlp", daemon=True)
        self._worker.start()
        # Last: only a sink that started says that traces are exported (Prometheus links to them).
        run_info[TRACE_SAMPLER] = lambda: StepSampler(self.every)

    def describe(self) -> str | None:
        sampled = f" (1 step in {self.every}, and failed or slow ones)" if self.every > 1 else ""
        return f"traces {self.target}{sampled}"

    # ---- pipeline thread: build spans -------------------------------------------------
    def write(self, records: Sequence[StepRecord]) -> None:
        for r in records:
            if self.metrics is not None:
                self.metrics.record(r)
            if self._sampler(r):
                self.steps_sampled += 1
                self._spans_for(r)
        self._release_roots(time.monotonic())
        self._wake.set()

    def trace_roots(self, roots: TraceRoots) -> None:
        """Rank 0: the roots of the steps whose ranks' extents online detection read."""
        for step, start, end, ranks in roots.roots:
            held = self._held_roots.pop(step, None)
            if held is not None:
                start, end = min(start, held[0]), max(end, held[1])
            self._root(step, start, end, ranks)
        self._wake.set()

    def _release_roots(self, now: float) -> None:
        """Roots held too long (or too many) go out on rank 0's own extent."""
        while self._held_roots:
            step, (start, end, since) = next(iter(self._held_roots.items()))
            if now - since < ROOT_WAIT_S and len(self._held_roots) <= ROOTS_HELD:
                return
            del self._held_roots[step]
            self._root(step, start, end, 1, own=True)

    def _root(self, step: int, start_s: float, end_s: float, ranks: int, own: bool = False) -> None:
        """Emit step ``step``'s root over ``ranks`` ranks' extents (``own``: rank 0's span alone)."""
        if step in self._roots_done:
            return
        self._roots_done[step] = None
        if len(self._roots_done) > ROOTS_DONE:
            self._roots_done.popitem(last=False)
        self.roots_emitted += 1
        self.roots_own_extent += own
        self._ids.next_trace, self._ids.next_span = trace_id(self.job, step), step_root_span_id(self.job, step)
        attrs = {"training.step": step, "training.root_ranks": ranks}
        root = self.tracer.start_span("train.step", start_time=_ns(start_s), attributes=attrs)
        root.end(end_time=_ns(end_s))

    def _spans_for(self, r: StepRecord) -> None:
        tid = trace_id(self.job, r.step)
        root_id = step_root_span_id(self.job, r.step)
        start_s, end_s = span_extent(r)
        t0, t1 = _ns(start_s), _ns(end_s)
        if self.late_roots:
            if r.step not in self._roots_done:
                self._held_roots[r.step] = (start_s, end_s, time.monotonic())
        elif self.emits_roots:
            self._root(r.step, start_s, end_s, 1, own=True)
        parent = NonRecordingSpan(SpanContext(tid, root_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)))
        attrs: dict[str, Any] = {"training.step": r.step, "training.rank": self.rank, "training.comm_s": r.comm_s}
        if r.tokens is not None:
            attrs["training.tokens"] = r.tokens
        if r.samples is not None:
            attrs["training.samples"] = r.samples
        step = self.tracer.start_span(
            "train.rank_step", context=otel_trace.set_span_in_context(parent), start_time=t0, attributes=attrs
        )
        if not r.ok:
            step.set_status(Status(StatusCode.ERROR, "exception in the training step"))
        step_ctx = otel_trace.set_span_in_context(step)
        phases = [s for s in r.spans if s.kind == rt.SPAN_PHASE]
        open_phases = []
        for s in phases:
            span = self.tracer.start_span(
                s.name, context=step_ctx, start_time=_ns(s.start_s), attributes={"training.phase": s.name}
            )
            if not s.ok:
                span.set_status(Status(StatusCode.ERROR))
            open_phases.append((s, span))
        for s in r.spans:
            if s.kind == rt.SPAN_PHASE:
                continue
            ctx = step_ctx
            for p, pspan in open_phases:  # nest a collective in the phase that holds it
                if p.start_s <= s.start_s and s.end_s <= p.end_s:
                    ctx = otel_trace.set_span_in_context(pspan)
            name = "data_wait" if s.kind == rt.SPAN_DATA else s.name
            a = {}
            if s.kind == rt.SPAN_CHECKPOINT:  # checkpoint.save, checkpoint.load, checkpoint.save.async
                name = f"checkpoint.{s.name}"
                a = {"training.checkpoint": s.name.partition(".")[0], "training.bytes": s.nbytes}
                a["training.blocking"] = not s.name.endswith(".async")
            elif s.kind == rt.SPAN_COLLECTIVE:
                a = {"training.op": s.name, "training.bytes": s.nbytes}
                if s.group:
                    a["training.group"] = s.group  # the parallel dimension: dp, tp, pp, ..., world
                if s.gid:  # the group instance and the call's number there: the same call on every rank
                    a["training.group_instance"], a["training.seq"] = s.gid, s.seq
            span = self.tracer.start_span(name, context=ctx, start_time=_ns(s.start_s), attributes=a)
            span.end(end_time=_ns(s.end_s))
        for s, span in open_phases:
            span.end(end_time=_ns(s.end_s))
        step.end(end_time=t1)

    def _enqueue(self, span: ReadableSpan) -> None:
        with self._lock:
            self.spans_accepted += 1
            if self._closed:
                self._dropped["closed_before_delivery"] += 1
                return
            if len(self._queue) >= QUEUE_SPANS:
                self._dropped["queue_full"] += 1
                full = True
            else:
                self._queue.append(span)
                full = False
        if full:
            self._log_once("queue", "span queue full (collector too slow or down); dropping spans")

    # ---- worker thread: export --------------------------------------------------------
    def _take(self) -> list:
        with self._lock:
            n = min(BATCH_SPANS, len(self._queue))
            self._inflight = n
            return [self._queue.popleft() for _ in range(n)]

    def _export(self, batch: list) -> None:
        try:
            with sdk_calls(self):
                result = self.exporter.export(batch)
        except Exception as exc:  # noqa: BLE001 - the SDK's exporter raises its own types; a failed export is counted
            result = None
            self.note_error(f"{type(exc).__name__}: {exc}")
        if result == SpanExportResult.SUCCESS:
            self.note_ok()
        with self._lock:
            self._inflight = 0
            if self._closed:
                return  # already counted as closed_before_delivery when close() gave up on it
            if result == SpanExportResult.SUCCESS:
                self.spans_delivered += len(batch)
                return
            self.export_failures += 1
            self._dropped["export_failed"] += len(batch)
        self._log_once(
            "failure", f"export to {self.target} failed: {self.last_error or 'no reason given'}; its spans are dropped"
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(1.0)
            self._wake.clear()
            while True:
                batch = self._take()
                if not batch:
                    break
                self._export(batch)

    def _log_once(self, key: str, message: str) -> None:
        self._once(
            key,
            "telemetry: otlp: %s (further cases counted in train_telemetry_dropped_total"
            '{sink="otlp"} and in telemetry.stats())',
            message,
        )

    def flush(self, timeout_s: float) -> None:
        self._wake.set()

    def close(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        self._release_roots(float("inf"))  # the roots still held: on rank 0's own extent
        self._stop.set()
        self._wake.set()
        self._worker.join(max(0.0, deadline - time.monotonic()))
        if not self._worker.is_alive():

            def drain() -> None:
                while True:
                    batch = self._take()
                    if not batch:
                        break
                    self._export(batch)

            t = threading.Thread(target=drain, name="telemetry-otlp-drain", daemon=True)
            t.start()
            t.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            # what the deadline left undelivered: queued, and the batch still being exported
            self._dropped["closed_before_delivery"] += len(self._queue) + self._inflight
            self._queue.clear()
            self._inflight = 0
            self._closed = True
        if self.metrics is not None:
            self.metrics.close(max(0.05, deadline - time.monotonic()))

        def shutdown() -> None:
            with sdk_calls(self):
                self.exporter.shutdown()

        try:
            threading.Thread(target=shutdown, daemon=True).start()
        except Exception:  # noqa: BLE001 - no thread can be started at interpreter exit: nothing to shut down
            pass

    def stats(self) -> dict[str, Any]:
        with self._lock:
            pending = len(self._queue) + self._inflight
            dropped = dict(self._dropped)
            accepted, delivered, failures = self.spans_accepted, self.spans_delivered, self.export_failures
        total = sum(dropped.values())
        out: dict[str, Any] = {
            "steps_sampled": self.steps_sampled,
            "trace_roots": self.roots_emitted,
            "trace_roots_rank0_only": self.roots_own_extent,
            "spans_accepted": accepted,
            "spans_delivered": delivered,
            "spans_pending": pending,
            "spans_dropped": dropped,
            "export_failures": failures,
            "last_error": self.last_error,
            # the generic keys: GuardedSink adds "dropped" to its own; the shutdown warning prints the detail
            "dropped": total,
            "dropped_unit": "spans",
            "dropped_detail": _detail(total, dropped, self.last_error) if total else "",
        }
        if self.metrics is not None:
            out.update(self.metrics.stats())
        return out


def _detail(total: int, dropped: dict[str, int], last_error: str) -> str:
    words = {
        "queue_full": "queue full",
        "export_failed": "export failed",
        "closed_before_delivery": "still undelivered at shutdown",
    }
    parts = [f"{n} {words[k]}" for k, n in dropped.items() if n]
    why = f"; last error: {last_error}" if last_error else ""
    return f"{total} span(s) dropped ({', '.join(parts)}{why})"


def _ns(seconds: float) -> int:
    return int(round(seconds * 1e9))

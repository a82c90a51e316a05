"""OpenTelemetry traces (and optionally metrics) over OTLP, built after the fact.

The pipeline thread turns each exported step record into spans with the exact recorded start and
end times: rank 0 emits the job's step root (``train.step``); every rank emits its own step span
(``train.rank_step``) as a child of that root, with child spans per phase, per collective (nested
in the phase it ran in) and for the data wait. The trace id and the root's span id are derived
from (job, step), so all ranks' spans of step N form one trace without any communication.

Sampling: every ``otlp_sample_every``-th step, and always a step that failed or took more than
twice the median of the rank's last 50 steps (once it has 10). Spans go into a bounded queue; a worker thread exports batches,
so a dead or silent collector costs only that thread. Spans that cannot be delivered (queue full,
export failed, shutdown deadline) are counted as dropped.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Sequence

from opentelemetry import trace as otel_trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags

from telemetry.logonce import LogOnce
from telemetry.pipeline import records as rt
from telemetry.pipeline.records import StepRecord
from telemetry.pipeline.sinks import Sink

from .tracing import step_root_span_id, trace_id

log = logging.getLogger("telemetry")


class _OncePerMinute(logging.Filter):
    """The OTLP exporters log every retry; a dead collector must not flood the training log."""

    def __init__(self) -> None:
        super().__init__()
        self._last: dict[str, float] = {}
        self.suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        last = self._last.get(record.name)
        if last is not None and now - last < 60.0:
            self.suppressed += 1
            return False
        self._last[record.name] = now
        return True


_EXPORTER_LOG_FILTER = _OncePerMinute()
_SDK_LOGGERS = ("opentelemetry.exporter.otlp.proto.http.trace_exporter",
                "opentelemetry.exporter.otlp.proto.http.metric_exporter",
                "opentelemetry.exporter.otlp.proto.grpc.exporter")


def _quiet_sdk_loggers() -> None:
    """Rate-limit the OTel SDK's retry logs; done when a sink starts, not when this module is imported
    (importing a library must not change another library's loggers). Idempotent."""
    for name in _SDK_LOGGERS:
        logger = logging.getLogger(name)
        if _EXPORTER_LOG_FILTER not in logger.filters:
            logger.addFilter(_EXPORTER_LOG_FILTER)

QUEUE_SPANS = 8192
BATCH_SPANS = 512


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


def make_span_exporter(config: Any) -> Any:
    endpoint = _endpoint(config.otlp_endpoint, config.otlp_protocol)
    if config.otlp_protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc

        return Grpc(endpoint=endpoint, insecure=endpoint.startswith("http://"), timeout=config.otlp_timeout_s)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

    return Http(endpoint=endpoint, timeout=config.otlp_timeout_s)


class OtlpSink(Sink):
    name = "otlp"

    def __init__(self, config: Any, ctx: Any, run_info: dict[str, Any], exporter: Any = None) -> None:
        if not config.otlp_endpoint:
            raise ValueError("no OTLP endpoint: set otlp_endpoint or OTEL_EXPORTER_OTLP_ENDPOINT")
        _quiet_sdk_loggers()
        self.job = config.job
        self.rank = ctx.rank
        self.every = config.otlp_sample_every
        self.resource = Resource.create({
            "service.name": config.job, "service.namespace": "training",
            "training.rank": ctx.rank, "training.local_rank": ctx.local_rank,
            "training.node_rank": ctx.node_rank, "training.world_size": ctx.world_size,
            "host.name": ctx.node,
        })
        self._ids = _PresetIds()
        self.provider = TracerProvider(sampler=ALWAYS_ON, resource=self.resource, id_generator=self._ids,
                                       shutdown_on_exit=False)
        self.provider.add_span_processor(_Collect(self))
        self.tracer = self.provider.get_tracer("training-telemetry")
        self.exporter = exporter or make_span_exporter(config)
        self._queue: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.exported = 0
        self.dropped = 0
        self._inflight = 0
        self._closed = False
        self.failed_exports = 0
        self.steps_sampled = 0
        self._recent: collections.deque = collections.deque(maxlen=50)
        self._once = LogOnce()
        self._worker = threading.Thread(target=self._run, name="telemetry-otlp", daemon=True)
        self._worker.start()
        self.metrics = None
        if config.otlp_metrics:
            from .otlp_metrics import OtlpMetrics

            self.metrics = OtlpMetrics(config, ctx, self.resource)

    # ---- pipeline thread: build spans -------------------------------------------------
    def _sampled(self, r: StepRecord) -> bool:
        anomalous = not r.ok
        if len(self._recent) >= 10:  # a median of fewer steps is too noisy to call a step slow
            med = sorted(self._recent)[len(self._recent) // 2]
            anomalous = anomalous or r.duration_s > 2.0 * med
        self._recent.append(r.duration_s)
        return anomalous or r.step % self.every == 0

    def write(self, records: Sequence[StepRecord]) -> None:
        for r in records:
            if self.metrics is not None:
                self.metrics.record(r)
            if self._sampled(r):
                self.steps_sampled += 1
                self._spans_for(r)
        self._wake.set()

    def _spans_for(self, r: StepRecord) -> None:
        tid = trace_id(self.job, r.step)
        root_id = step_root_span_id(self.job, r.step)
        t0, t1 = _ns(r.start_s), _ns(r.start_s + r.duration_s)
        if self.rank == 0:
            self._ids.next_trace, self._ids.next_span = tid, root_id
            root = self.tracer.start_span("train.step", start_time=t0,
                                          attributes={"training.step": r.step})
            root.end(end_time=t1)
        parent = NonRecordingSpan(SpanContext(tid, root_id, is_remote=True,
                                              trace_flags=TraceFlags(TraceFlags.SAMPLED)))
        attrs: dict[str, Any] = {"training.step": r.step, "training.rank": self.rank,
                                 "training.comm_s": r.comm_s}
        if r.tokens is not None:
            attrs["training.tokens"] = r.tokens
        if r.samples is not None:
            attrs["training.samples"] = r.samples
        step = self.tracer.start_span("train.rank_step", context=otel_trace.set_span_in_context(parent),
                                      start_time=t0, attributes=attrs)
        if not r.ok:
            step.set_status(Status(StatusCode.ERROR, "exception in the training step"))
        step_ctx = otel_trace.set_span_in_context(step)
        phases = [s for s in r.spans if s.kind == rt.SPAN_PHASE]
        open_phases = []
        for s in phases:
            span = self.tracer.start_span(s.name, context=step_ctx, start_time=_ns(s.start_s),
                                          attributes={"training.phase": s.name})
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
            a = {"training.op": s.name, "training.bytes": s.nbytes} if s.kind == rt.SPAN_COLLECTIVE else {}
            span = self.tracer.start_span(name, context=ctx, start_time=_ns(s.start_s), attributes=a)
            span.end(end_time=_ns(s.end_s))
        for s, span in open_phases:
            span.end(end_time=_ns(s.end_s))
        step.end(end_time=t1)

    def _enqueue(self, span: ReadableSpan) -> None:
        with self._lock:
            if len(self._queue) >= QUEUE_SPANS:
                self.dropped += 1
                self._log_once("queue", "span queue full (collector too slow or down); dropping")
                return
            self._queue.append(span)

    # ---- worker thread: export --------------------------------------------------------
    def _take(self) -> list:
        with self._lock:
            n = min(BATCH_SPANS, len(self._queue))
            self._inflight = n
            return [self._queue.popleft() for _ in range(n)]

    def _export(self, batch: list) -> None:
        try:
            result = self.exporter.export(batch)
        except Exception as exc:  # noqa: BLE001
            result = None
            self._log_once(type(exc).__name__, f"export failed: {exc}")
        with self._lock:
            self._inflight = 0
            if self._closed:
                return  # already counted as dropped when close() gave up on it
            if result == SpanExportResult.SUCCESS:
                self.exported += len(batch)
                return
            self.failed_exports += 1
            self.dropped += len(batch)
        self._log_once("failure", "export to the collector failed")

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
        self._once(key, "telemetry: otlp: %s (further cases counted in train_telemetry_dropped_total"
                   "{sink=\"otlp\"})", message)

    def flush(self, timeout_s: float) -> None:
        self._wake.set()

    def close(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        self._stop.set()
        self._wake.set()
        self._worker.join(max(0.0, deadline - time.monotonic()))
        if not self._worker.is_alive():
            done = threading.Event()

            def drain() -> None:
                while True:
                    batch = self._take()
                    if not batch:
                        break
                    self._export(batch)
                done.set()

            t = threading.Thread(target=drain, daemon=True)
            t.start()
            t.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            # what the deadline left undelivered: queued, and the batch still being exported
            self.dropped += len(self._queue) + self._inflight
            self._queue.clear()
            self._closed = True
        if self.metrics is not None:
            self.metrics.close(max(0.05, deadline - time.monotonic()))
        try:
            threading.Thread(target=self.exporter.shutdown, daemon=True).start()
        except Exception:  # noqa: BLE001
            pass

    def stats(self) -> dict[str, Any]:
        return {"spans_exported": self.exported, "dropped": self.dropped,
                "failed_exports": self.failed_exports, "steps_sampled": self.steps_sampled}


def _ns(seconds: float) -> int:
    return int(round(seconds * 1e9))

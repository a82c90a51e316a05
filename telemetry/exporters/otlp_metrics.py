"""Mirroring the step metrics through the OpenTelemetry metrics SDK (``otlp_metrics=True``).

Instruments use seconds and bytes, with explicit attribute keys (job, rank, local_rank, node, and
phase or op); histogram buckets come from the same config as Prometheus', through a View. A
periodic reader exports every ``push_interval_s`` and once at close, to the collector, or printed
on stdout when ``OTEL_TRACES_EXPORTER=console`` (the OTLP sink's choice). Each export is counted
(``metric_exports``, ``metric_export_failures``) and runs inside the OTLP sink's routing of the
SDK's log records (prefixed ``telemetry: otlp:``, once a minute).
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View

from telemetry.pipeline.records import SPAN_COLLECTIVE, StepRecord

from .otel_sdk import ErrorNote, sdk_calls, traces_exporter

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricsData
    from opentelemetry.sdk.resources import Resource

    from telemetry.config import Config
    from telemetry.rank import RankContext


def _metric_exporter(config: Config) -> MetricExporter:
    if traces_exporter(config) == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter(out=sys.stdout)
    base = config.otlp_endpoint.rstrip("/")
    if config.otlp_protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as Grpc

        return Grpc(endpoint=base, insecure=base.startswith("http://"), timeout=config.otlp_timeout_s)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as Http

    if base.endswith("/v1/traces"):
        base = base[: -len("/v1/traces")]
    return Http(endpoint=base + "/v1/metrics", timeout=config.otlp_timeout_s)


class _Counted(MetricExporter):
    """The real exporter, with each export counted and run inside :func:`exporters.otlp.sdk_calls`
    (the reader calls it on a thread of its own)."""

    def __init__(self, inner: MetricExporter, owner: "OtlpMetrics") -> None:
        super().__init__(
            preferred_temporality=getattr(inner, "_preferred_temporality", None),
            preferred_aggregation=getattr(inner, "_preferred_aggregation", None),
        )
        self.inner = inner
        self.owner = owner

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        try:
            with sdk_calls(self.owner):
                result = self.inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        except Exception as exc:  # noqa: BLE001 - counted, never raised into the SDK's thread
            self.owner.note_error(f"{type(exc).__name__}: {exc}")
            result = MetricExportResult.FAILURE
        self.owner.exports += 1
        if result == MetricExportResult.SUCCESS:
            self.owner.note_ok()
        else:
            self.owner.failures += 1
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.inner.force_flush(timeout_millis=timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        with sdk_calls(self.owner):
            self.inner.shutdown(timeout_millis=timeout_millis, **kwargs)


class OtlpMetrics(ErrorNote):
    def __init__(
        self, config: Config, ctx: RankContext, resource: Resource, exporter: MetricExporter | None = None
    ) -> None:
        self.attrs = {"job": config.job, "rank": str(ctx.rank), "local_rank": str(ctx.local_rank), "node": ctx.node}
        self.exports = 0
        self.failures = 0
        reader = PeriodicExportingMetricReader(
            _Counted(exporter or _metric_exporter(config), self),
            export_interval_millis=int(config.push_interval_s * 1000),
            export_timeout_millis=int(config.otlp_timeout_s * 1000),
        )
        views = [
            View(
                instrument_name="train.step.duration",
                aggregation=ExplicitBucketHistogramAggregation(config.step_buckets_s),
            ),
            View(
                instrument_name="train.phase.duration",
                aggregation=ExplicitBucketHistogramAggregation(config.step_buckets_s),
            ),
            View(
                instrument_name="train.collective.duration",
                aggregation=ExplicitBucketHistogramAggregation(config.collective_buckets_s),
            ),
        ]
        self.provider = MeterProvider(metric_readers=[reader], resource=resource, views=views, shutdown_on_exit=False)
        m = self.provider.get_meter("training-telemetry")
        self.step = m.create_histogram("train.step.duration", unit="s", description="Wall time of one step")
        self.phase = m.create_histogram("train.phase.duration", unit="s", description="Time in a phase per step")
        self.coll = m.create_histogram("train.collective.duration", unit="s", description="One collective call")
        self.coll_bytes = m.create_counter("train.collective.bytes", unit="By", description="Collective payload")
        self.steps = m.create_counter("train.steps", unit="{step}", description="Completed steps")
        self.tokens = m.create_counter("train.tokens", unit="{token}", description="Tokens processed")
        self.samples = m.create_counter("train.samples", unit="{sample}", description="Samples processed")

    def record(self, r: StepRecord) -> None:
        a = self.attrs
        self.step.record(r.duration_s, a)
        self.steps.add(1, a)
        if r.tokens:
            self.tokens.add(r.tokens, a)
        if r.samples:
            self.samples.add(r.samples, a)
        for name, sec in r.phases.items():
            self.phase.record(sec, {**a, "phase": name})
        for s in r.spans:
            if s.kind == SPAN_COLLECTIVE:
                self.coll.record(s.end_s - s.start_s, {**a, "op": s.name})
        for op, st in r.ops.items():
            self.coll_bytes.add(st.bytes, {**a, "op": op})

    def close(self, timeout_s: float) -> None:
        t = threading.Thread(target=self.provider.shutdown, kwargs={"timeout_millis": timeout_s * 1000}, daemon=True)
        t.start()
        t.join(timeout_s)

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"metric_exports": self.exports, "metric_export_failures": self.failures}
        if self.last_error:
            out["metric_last_error"] = self.last_error
        return out

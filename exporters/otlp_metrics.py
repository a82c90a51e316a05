"""Mirroring the step metrics through the OpenTelemetry metrics SDK (``otlp_metrics=True``).

Instruments use seconds and bytes, with explicit attribute keys (job, rank, local_rank, node, and
phase or op); histogram buckets come from the same config as Prometheus', through a View. A
periodic reader exports every ``push_interval_s`` and once at close.
"""

from __future__ import annotations

import threading
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View

from telemetry.pipeline.records import SPAN_COLLECTIVE, StepRecord


def _metric_exporter(config: Any) -> Any:
    base = config.otlp_endpoint.rstrip("/")
    if config.otlp_protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as Grpc

        return Grpc(endpoint=base, insecure=base.startswith("http://"), timeout=config.otlp_timeout_s)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as Http

    if base.endswith("/v1/traces"):
        base = base[: -len("/v1/traces")]
    return Http(endpoint=base + "/v1/metrics", timeout=config.otlp_timeout_s)


class OtlpMetrics:
    def __init__(self, config: Any, ctx: Any, resource: Any, exporter: Any = None) -> None:
        self.attrs = {"job": config.job, "rank": str(ctx.rank), "local_rank": str(ctx.local_rank),
                      "node": ctx.node}
        reader = PeriodicExportingMetricReader(exporter or _metric_exporter(config),
                                               export_interval_millis=int(config.push_interval_s * 1000),
                                               export_timeout_millis=int(config.otlp_timeout_s * 1000))
        views = [View(instrument_name="train.step.duration",
                      aggregation=ExplicitBucketHistogramAggregation(config.step_buckets_s)),
                 View(instrument_name="train.phase.duration",
                      aggregation=ExplicitBucketHistogramAggregation(config.step_buckets_s)),
                 View(instrument_name="train.collective.duration",
                      aggregation=ExplicitBucketHistogramAggregation(config.collective_buckets_s))]
        self.provider = MeterProvider(metric_readers=[reader], resource=resource, views=views,
                                      shutdown_on_exit=False)
        m = self.provider.get_meter("training-telemetry")
        self.step = m.create_histogram("train.step.duration", unit="s", description="Wall time of one step")
        self.phase = m.create_histogram("train.phase.duration", unit="s", description="Time in a phase per step")
        self.coll = m.create_histogram("train.collective.duration", unit="s", description="One collective call")
        self.coll_bytes = m.create_counter("train.collective.bytes", unit="By", description="Collective payload")
        self.steps = m.create_counter("train.steps", unit="{step}", description="Completed steps")
        self.tokens = m.create_counter("train.tokens", unit="{token}", description="Tokens processed")

    def record(self, r: StepRecord) -> None:
        a = self.attrs
        self.step.record(r.duration_s, a)
        self.steps.add(1, a)
        if r.tokens:
            self.tokens.add(r.tokens, a)
        for name, sec in r.phases.items():
            self.phase.record(sec, {**a, "phase": name})
        for s in r.spans:
            if s.kind == SPAN_COLLECTIVE:
                self.coll.record(s.end_s - s.start_s, {**a, "op": s.name})
        for op, st in r.ops.items():
            self.coll_bytes.add(st.bytes, {**a, "op": op})

    def close(self, timeout_s: float) -> None:
        t = threading.Thread(target=self.provider.shutdown, kwargs={"timeout_millis": timeout_s * 1000},
                             daemon=True)
        t.start()
        t.join(timeout_s)

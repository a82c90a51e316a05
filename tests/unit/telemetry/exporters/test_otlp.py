"""The OTLP sink (telemetry/exporters/otlp.py) against a receiver in this process that decodes real
OTLP protobuf, and against dead collectors. Four real ranks: tests/integration/test_otlp_ranks.py."""

import os
import time

import pytest

import telemetry
from telemetry.store import read_run
from telemetry.traceids import step_root_span_id, trace_id
from tests.helpers.otlp_receiver import Blackhole, Receiver
from tests.helpers.servers import free_port


def loop(n, slow_step=None):
    for i in range(n):
        with telemetry.step(tokens=32):
            with telemetry.phase("forward"):
                time.sleep(0.03 if i == slow_step else 0.002)
            with telemetry.phase("backward"):
                time.sleep(0.001)


def test_spans_carry_exact_times_parentage_and_resource(run_dir):
    with Receiver() as rcv:
        telemetry.init(run_dir=run_dir, job="otjob", sinks=["store", "otlp"], otlp_endpoint=rcv.url)
        loop(4)
        stats = telemetry.shutdown()
        otlp = stats["sinks"]["otlp"]
        assert otlp["spans_delivered"] == otlp["spans_accepted"] == 4 * 4 and otlp["dropped"] == 0
        spans = rcv.spans
    by_id = {s["span_id"]: s for s in spans}
    store = read_run(run_dir).steps
    for rec in store:
        tid = f"{trace_id('otjob', rec['step']):032x}"
        mine = [s for s in spans if s["trace_id"] == tid]
        assert sorted(s["name"] for s in mine) == ["backward", "forward", "train.rank_step", "train.step"]
        root = next(s for s in mine if s["name"] == "train.step")
        step = next(s for s in mine if s["name"] == "train.rank_step")
        assert root["parent"] is None and root["span_id"] == f"{step_root_span_id('otjob', rec['step']):016x}"
        assert step["parent"] == root["span_id"]
        for phase in ("forward", "backward"):
            p = next(s for s in mine if s["name"] == phase)
            assert by_id[p["parent"]]["name"] == "train.rank_step"
            assert step["start"] <= p["start"] <= p["end"] <= step["end"]
        assert abs(step["start"] / 1e9 - rec["start_s"]) < 1e-6
        assert abs((step["end"] - step["start"]) / 1e9 - rec["duration_s"]) < 1e-6
        assert step["attributes"]["training.step"] == rec["step"] and step["attributes"]["training.tokens"] == 32
    res = spans[0]["resource"]
    assert res["service.name"] == "otjob" and res["training.rank"] == 0 and res["host.name"] == os.uname().nodename


def test_sampling_every_nth_step_and_always_anomalous_ones(run_dir):
    with Receiver() as rcv:
        telemetry.init(run_dir=run_dir, job="samp", sinks=["otlp"], otlp_endpoint=rcv.url, otlp_sample_every=5)
        loop(20, slow_step=12)
        telemetry.shutdown()
        steps = sorted({s["attributes"]["training.step"] for s in rcv.spans if s["name"] == "train.rank_step"})
    # every 5th and the slow one; a step the machine itself slowed may join them (wall clock)
    assert {0, 5, 10, 12, 15} <= set(steps) and len(steps) <= 8, steps


def test_the_sampling_rule_on_exact_step_times():
    from telemetry.pipeline.records import StepRecord
    from telemetry.traceids import StepSampler

    def rec(step, duration, ok=True):
        return StepRecord(
            rank=0,
            step=step,
            start_s=float(step),
            duration_s=duration,
            ok=ok,
            phases={},
            phase_comm={},
            comm_s=0.0,
            ops={},
            tokens=None,
            samples=None,
            scalars={},
            spans=(),
        )

    sample = StepSampler(5)
    picked = [i for i in range(30) if sample(rec(i, 0.05 if i == 17 else 0.01, ok=(i != 22)))]
    assert picked == [0, 5, 10, 15, 17, 20, 22, 25]  # every 5th, the slow 17, the failed 22


def test_metrics_mirror_reaches_the_collector(run_dir):
    with Receiver() as rcv:
        telemetry.init(run_dir=run_dir, job="mx", sinks=["otlp"], otlp_endpoint=rcv.url, otlp_metrics=True)
        loop(3)
        telemetry.shutdown()
        assert {"train.step.duration", "train.phase.duration", "train.steps", "train.tokens"} <= rcv.metric_names


def test_endpoint_from_the_standard_variable_turns_the_sink_on(run_dir, monkeypatch):
    with Receiver() as rcv:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.url)
        session = telemetry.init(run_dir=run_dir, job="envot")
        assert "otlp" in session.config.sinks
        loop(2)
        telemetry.shutdown()
        assert any(s["name"] == "train.rank_step" for s in rcv.spans)


@pytest.mark.real_clock  # gRPC sets its deadline from Python's clock and keeps it on the real one
def test_grpc_protocol(run_dir):
    grpc = pytest.importorskip("grpc")
    from concurrent import futures

    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    got = []

    class Service(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):
            got.extend(s.name for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        telemetry.init(
            run_dir=run_dir, job="grpc", sinks=["otlp"], otlp_endpoint=f"http://127.0.0.1:{port}", otlp_protocol="grpc"
        )
        loop(2)
        stats = telemetry.shutdown()
    finally:
        server.stop(0)
    assert stats["sinks"]["otlp"]["spans_delivered"] == 8
    assert got.count("train.rank_step") == 2


@pytest.mark.real_clock  # the shutdown bound is on real elapsed time
@pytest.mark.parametrize("kind", ["refused", "blackhole", "error503"])
def test_dead_collector_never_slows_training_and_is_counted(run_dir, kind, caplog):
    if kind == "refused":
        ctx, url = None, f"http://127.0.0.1:{free_port()}"
    elif kind == "blackhole":
        ctx = Blackhole()
        url = ctx.url
    else:
        ctx = Receiver(status=503)
        url = ctx.url
    if ctx is not None:
        ctx.__enter__()
    try:
        telemetry.init(
            run_dir=run_dir,
            job="dead",
            sinks=["store", "otlp"],
            otlp_endpoint=url,
            otlp_timeout_s=30,
            shutdown_timeout_s=2.0,
        )
        t0 = time.monotonic()
        loop(30)
        loop_s = time.monotonic() - t0
        time.sleep(0.6)
        t1 = time.monotonic()
        stats = telemetry.shutdown()
        shutdown_s = time.monotonic() - t1
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)
    assert loop_s < 2.0  # 30 steps of ~3 ms; the collector is never waited on
    assert shutdown_s < 3.5  # bounded by shutdown_timeout_s, not by the exporter's 30 s timeout
    assert stats["sinks"]["store"]["written"] == 30  # the other sink carried on
    otlp = stats["sinks"]["otlp"]
    assert otlp["spans_delivered"] == 0 and otlp["dropped"] == 30 * 4  # root, rank step, 2 phases
    assert_accounted(otlp, written=30)
    # what reaches the log is ours: prefixed, the SDK's own records re-logged at most once a minute
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry")]
    assert caplog.text.count("telemetry: otlp:") <= 3
    if kind == "error503":
        assert "Service Unavailable" in otlp["last_error"]


def assert_accounted(otlp, written):
    """One vocabulary: every step written is sampled or not, every span built is delivered, dropped
    (for a reason) or pending, and the generic `dropped` is the sum of the reasons."""
    assert otlp["written"] == written and otlp["steps_sampled"] <= written
    assert otlp["spans_accepted"] == otlp["spans_delivered"] + otlp["dropped"] + otlp["spans_pending"]
    assert otlp["dropped"] == sum(otlp["spans_dropped"].values())
    assert set(otlp["spans_dropped"]) == {"queue_full", "export_failed", "closed_before_delivery"}
    assert otlp["dropped_unit"] == "spans"
    if otlp["dropped"]:
        assert otlp["dropped_detail"].startswith(f"{otlp['dropped']} span(s) dropped (")


def test_spans_are_accounted_for_by_reason_of_loss(run_dir, monkeypatch):
    """The queue fills behind a collector that never answers: each span is either delivered or
    dropped for a named reason (the queue was full; still undelivered at shutdown), never both,
    never neither."""
    import telemetry.exporters.otlp as otlp_mod

    monkeypatch.setattr(otlp_mod, "QUEUE_SPANS", 8)
    with Blackhole() as hole:
        telemetry.init(
            run_dir=run_dir,
            job="acct",
            sinks=["otlp"],
            otlp_endpoint=hole.url,
            otlp_timeout_s=30,
            shutdown_timeout_s=1.0,
            flush_interval_s=0.05,
        )
        loop(30)
        time.sleep(0.3)
        live = telemetry.stats()["sinks"]["otlp"]
        stats = telemetry.shutdown()
    assert live["spans_accepted"] == live["spans_delivered"] + live["dropped"] + live["spans_pending"]
    assert live["spans_pending"] > 0  # a batch hangs in the blackhole, the queue holds the rest
    otlp = stats["sinks"]["otlp"]
    assert_accounted(otlp, written=30)
    assert otlp["spans_accepted"] == 30 * 4 and otlp["spans_pending"] == 0 and otlp["spans_delivered"] == 0
    lost = otlp["spans_dropped"]
    assert lost["queue_full"] > 0 and lost["closed_before_delivery"] > 0 and lost["export_failed"] == 0
    assert "queue full" in otlp["dropped_detail"] and "still undelivered at shutdown" in otlp["dropped_detail"]


def test_the_shutdown_warning_says_where_the_losses_were(run_dir, caplog):
    with Receiver(status=503) as rcv:
        telemetry.init(
            run_dir=run_dir,
            job="where",
            sinks=["store", "otlp"],
            otlp_endpoint=rcv.url,
            otlp_timeout_s=1,
            shutdown_timeout_s=1.0,
        )
        loop(3)
        telemetry.shutdown()
    [line] = [r.getMessage() for r in caplog.records if "not delivered" in r.getMessage()]
    assert "otlp: 12 span(s) dropped (" in line and "store" not in line


def test_sdk_log_records_of_our_exports_are_prefixed_and_rate_limited(run_dir, caplog):
    import logging

    sdk_logger = logging.getLogger("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    with Receiver(status=503) as rcv:
        telemetry.init(
            run_dir=run_dir,
            job="sdklog",
            sinks=["otlp"],
            otlp_endpoint=rcv.url,
            otlp_metrics=True,
            push_interval_s=0.5,
            otlp_timeout_s=1.5,
            shutdown_timeout_s=1.0,
            flush_interval_s=0.1,
        )
        for _ in range(3):  # three rounds of exports, each retried, all refused
            loop(2)
            time.sleep(0.6)
        sdk_logger.warning("the application's own exporter says %s", "hello")  # not ours: untouched
        stats = telemetry.shutdown()
    assert rcv.requests >= 4
    from_sdk = [r for r in caplog.records if r.name.startswith("opentelemetry")]
    assert [r.getMessage() for r in from_sdk] == ["the application's own exporter says hello"]
    routed = [
        r.getMessage()
        for r in caplog.records
        if r.name == "telemetry" and "from the OpenTelemetry SDK" in r.getMessage()
    ]
    assert routed and all(m.startswith("telemetry: otlp: ") for m in routed)
    assert any("Service Unavailable" in m for m in routed)
    assert len(routed) <= 2  # once a minute per SDK logger: the trace exporter's, the metric exporter's
    otlp = stats["sinks"]["otlp"]
    assert "Service Unavailable" in otlp["last_error"] and otlp["metric_export_failures"] >= 1


def test_console_exporter_prints_spans_without_a_collector(run_dir, monkeypatch, capfd):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    telemetry.init(run_dir=run_dir, job="console", sinks=["otlp"])
    loop(2)
    stats = telemetry.shutdown()
    out = capfd.readouterr().out
    assert out.count('"name": "train.rank_step"') == 2 and out.count('"name": "forward"') == 2
    assert f'"trace_id": "0x{trace_id("console", 1):032x}"' in out
    assert stats["sinks"]["otlp"]["spans_delivered"] == 2 * 4 and stats["sinks"]["otlp"]["dropped"] == 0


def test_console_exporter_alone_turns_the_sink_on(run_dir, monkeypatch, capfd):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    session = telemetry.init(run_dir=run_dir, job="console2")
    assert "otlp" in session.config.sinks
    loop(1)
    telemetry.shutdown()
    assert '"name": "train.rank_step"' in capfd.readouterr().out


def test_none_exports_nothing_even_with_an_endpoint(run_dir, monkeypatch):
    with Receiver() as rcv:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.url)
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
        telemetry.init(run_dir=run_dir, job="noneot", sinks=["store", "otlp"])
        loop(2)
        stats = telemetry.shutdown()
        assert rcv.requests == 0 and rcv.spans == []
    assert list(stats["sinks"]) == ["store"]


def test_none_keeps_the_sink_out_quietly(run_dir, monkeypatch, caplog):
    with Receiver() as rcv:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.url)
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
        session = telemetry.init(run_dir=run_dir, job="noneot2")
        assert "otlp" not in session.config.sinks
        telemetry.shutdown()
    assert "disabled" not in caplog.text


def test_make_span_exporter_follows_the_sdk_variable():
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    from telemetry.config import Config, ConfigError
    from telemetry.exporters.otlp import make_span_exporter

    ep = {"otlp_endpoint": "http://127.0.0.1:4318", "otlp_timeout_s": 1.0}
    assert isinstance(make_span_exporter(Config.resolve(ep, environ={})), OTLPSpanExporter)
    cfg = Config.resolve(ep, environ={"OTEL_TRACES_EXPORTER": "Console "})
    assert cfg.otlp_traces_exporter == "console" and isinstance(make_span_exporter(cfg), ConsoleSpanExporter)
    cfg = Config.resolve({**ep, "otlp_traces_exporter": "none"}, environ={"OTEL_TRACES_EXPORTER": "console"})
    assert cfg.otlp_traces_exporter == "none"  # the config's field wins over the variable
    with pytest.raises(ConfigError, match="OTEL_TRACES_EXPORTER='zipkin'; accepted: otlp, console, none"):
        Config.resolve(ep, environ={"OTEL_TRACES_EXPORTER": "zipkin"})


class _Memory:
    """An in-process span exporter: what the sink exported, as the SDK hands it over."""

    def __init__(self):
        self.spans = []

    def export(self, batch):
        from opentelemetry.sdk.trace.export import SpanExportResult

        self.spans.extend(batch)
        return SpanExportResult.SUCCESS

    def shutdown(self):
        pass


def _record(step, start, duration=0.1, wait=0.0):
    from telemetry.pipeline.records import Span, StepRecord

    spans = (Span("data", "data_wait", start - wait, start),) if wait else ()
    spans += (Span("phase", "forward", start + 0.01, start + duration - 0.01),)
    return StepRecord(0, step, start, duration, True, {"forward": 0.08}, {}, 0.0, {}, None, None, {}, spans)


def test_rank_0_builds_each_root_late_from_every_ranks_extent():
    """A rank's step span covers its data wait; rank 0 holds its roots until online detection hands it
    every rank's extents (TraceRoots), and emits a held root on its own extent only at the end."""
    from types import SimpleNamespace

    from telemetry.config import Config
    from telemetry.exporters.otlp import OtlpSink
    from telemetry.pipeline.records import TraceRoots

    config = Config.resolve({"job": "late", "otlp_traces_exporter": "console"}, environ={})
    ctx = SimpleNamespace(rank=0, local_rank=0, node_rank=0, world_size=2, node="h")
    mem = _Memory()
    sink = OtlpSink(config, ctx, {}, exporter=mem)
    sink.write([_record(0, 100.0, wait=0.004), _record(1, 100.1)])
    sink.trace_roots(TraceRoots([(0, 99.99, 100.12, 2), (5, 100.5, 100.6, 1)]))
    sink.trace_roots(TraceRoots([(0, 99.0, 101.0, 2)]))  # a step's root goes out once
    sink.close(2.0)
    spans = {(s.name, s.attributes["training.step"]): s for s in mem.spans if "training.step" in s.attributes}
    step0 = spans[("train.rank_step", 0)]
    assert step0.start_time == round(99.996e9)  # the data wait's start: no child before its parent
    roots = sorted(
        (k[1], s.start_time, s.end_time, s.attributes["training.root_ranks"])
        for k, s in spans.items()
        if k[0] == "train.step"
    )
    assert roots == [
        (0, round(99.99e9), round(100.12e9), 2),  # from both ranks' extents
        (1, round(100.1e9), round(100.2e9), 1),  # none came: rank 0's own, at the end
        (5, round(100.5e9), round(100.6e9), 1),  # a step another rank alone traced
    ]
    assert sum(s.name == "train.step" for s in mem.spans) == 3
    assert sink.stats()["trace_roots"] == 3 and sink.stats()["trace_roots_rank0_only"] == 1  # step 1


def test_a_single_rank_job_emits_its_root_at_once():
    from types import SimpleNamespace

    from telemetry.config import Config
    from telemetry.exporters.otlp import OtlpSink

    config = Config.resolve({"job": "one", "otlp_traces_exporter": "console"}, environ={})
    mem = _Memory()
    sink = OtlpSink(config, SimpleNamespace(rank=0, local_rank=0, node_rank=0, world_size=1, node="h"), {}, mem)
    sink.write([_record(0, 100.0, wait=0.002)])
    sink.close(2.0)
    root = next(s for s in mem.spans if s.name == "train.step")
    step = next(s for s in mem.spans if s.name == "train.rank_step")
    assert (root.start_time, root.end_time) == (step.start_time, step.end_time) == (round(99.998e9), round(100.1e9))

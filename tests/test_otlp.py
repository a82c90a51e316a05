"""The OTLP sink against a receiver that decodes real OTLP protobuf, and against dead collectors."""

import os
import subprocess
import sys
import time

import pytest
from otlp_receiver import Blackhole, Receiver
from servers import free_port

import telemetry
from telemetry.store import read_run
from exporters.tracing import step_root_span_id, trace_id

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
        assert stats["sinks"]["otlp"]["spans_exported"] == 4 * 4 and stats["sinks"]["otlp"]["dropped"] == 0
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
    assert steps == [0, 5, 10, 12, 15]


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
        telemetry.init(run_dir=run_dir, job="grpc", sinks=["otlp"], otlp_endpoint=f"http://127.0.0.1:{port}",
                       otlp_protocol="grpc")
        loop(2)
        stats = telemetry.shutdown()
    finally:
        server.stop(0)
    assert stats["sinks"]["otlp"]["spans_exported"] == 8
    assert got.count("train.rank_step") == 2


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
        telemetry.init(run_dir=run_dir, job="dead", sinks=["store", "otlp"], otlp_endpoint=url,
                       otlp_timeout_s=30, shutdown_timeout_s=2.0)
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
    assert otlp["spans_exported"] == 0 and otlp["dropped"] == 30 * 4  # root, rank step, 2 phases
    assert caplog.text.count("telemetry: otlp:") <= 2


@pytest.mark.slow
def test_four_ranks_share_one_trace_per_step(tmp_path):
    with Receiver() as rcv:
        env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": rcv.url, "TELEMETRY_SINKS": "store,otlp"}
        proc = subprocess.run([sys.executable, "-m", "telemetry", "demo", "--ranks", "4", "--steps", "30",
                               "--run-dir", str(tmp_path / "run"), "--json"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr[-2000:]
        spans = list(rcv.spans)
    job = "run"
    for step in (5, 17):
        tid = f"{trace_id(job, step):032x}"
        rank_steps = [s for s in spans if s["trace_id"] == tid and s["name"] == "train.rank_step"]
        assert sorted(s["resource"]["training.rank"] for s in rank_steps) == [0, 1, 2, 3]
        root = [s for s in spans if s["trace_id"] == tid and s["name"] == "train.step"]
        assert len(root) == 1 and root[0]["resource"]["training.rank"] == 0
        assert all(s["parent"] == root[0]["span_id"] for s in rank_steps)
        colls = [s for s in spans if s["trace_id"] == tid and s["name"] == "all_reduce"]
        assert len(colls) == 4 and all(s["attributes"]["training.bytes"] > 0 for s in colls)
        backward = {s["span_id"] for s in spans if s["trace_id"] == tid and s["name"] == "backward"}
        assert all(c["parent"] in backward for c in colls)  # nested in the phase that ran it

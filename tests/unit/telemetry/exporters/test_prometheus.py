"""The Prometheus sink (telemetry/exporters/prometheus.py), scraped in this process: names and labels,
bounded series, TLS, exemplars, straggler scores, file_sd targets, a taken port. Scraped by a real
Prometheus and pushed to a real Pushgateway: tests/integration/test_prometheus_live.py."""

import json
import os
import ssl
import subprocess
import time

import pytest

import telemetry
from tests.helpers.servers import free_port, http_get


def steps(n, phases=("forward", "backward")):
    for _ in range(n):
        with telemetry.step(tokens=100, samples=4):
            for p in phases:
                with telemetry.phase(p):
                    time.sleep(0.001)
            telemetry.log(loss=0.5)


def scrape(port, openmetrics=False):
    headers = {"Accept": "application/openmetrics-text; version=1.0.0"} if openmetrics else {}
    return http_get(f"http://127.0.0.1:{port}/metrics", headers=headers).decode()


def series(text):
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def exemplar_trace_ids(port):
    om = scrape(port, openmetrics=True)
    return {
        line.split('trace_id="')[1].split('"')[0]
        for line in om.splitlines()
        if line.startswith("train_step_duration_seconds_bucket") and 'trace_id="' in line
    }


NEVER = 60.0  # a flush interval the pipeline thread never reaches within a test: ticks are by hand


def deliver(session):
    """Hand everything recorded so far to the sinks, as the pipeline thread would: two ticks, since
    a finished step is held for one tick before it is built."""
    session.pipeline.tick()
    session.pipeline.settle()  # each sink's worker delivers
    session.pipeline.tick()
    session.pipeline.settle()  # each sink's worker delivers


def test_metrics_names_and_labels_and_no_exemplar_without_traces(run_dir):
    port = free_port()
    session = telemetry.init(
        run_dir=run_dir, job="prom1", sinks=["prometheus"], prometheus_port=port, flush_interval_s=NEVER
    )
    steps(5)
    deliver(session)
    text = scrape(port)
    for name in (
        "train_step_duration_seconds_bucket",
        "train_phase_duration_seconds_sum",
        "train_steps_total",
        "train_tokens_total",
        "train_samples_total",
        "train_dataloader_wait_seconds_count",
        "train_last_step_timestamp_seconds",
        "train_telemetry_dropped_total",
        "train_build_info",
        "train_log_value",
    ):
        assert name in text, name
    assert 'train_steps_total{job="prom1",local_rank="0",node="%s",rank="0"} 5.0' % os.uname().nodename in text
    assert 'phase="backward"' in text and 'name="loss"' in text
    for line in series(text):  # no step number or shape ever becomes a label
        assert "step=" not in line.split("{", 1)[-1]
    assert exemplar_trace_ids(port) == set()  # no OTLP sink, so no trace to link to
    telemetry.shutdown()
    with pytest.raises(OSError):
        scrape(port)  # the endpoint is gone after shutdown


def test_series_per_rank_are_bounded_and_the_cap_is_counted(run_dir, caplog):
    port = free_port()
    session = telemetry.init(
        run_dir=run_dir,
        job="card",
        sinks=["prometheus"],
        prometheus_port=port,
        max_label_values=4,
        flush_interval_s=NEVER,
    )
    steps(3, phases=[f"p{i}" for i in range(10)])
    deliver(session)
    text = scrape(port)
    phases = {line.split('phase="')[1].split('"')[0] for line in series(text) if 'phase="' in line}
    assert len(phases) == 4  # the first four names seen win
    dropped = [line for line in series(text) if 'sink="prometheus_labels"' in line]
    assert dropped and float(dropped[0].split()[-1]) > 0
    assert "more than 4 distinct values of label 'phase'" in caplog.text


def test_an_address_that_cannot_be_served_disables_the_sink_and_training_goes_on(run_dir, caplog):
    telemetry.init(run_dir=run_dir, job="busy", sinks=["store", "prometheus"], prometheus_host="192.0.2.1")
    steps(3)  # an address this machine does not have (TEST-NET-1): not a taken port, no fallback
    stats = telemetry.shutdown()
    assert stats["records"] == 3 and list(stats["sinks"]) == ["store"]
    assert "sink 'prometheus' disabled: OSError: cannot serve metrics on 192.0.2.1:" in caplog.text


def test_tls_with_client_certificates(run_dir, tmp_path):
    def cert(name, ca=None):
        key, crt = tmp_path / f"{name}.key", tmp_path / f"{name}.crt"
        subj = ["-subj", f"/CN={'127.0.0.1' if name == 'server' else name}"]
        if ca is None:
            subprocess.run(
                [
                    "openssl",
                    "req",
                    "-x509",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-days",
                    "2",
                    "-keyout",
                    key,
                    "-out",
                    crt,
                    *subj,
                    "-addext",
                    "subjectAltName=IP:127.0.0.1",
                ],
                check=True,
                capture_output=True,
            )
        else:
            csr = tmp_path / f"{name}.csr"
            subprocess.run(
                ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, *subj],
                check=True,
                capture_output=True,
            )
            ext = tmp_path / f"{name}.ext"
            ext.write_text("subjectAltName=IP:127.0.0.1\n")
            subprocess.run(
                [
                    "openssl",
                    "x509",
                    "-req",
                    "-in",
                    csr,
                    "-CA",
                    ca[1],
                    "-CAkey",
                    ca[0],
                    "-CAcreateserial",
                    "-days",
                    "2",
                    "-out",
                    crt,
                    "-extfile",
                    ext,
                ],
                check=True,
                capture_output=True,
            )
        return str(key), str(crt)

    ca = cert("ca")
    server = cert("server", ca)
    client = cert("client", ca)
    port = free_port()
    session = telemetry.init(
        run_dir=run_dir,
        job="tls",
        sinks=["prometheus"],
        prometheus_port=port,
        prometheus_certfile=server[1],
        prometheus_keyfile=server[0],
        prometheus_client_cafile=ca[1],
        flush_interval_s=NEVER,
    )
    steps(2)
    deliver(session)
    ctx = ssl.create_default_context(cafile=ca[1])
    ctx.load_cert_chain(client[1], client[0])
    import urllib.error
    import urllib.request

    body = urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=ctx, timeout=5).read().decode()
    assert [line.split()[-1] for line in series(body) if line.startswith("train_steps_total{")] == ["2.0"]
    no_client_cert = ssl.create_default_context(cafile=ca[1])
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=no_client_cert, timeout=5).read()


def test_exemplars_link_only_to_traces_the_otlp_sink_exports(run_dir):
    from telemetry.traceids import trace_id_hex
    from tests.helpers.otlp_receiver import Receiver

    port = free_port()
    with Receiver() as rcv:
        session = telemetry.init(
            run_dir=run_dir,
            job="exlink",
            sinks=["prometheus", "otlp"],
            prometheus_port=port,
            otlp_endpoint=rcv.url,
            otlp_sample_every=5,
            flush_interval_s=NEVER,
        )
        for i in range(13):  # steps 0, 5, 10 sampled by the rule, 11 as a slow one; 12, the last, is not
            with telemetry.step():
                time.sleep(0.08 if i == 11 else 0.005)
        deliver(session)
        linked = exemplar_trace_ids(port)
        telemetry.shutdown()
        exported = {s["trace_id"] for s in rcv.spans if s["name"] == "train.rank_step"}
    assert exported == {trace_id_hex("exlink", s) for s in (0, 5, 10, 11)}
    assert linked and linked <= exported
    assert trace_id_hex("exlink", 11) in linked  # the slow step's bucket links to its trace


def test_straggler_scores_name_the_scored_rank_and_keep_the_exporting_rank(run_dir):
    from telemetry.pipeline.records import OnlineResult

    port = free_port()
    session = telemetry.init(
        run_dir=run_dir, job="scores", sinks=["prometheus"], prometheus_port=port, flush_interval_s=NEVER
    )
    [sink] = session.sinks
    sink.findings(OnlineResult([], {0: 0.01, 1: -0.02, 3: 0.5}, {"straggler": 1}))
    node = os.uname().nodename
    text = scrape(port)
    scores = sorted(line for line in series(text) if line.startswith("train_straggler_score{"))
    assert scores == [
        f'train_straggler_score{{job="scores",local_rank="0",node="{node}",rank="0",scored_rank="{r}"}} {v}'
        for r, v in (("0", 0.01), ("1", -0.02), ("3", 0.5))
    ]
    findings = {
        line.split('kind="')[1].split('"')[0]: line.rsplit(" ", 1)[1]
        for line in series(text)
        if line.startswith("train_findings{")
    }
    assert f'train_findings{{job="scores",kind="straggler",local_rank="0",node="{node}",rank="0"}} 1.0' in text
    assert findings["straggler"] == "1.0" and findings["hang"] == findings["rank_lost"] == "0.0"  # none, not unknown


def test_unknown_throughput_and_mfu_are_absent_not_zero(run_dir, tmp_path):
    port = free_port()
    session = telemetry.init(
        run_dir=run_dir, job="nozero", sinks=["prometheus"], prometheus_port=port, flush_interval_s=NEVER
    )
    unknown = (
        "train_mfu_ratio",
        "train_tokens_per_second",
        "train_samples_per_second",
        "train_tokens_total",
        "train_samples_total",
        "train_last_step",
        "train_last_step_timestamp_seconds",
    )

    def present(text):
        return {line.split("{")[0] for line in series(text)} & set(unknown)

    assert present(scrape(port)) == set()  # before any step: not even the last step
    for _ in range(3):
        with telemetry.step():  # no tokens, no samples, no FLOPs per token
            time.sleep(0.002)
    deliver(session)
    assert present(scrape(port)) == {"train_last_step", "train_last_step_timestamp_seconds"}
    telemetry.shutdown()

    port = free_port()
    session = telemetry.init(
        run_dir=str(tmp_path / "known"),
        job="known",
        sinks=["prometheus"],
        prometheus_port=port,
        flush_interval_s=NEVER,
        flops_per_token=1e6,
        peak_flops=1e12,
    )
    steps(3)  # tokens=100, samples=4
    deliver(session)
    text = scrape(port)
    assert present(text) == set(unknown)
    value = {line.split("{")[0]: float(line.split()[-1]) for line in series(text)}
    assert value["train_tokens_per_second"] == pytest.approx(25 * value["train_samples_per_second"])
    assert value["train_samples_per_second"] > 0 and 0 < value["train_mfu_ratio"] < 1
    assert value["train_samples_total"] == 12


def test_targets_go_to_a_directory_shared_by_runs(tmp_path):
    """rank 0 writes <runs>/prometheus_targets/<job>.json beside the run directories, which one
    file_sd glob watches (promtool checks the glob and what our sink wrote), and removes it at
    shutdown; the run's own prometheus_targets.json stays."""
    from tests.helpers.servers import require

    promtool = require("promtool", "prometheus")
    runs = tmp_path / "runs"
    port = free_port()
    session = telemetry.init(
        run_dir=str(runs / "exp1"), job="exp1", sinks=["prometheus"], prometheus_port=port, flush_interval_s=NEVER
    )
    deliver(session)
    shared = runs / "prometheus_targets" / "exp1.json"
    [entry] = json.loads(shared.read_text())
    assert entry["targets"] == [f"127.0.0.1:{port}"] and entry["labels"]["job"] == "exp1"
    assert entry["labels"]["rank"] == "0"
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(
        "scrape_configs:\n  - job_name: training\n    honor_labels: true\n"
        f'    file_sd_configs: [{{files: ["{runs}/prometheus_targets/*.json"]}}]\n'
    )
    check = subprocess.run([promtool, "check", "config", str(cfg)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    telemetry.shutdown()
    assert not shared.exists()  # the endpoints are gone
    assert json.loads((runs / "exp1" / "prometheus_targets.json").read_text()) == [entry]


def test_the_shared_targets_directory_is_a_setting(tmp_path):
    port = free_port()
    session = telemetry.init(
        run_dir=str(tmp_path / "a" / "exp2"),
        job="exp2",
        sinks=["prometheus"],
        prometheus_port=port,
        flush_interval_s=NEVER,
        prometheus_sd_dir=str(tmp_path / "sd"),
    )
    deliver(session)
    assert (tmp_path / "sd" / "exp2.json").exists() and not (tmp_path / "a" / "prometheus_targets").exists()


def test_a_taken_port_falls_back_to_the_next_free_one_and_the_targets_say_which(run_dir, tmp_path, caplog):
    """A previous job's rank (or anything) holds the port: this rank serves on its next own port
    (port + k x local ranks), says so once, and its Prometheus target lists the port it serves."""
    import glob
    import socket
    import urllib.request

    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    port = blocker.getsockname()[1]
    sd = tmp_path / "sd"
    try:
        telemetry.init(
            run_dir=run_dir,
            job="fallback",
            sinks=["store", "prometheus"],
            prometheus_port=port,
            prometheus_sd_dir=str(sd),
        )
        steps(3)
        served = telemetry.stats()["sinks"]["prometheus"]["port"]
        assert served != port and served > port
        with urllib.request.urlopen(f"http://127.0.0.1:{served}/metrics", timeout=5) as r:
            assert b'train_steps_total{job="fallback"' in r.read()
        [entry] = [json.load(open(p)) for p in glob.glob(os.path.join(run_dir, "prometheus", "rank-*.json"))]
        assert entry[0]["targets"] == [f"127.0.0.1:{served}"]  # this rank's target, as served
        deadline = time.monotonic() + 10
        while not (sd / "fallback.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # rank 0 merges the job's targets on a pipeline tick
        merged = json.load(open(sd / "fallback.json"))  # what Prometheus' file_sd reads
        assert [t for group in merged for t in group["targets"]] == [f"127.0.0.1:{served}"]
        stats = telemetry.shutdown()
    finally:
        blocker.close()
    assert list(stats["sinks"]) == ["store", "prometheus"]
    assert caplog.text.count(f"port {port} is in use; serving /metrics on 127.0.0.1:{served} instead") == 1


def test_a_taken_port_fails_init_when_strict(run_dir):
    import socket

    from telemetry.pipeline.sinks import SinkStartError

    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    port = blocker.getsockname()[1]
    try:
        with pytest.raises(SinkStartError, match=f"prometheus_port: 127.0.0.1:{port} is in use"):
            telemetry.init(
                run_dir=run_dir, job="strictport", sinks=["store", "prometheus"], prometheus_port=port, strict=True
            )
    finally:
        blocker.close()
    telemetry.init(run_dir=run_dir, job="strictport", sinks=["store"])  # nothing half-started is left behind
    telemetry.shutdown()


def test_straggler_costs_are_exported_per_scored_rank(run_dir):
    from telemetry.pipeline.records import OnlineResult

    port = free_port()
    session = telemetry.init(
        run_dir=run_dir, job="costs", sinks=["prometheus"], prometheus_port=port, flush_interval_s=NEVER
    )
    [sink] = session.sinks
    sink.findings(OnlineResult([], {0: 0.0, 1: 0.3}, {"straggler": 1}, {0: 0.0, 1: 0.062}))
    costs = sorted(line for line in series(scrape(port)) if line.startswith("train_straggler_cost_ratio{"))
    assert [c.split('scored_rank="')[1].split('"')[0] + " " + c.rsplit(" ", 1)[1] for c in costs] == [
        "0 0.0",
        "1 0.062",
    ]
    sink.findings(OnlineResult([], {0: 0.0}, {}))  # an older producer without costs: no cost series, no error
    assert "train_straggler_cost_ratio{" not in scrape(port)


def _rich_record(step):
    """A step with something for every per-rank family: phases (and one blocked in a collective), the
    data wait, an op with its span, a process group, a logged value, tokens and samples, a checkpoint
    save, a watched batch, host readings."""
    from telemetry.pipeline.records import SPAN_CHECKPOINT, SPAN_COLLECTIVE, OpStats, Span, StepRecord

    t = 1.8e9 + step
    return StepRecord(
        rank=0,
        step=step,
        start_s=t,
        duration_s=0.5,
        ok=True,
        phases={"data": 0.01, "forward": 0.2, "backward": 0.25},
        phase_comm={"backward": 0.05},
        comm_s=0.05,
        ops={"all_reduce": OpStats(2, 0.05, 0.05, 1 << 20, 1.5 * (1 << 20))},
        tokens=4096,
        samples=8,
        scalars={"loss": 1.5},
        spans=(
            Span(SPAN_COLLECTIVE, "all_reduce", t + 0.3, t + 0.35, group="dp"),
            Span(SPAN_CHECKPOINT, "save", t + 0.4, t + 0.45, nbytes=1000),
        ),
        device={"process_cpu_ratio": 1.0, "process_resident_memory_bytes": 1e9},
        mfu=0.4,
        comm_groups={"dp": (0.05, 1 << 20)},
        io={"checkpoint_io_s": 0.03, "input_ready": 1.0, "read_bytes": 4096.0},
    )


def _families_at(level, tmp_path):
    """The metrics (telemetry.metrics.names) one rank exports at ``metrics_level`` ``level`` after a
    few rich steps, and its exposition."""
    from prometheus_client import generate_latest

    from telemetry.config import Config
    from telemetry.exporters.prometheus import PrometheusSink
    from telemetry.metrics import names as N
    from telemetry.pipeline.records import OnlineResult
    from telemetry.rank import RankContext

    kwargs = {"run_dir": str(tmp_path / level), "job": "lv", "prometheus_port": free_port(), "prometheus_sd_dir": "off"}
    if level != "default":
        kwargs["metrics_level"] = level
    sink = PrometheusSink(Config.resolve(kwargs, environ={}), RankContext.from_env({}), {"stats": dict})
    try:
        sink.write([_rich_record(s) for s in range(3)])
        sink.findings(OnlineResult([], {0: 0.0, 1: 0.3}, {"straggler": 1}, {1: 0.06}))
        text = generate_latest(sink.registry).decode()
    finally:
        sink.close(1.0)
    found = {N.by_series(line.split("{")[0].split(" ")[0]) for line in series(text)}
    found.discard(None)  # _created samples
    return found, text


def test_metrics_level_leaves_out_whole_families_and_renames_none(tmp_path):
    from telemetry.metrics import names as N

    full, full_text = _families_at("full", tmp_path)
    default, _ = _families_at("default", tmp_path)
    assert full == default  # full is the default: today's exporter
    assert len(full) >= 30 and {N.PHASE_DURATION, N.COLLECTIVE_DURATION, N.COMM_GROUP_BYTES, N.LOG_VALUE} <= full
    counts = {"full": len(series(full_text))}
    for level in ("phase", "job"):
        got, text = _families_at(level, tmp_path)
        assert got == {m for m in full if m.exported_at(level)}, level
        counts[level] = len(series(text))
        # what is left out is not declared at all: no HELP or TYPE line either
        for m in full - got:
            assert f"# HELP {m.name}" not in text, (level, m.name)
        # what stays is exactly what full exports for it: same names, labels and values
        kept = {line for line in series(full_text) if N.by_series(line.split("{")[0]) in got}
        kept_here = {line for line in series(text) if N.by_series(line.split("{")[0]) in got}
        assert {k.rsplit(" ", 1)[0] for k in kept} == {k.rsplit(" ", 1)[0] for k in kept_here}, level
    phase, _ = _families_at("phase", tmp_path)
    job, job_text = _families_at("job", tmp_path)
    assert N.PHASE_DURATION in phase and N.PHASE_BLOCKED in phase and N.LOG_VALUE in phase
    assert not {N.COLLECTIVE_DURATION, N.COLLECTIVE_CALLS, N.COLLECTIVE_BUSBW, N.COMM_GROUP_BLOCKED} & phase
    assert not {N.PHASE_DURATION, N.PHASE_BLOCKED, N.LOG_VALUE} & job
    # the job level keeps the step histogram, the counters, compute / comm / data seconds, and the
    # per-op counters the recorded bus bandwidth reads
    assert {N.STEP_DURATION, N.STEPS, N.TOKENS, N.SAMPLES, N.COLLECTIVE_BLOCKED, N.DATALOADER_WAIT} <= job
    assert {N.COLLECTIVE_SECONDS, N.COLLECTIVE_BUS_BYTES, N.STRAGGLER_COST, N.CHECKPOINT_SECONDS} <= job
    assert 'train_collective_bus_bytes_total{job="lv"' in job_text and 'op="all_reduce"' in job_text
    assert counts["job"] < counts["phase"] < counts["full"], counts

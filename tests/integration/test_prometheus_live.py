"""The Prometheus sink scraped by a real Prometheus (every rank of a gloo run; the exporting and the
scored rank kept apart) and pushed to a real Pushgateway."""

import json
import os
import subprocess
import sys
import time

import telemetry
from tests.helpers.paths import ROOT
from tests.helpers.servers import free_port, free_port_range, http_get, prometheus, pushgateway, training_scrape_config


def steps(n, phases=("forward", "backward")):
    for _ in range(n):
        with telemetry.step(tokens=100, samples=4):
            for p in phases:
                with telemetry.phase(p):
                    time.sleep(0.001)
            telemetry.log(loss=0.5)


def series(text):
    return [line for line in text.splitlines() if line and not line.startswith("#")]


NEVER = 60.0  # a flush interval the pipeline thread never reaches within a test: ticks are by hand


def deliver(session):
    """Hand everything recorded so far to the sinks, as the pipeline thread would: two ticks, since
    a finished step is held for one tick before it is built."""
    session.pipeline.tick()
    session.pipeline.settle()  # each sink's worker delivers
    session.pipeline.tick()
    session.pipeline.settle()  # each sink's worker delivers


def test_real_prometheus_scrapes_every_rank_of_a_gloo_run(tmp_path):
    from tests.helpers.otlp_receiver import Receiver

    run_dir = tmp_path / "run"
    job = "run"  # the demo names the job after its run directory
    base = free_port_range(4)
    config = training_scrape_config(tmp_path / "prometheus_targets")
    with prometheus(tmp_path, config) as prom, Receiver() as rcv:
        env = {
            **os.environ,
            "TELEMETRY_PROMETHEUS_PORT": str(base),
            "OTEL_EXPORTER_OTLP_ENDPOINT": rcv.url,
            "TELEMETRY_OTLP_SAMPLE_EVERY": "10",
        }
        demo = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "telemetry",
                "demo",
                "--ranks",
                "4",
                "--steps",
                "700",
                "--run-dir",
                str(run_dir),
                "--json",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            res = prom.wait_for(
                f'train_steps_total{{job="{job}"}}',
                lambda r: len(r) == 4 and all(float(x["value"][1]) > 0 for x in r),
                timeout=90,
            )
            assert sorted(x["metric"]["rank"] for x in res) == ["0", "1", "2", "3"]
            for x in res:
                assert x["metric"]["local_rank"] == x["metric"]["rank"] and x["metric"]["node"]
            targets = json.loads((tmp_path / "prometheus_targets" / f"{job}.json").read_text())
            assert sorted(t["targets"][0] for t in targets) == [f"127.0.0.1:{base + i}" for i in range(4)]
            assert targets == json.loads((run_dir / "prometheus_targets.json").read_text())
            q = prom.wait_for(
                f'histogram_quantile(0.5, sum by (le) (rate(train_step_duration_seconds_bucket{{job="{job}"}}[5s])))',
                lambda r: r and r[0]["value"][1] not in ("NaN",),
                timeout=30,
            )
            p50 = float(q[0]["value"][1])
            assert 0.002 < p50 < 1.0, p50  # the demo's steps take tens of milliseconds
            now = time.time()
            ex = prom.api(
                "query_exemplars",
                query=f'train_step_duration_seconds_bucket{{job="{job}"}}',
                start=now - 120,
                end=now + 5,
            )
            labels = [e["labels"] for block in ex for e in block["exemplars"]]
            assert labels and all(len(lb["trace_id"]) == 32 for lb in labels)
            busbw = prom.query(f'train_collective_busbw_bytes_per_second{{job="{job}",op="all_reduce"}}')
            assert len(busbw) == 4 and all(float(x["value"][1]) > 0 for x in busbw)
        finally:
            out, err = demo.communicate(timeout=240)
        assert demo.returncode == 0, err[-2000:]
        exported = {s["trace_id"] for s in rcv.spans if s["name"] == "train.rank_step"}
    assert {lb["trace_id"] for lb in labels} <= exported  # every exemplar leads to a trace that arrived


def test_real_pushgateway_receives_each_rank(run_dir, tmp_path):
    with pushgateway(tmp_path) as gw:
        telemetry.init(
            run_dir=run_dir,
            job="pushed",
            sinks=["prometheus"],
            prometheus_port=free_port(),
            pushgateway_url=gw,
            push_interval_s=0.5,
        )
        steps(4)
        stats = telemetry.shutdown()  # the final push happens here
        assert stats["sinks"]["prometheus"]["pushes"] >= 1
        text = http_get(f"{gw}/metrics").decode()
        line = [ln for ln in series(text) if ln.startswith("train_steps_total{") and 'job="pushed"' in ln]
        assert line and 'rank="0"' in line[0] and line[0].endswith(" 4")


def test_real_prometheus_keeps_the_exporting_rank_and_the_scored_rank_apart(tmp_path):
    """file_sd target labels (job, rank, ...) and honor_labels, as the README configures them: rank
    0's scores of other ranks keep rank="0" and name the scored rank in scored_rank."""
    from telemetry.pipeline.records import OnlineResult

    runs = tmp_path / "runs"
    port = free_port()
    config = training_scrape_config(runs / "prometheus_targets")
    with prometheus(tmp_path, config) as prom:
        session = telemetry.init(
            run_dir=str(runs / "sc"), job="sc", sinks=["prometheus"], prometheus_port=port, flush_interval_s=NEVER
        )
        deliver(session)
        session.sinks[0].findings(OnlineResult([], {0: 0.0, 2: 0.4, 3: 0.01}, {"straggler": 1}))
        res = prom.wait_for('train_straggler_score{job="sc"}', lambda r: len(r) == 3, timeout=60)
        telemetry.shutdown()
    assert sorted((x["metric"]["rank"], x["metric"]["scored_rank"], x["value"][1]) for x in res) == [
        ("0", "0", "0"),
        ("0", "2", "0.4"),
        ("0", "3", "0.01"),
    ]
    assert all("exported_rank" not in x["metric"] for x in res)

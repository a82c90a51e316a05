"""The shipped agent-mode configuration (telemetry/dashboards/prometheus/agent.yml), for real: a real
2-rank ``telemetry demo`` job at ``metrics_level=job`` is scraped by a real Prometheus in agent mode,
which remote-writes to a second real Prometheus (``--web.enable-remote-write-receiver``) that loads
the shipped recording and alert rules. The central one has every rank's series, the recording rules'
per-rank and per-node results, and the dashboard's Prometheus source reads the job's steps from it.

Every server binds 127.0.0.1; every process runs in a process group of its own and is stopped;
every condition is awaited with a deadline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from telemetry.analysis.inputs.prometheus import list_jobs, open_prometheus
from tests.helpers.paths import ROOT
from tests.helpers.runs import stop_demo
from tests.helpers.servers import (
    Prometheus,
    free_port_range,
    http_get,
    prometheus,
    prometheus_agent,
    stop_group,
)

yaml = pytest.importorskip("yaml")

RULES = os.path.join(ROOT, "telemetry", "dashboards", "prometheus")
AGENT = os.path.join(RULES, "agent.yml")
JOB = "agentjob"  # the demo names its job after the run directory
DEADLINE_S = 180.0  # a busy 2-core machine: the demo's start, the agent's first send, a 15 s rule group


def agent_config(targets_dir, central_url: str) -> str:
    """The shipped agent.yml with what it says to edit filled in (the targets' directory, the central
    store's URL), and its intervals shortened to a second for the test; nothing else changed."""
    with open(AGENT, encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    assert "rule_files" not in cfg and "alerting" not in cfg  # refused in agent mode
    [job] = cfg["scrape_configs"]
    [rw] = cfg["remote_write"]
    assert job["job_name"] == "training" and job["honor_labels"] is True
    cfg["global"]["scrape_interval"] = job["scrape_interval"] = "1s"
    [sd] = job["file_sd_configs"]
    sd["files"] = [f"{targets_dir}/*.json"]
    sd["refresh_interval"] = "1s"
    rw["url"] = f"{central_url}/api/v1/write"
    rw["queue_config"]["batch_send_deadline"] = "1s"
    return yaml.safe_dump(cfg)


def central_config() -> str:
    """The central store: no scrapes of its own (everything comes by remote write), the shipped rules."""
    rules = [os.path.join(RULES, "recording.rules.yml"), os.path.join(RULES, "alerts.rules.yml")]
    return yaml.safe_dump({"global": {"evaluation_interval": "1s"}, "rule_files": rules})


def wait(what: str, check, deadline: float):
    """Poll ``check()`` until it returns something true; fail naming ``what`` at the deadline."""
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def test_an_agent_remote_writes_a_real_job_to_a_central_prometheus_with_the_rules(tmp_path):
    runs = tmp_path / "runs"
    run_dir = runs / JOB
    targets = runs / "prometheus_targets"  # the demo's default prometheus_sd_dir, beside the run
    targets.mkdir(parents=True)
    (tmp_path / "central").mkdir()
    (tmp_path / "agent").mkdir()
    base = free_port_range(2)
    with prometheus(
        tmp_path / "central", central_config(), ("--web.enable-remote-write-receiver", "--rules.alert.resend-delay=2s")
    ) as central:
        with prometheus_agent(tmp_path / "agent", agent_config(targets, central.url)) as agent:
            env = {**os.environ, "TELEMETRY_PROMETHEUS_PORT": str(base), "TELEMETRY_METRICS_LEVEL": "job"}
            demo = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "telemetry",
                    "demo",
                    "--ranks",
                    "2",
                    "--steps",
                    "100000",
                    "--run-dir",
                    str(run_dir),
                ],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            try:
                deadline = time.monotonic() + DEADLINE_S
                checks = _checks(central, agent, deadline)
            finally:
                stop_demo(demo, run_dir)
                stop_group(demo)
    steps, ranks, per_node, run = checks
    assert sorted(ranks) == ["0", "1"] and all(float(v) > 0 for v in steps.values())
    assert per_node == 2  # both ranks on this host's node, counted once each
    assert run.meta["job"] == JOB and run.world_size == 2
    t = run.table
    assert sorted(t["rank"].unique()) == [0, 1] and t["step"].nunique() >= 3
    assert (t["duration_s"] > 0).all() and (t["comm_s"] > 0).all()
    assert not [c for c in t.columns if c in ("forward_s", "backward_s", "optimizer_s")]  # job level: no phases


def _checks(central: Prometheus, agent: str, deadline: float):
    # The agent scrapes both ranks (its own series: it has no query API)
    wait("the agent to scrape both ranks", lambda: _agent_targets_up(agent) == 2, deadline)
    # every rank's series reach the central store, with their labels, and the agent's up series too
    res = wait(
        "both ranks' train_steps_total at the central Prometheus, past their first step",
        lambda: (r := central.query(f'train_steps_total{{job="{JOB}"}} > 0')) and len(r) == 2 and r,
        deadline,
    )
    for x in res:
        assert x["metric"]["node"] and x["metric"]["local_rank"] == x["metric"]["rank"]
    steps = {x["metric"]["rank"]: x["value"][1] for x in res}
    up = central.query(f'up{{job="{JOB}"}}')
    assert sorted(x["metric"]["rank"] for x in up) == ["0", "1"] and all(x["value"][1] == "1" for x in up)
    # metrics_level=job on the wire: no per-phase or per-op-detail family, the counters the rules read
    assert central.query(f'train_phase_duration_seconds_count{{job="{JOB}"}}') == []
    assert central.query(f'train_collective_calls_total{{job="{JOB}"}}') == []
    wait(
        "train_collective_bus_bytes_total centrally",
        lambda: central.query(f'train_collective_bus_bytes_total{{job="{JOB}",op="all_reduce"}}'),
        deadline,
    )
    # the shipped recording rules ran on the remote-written series: per rank and per node
    rec = wait(
        "job_rank:train_step_duration_seconds:mean_rate1m for both ranks",
        lambda: (
            (r := central.query(f'job_rank:train_step_duration_seconds:mean_rate1m{{job="{JOB}"}} > 0'))
            and len(r) == 2
            and r
        ),
        deadline,
    )
    ranks = [x["metric"]["rank"] for x in rec]
    node = wait(
        "job_node:train_ranks:count",
        lambda: central.query(f'job_node:train_ranks:count{{job="{JOB}"}}'),
        deadline,
    )
    per_node = sum(float(x["value"][1]) for x in node)
    # every shipped rule (records and alerts) is loaded and evaluates without an error
    groups = central.api("rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert {r["name"] for r in rules if r["type"] == "alerting"} >= {"TrainingStalled", "TrainingRankLost"}
    assert [(r["name"], r.get("lastError")) for r in rules if r.get("health") == "err"] == []
    # the dashboard's Prometheus source reads the job's steps from the central store
    assert JOB in list_jobs(central.url)

    def read():
        run = open_prometheus(central.url, JOB, minutes=1, window_s=2)
        per_rank = run.table.groupby("rank")["step"].nunique()
        return run if len(per_rank) == 2 and per_rank.min() >= 3 else None

    run = wait("three 2 s windows of steps per rank from the central store", read, deadline)
    return steps, ranks, per_node, run


def _agent_targets_up(agent: str) -> int:
    """The job's targets the agent scraped successfully (an agent has a targets API, no query API)."""
    doc = json.loads(http_get(f"{agent}/api/v1/targets"))
    return sum(1 for t in doc["data"]["activeTargets"] if t["labels"].get("job") == JOB and t["health"] == "up")

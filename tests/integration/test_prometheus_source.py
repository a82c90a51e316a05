"""telemetry.analysis.inputs.prometheus (the package): a job read back from a real Prometheus server's HTTP API.

The deterministic tests read the two jobs tests/helpers/prometheus_backfill.py backfills into a real
Prometheus; the live test scrapes a real ``telemetry demo`` job."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from telemetry.analysis.detectors import analyze
from telemetry.analysis.inputs.prometheus import PROMETHEUS, list_jobs, open_prometheus
from telemetry.steptable.table import TableError
from tests.helpers import prometheus_backfill
from tests.helpers.paths import ROOT
from tests.helpers.prometheus_backfill import (
    A_RANKS,
    HANG_AGO_S,
    HISTORY_S,
    NO_SCRAPES,
    SCRAPE_S,
    SLOW_RANK,
    STEP_BYTES,
    WINDOW_S,
)
from tests.helpers.runs import stop_demo
from tests.helpers.servers import free_port_range, prometheus, training_scrape_config

backfilled = prometheus_backfill.backfilled  # the fixture: a real Prometheus serving both backfilled jobs


# ---- deterministic: backfilled data -------------------------------------------------------------
def test_list_jobs_and_the_choice_of_job(backfilled):
    url, truth = backfilled
    assert list_jobs(url) == ["train-a", "train-b"]
    with pytest.raises(TableError, match=r"2 training jobs.*train-a, train-b.*--job"):
        open_prometheus(url, now=truth["end"])
    with pytest.raises(TableError, match=r"no job 'nope'.*train-a, train-b"):
        open_prometheus(url, "nope", now=truth["end"])


def test_the_table_holds_a_row_per_rank_and_window_with_per_step_means(backfilled):
    url, truth = backfilled
    end = truth["end"]
    run = open_prometheus(url, "train-a", now=end)
    assert run.kind == PROMETHEUS and run.source == url
    t = run.table
    n = 30  # 30 minutes of 60 s windows
    assert run.meta["window_s"] == WINDOW_S and run.meta["windows"] == n
    assert run.meta["scrape_interval_s"] == SCRAPE_S
    assert {k: run.meta[k] for k in ("job", "world_size", "source", "url")} == {
        "job": "train-a",
        "world_size": A_RANKS,
        "source": "prometheus",
        "url": url,
    }
    assert run.meta["hosts"] == {str(r): f"node{r // 4}" for r in range(A_RANKS)}
    assert run.ranks == {r: {"node": f"node{r // 4}", "local_rank": r % 4} for r in range(A_RANKS)}
    assert sorted(t["rank"].unique()) == list(range(A_RANKS)) and len(t) == A_RANKS * n
    # a window's step is the job's last completed step at the window's end (train_last_step)
    steps = [truth["last_step"][end - WINDOW_S * (n - 1 - k)] for k in range(n)]
    assert sorted(t["step"].unique()) == steps
    row = t[(t["rank"] == 0) & (t["step"] == steps[-1])].iloc[0]
    # the window's steps back to back, ending when its last step ended (the gauge: 50 ms before the scrape)
    assert row["row_steps"] == pytest.approx(steps[-1] - steps[-2])
    assert row["start_s"] == pytest.approx(end - 0.05 - row["row_steps"] * (row["duration_s"] + row["data_s"]))
    # each window's per-step means are what the file says
    j = truth["window"]
    for col, per in truth["per_step"].items():
        want = np.full((A_RANKS, n), np.nan)
        for k in range(n):
            rows = np.flatnonzero(j == n - 1 - k)
            assert np.allclose(per[rows], per[rows[0]])
            want[:, k] = per[rows[0]]
        got = t.pivot(index="rank", columns="step", values=col).to_numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=col)
    assert (t["tokens"] == 4096).all() and (t["samples"] == 8).all()
    np.testing.assert_allclose(t["comm_bytes"], STEP_BYTES)
    np.testing.assert_allclose(t[t["rank"] != 7]["mfu"], 0.4)
    assert t[t["rank"] == 7]["mfu"].isna().all()  # its gauge was NaN: no value, not an invented one
    # the time blocked in collectives per phase: backward's, none in forward (its compute is all of it)
    np.testing.assert_allclose(t["comm.backward_s"], t["comm_s"], rtol=1e-6)
    assert (t["comm.forward_s"] == 0).all()
    # rank 5: longer forward, shorter wait, the same step time
    med = t.groupby("rank")[["forward_s", "comm_s", "duration_s"]].median()
    assert med.loc[SLOW_RANK, "forward_s"] > 1.4 * med.drop(SLOW_RANK)["forward_s"].max()
    assert med.loc[SLOW_RANK, "comm_s"] < med.drop(SLOW_RANK)["comm_s"].min()
    assert np.ptp(med["duration_s"]) < 1e-9


def test_detectors_name_the_straggler_and_its_phase(backfilled):
    url, truth = backfilled
    run = open_prometheus(url, "train-a", now=truth["end"])
    result = analyze(run.table, run.progress, run.world_size)
    stragglers = [f for f in result.findings if f.kind == "straggler"]
    assert [(f.ranks, f.phase) for f in stragglers] == [([SLOW_RANK], "forward")], result.findings
    assert not [f for f in result.findings if f.kind == "hang"]
    assert result.summary["tokens_per_s"] > 0


def test_the_dashboard_shows_a_job_from_prometheus(backfilled, monkeypatch):
    """`telemetry dashboard --prometheus URL`: the same views, from the server, marked live."""
    streamlit_testing = pytest.importorskip("streamlit.testing.v1")
    url, truth = backfilled
    from telemetry.dashboards.serve import APP as app

    monkeypatch.setenv("TELEMETRY_DASHBOARD_PROMETHEUS", url)
    at = streamlit_testing.AppTest.from_file(app, default_timeout=60)
    at.run()  # no --job and two jobs there: the sidebar offers them
    assert not at.exception, [e.value for e in at.exception]
    [jobs] = [s for s in at.sidebar.selectbox if s.label == "job"]
    assert jobs.options == ["train-a", "train-b"]
    monkeypatch.setenv("TELEMETRY_DASHBOARD_JOB", "train-a")
    at = streamlit_testing.AppTest.from_file(app, default_timeout=60)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("straggler - rank 5 - phase forward" in e.label for e in at.expander)
    assert any("windows of 60 s with steps" in c.value for c in at.caption)
    assert [m for m in at.markdown if "live" in m.value]
    for view in ("ranks", "findings", "collectives", "devices"):
        [radio] = [r for r in at.sidebar.radio if r.label == "view"]
        radio.set_value(view).run()
        assert not at.exception, (view, [e.value for e in at.exception])
    assert any(s.label == "signal" for s in at.selectbox)  # device readings from the server
    monkeypatch.setenv("TELEMETRY_DASHBOARD_JOB", "nope")
    at = streamlit_testing.AppTest.from_file(app, default_timeout=60)
    at.run()
    assert not at.exception and "no job 'nope'" in at.error[0].value


def test_records_carry_device_readings_and_collectives_per_step(backfilled):
    url, truth = backfilled
    end = truth["end"]
    run = open_prometheus(url, "train-a", now=end)
    assert len(run.records) == len(run.table)
    by = {(r["rank"], r["step"]): r for r in run.records}
    at_end, before = truth["last_step"][end], truth["last_step"][end - WINDOW_S]
    last = by[(0, at_end)]
    assert last["start_s"] == pytest.approx(run.table.query("rank == 0")["start_s"].max())
    dev = last["device"]
    assert dev["gpu_utilization_ratio"] == 0.5  # rank 0's own GPU (gpu="0"), not gpu="3"
    assert dev["process_cpu_ratio"] == 1.0
    assert dev["process_resident_memory_bytes"] == 1e9  # the reading at the window's end
    assert by[(0, before)]["device"]["process_resident_memory_bytes"] == 1e9 - WINDOW_S
    assert dev["gpu_energy_joules"] == 300.0 * HISTORY_S  # a counter's latest value, named as in the run store
    assert by[(3, at_end)]["device"]["gpu_utilization_ratio"] == 0.65
    count, secs, blocked, nbytes, bus = last["ops"]["all_reduce"]
    comm = truth["per_step"]["comm_s"][-1, 0]
    assert count == pytest.approx(2) and nbytes == pytest.approx(STEP_BYTES)
    assert secs == pytest.approx(comm) and blocked == secs
    assert bus == pytest.approx(STEP_BYTES * 2 * 7 / 8)  # bytes x the bus factor (busbw / algbw)
    assert last["comm_s"] == pytest.approx(comm)
    assert math.isnan(by[(6, at_end)]["ops"]["all_reduce"][4])  # its busbw gauge was +Inf: not known
    assert by[(6, at_end)]["ops"]["all_reduce"][3] == pytest.approx(STEP_BYTES)
    assert {"dev.gpu_utilization_ratio", "dev.process_cpu_ratio", "dev.gpu_energy_joules"} <= set(run.table.columns)
    p = run.progress[0]
    assert p["time_s"] == end and p["last_step_end_s"] == end - 0.05 and not p["finished"]
    assert p["open_step"] == p["last_step"] + 1 and p["open_step_since_s"] == pytest.approx(end - 0.02)
    assert p["collective"] is None and p["device"]["gpu_utilization_ratio"] == 0.5
    assert sorted(run.progress) == list(range(A_RANKS))


def test_a_hung_job_has_no_rows_after_the_hang_and_the_detector_names_the_rank(backfilled):
    url, truth = backfilled
    end = truth["end"]
    run = open_prometheus(url, "train-b", now=end)
    t = run.table
    assert sorted(t["rank"].unique()) == [0, 1]
    # no step after the hang: no row, not a zero; the last window's step is the last before the hang
    assert t["step"].nunique() == 30 - HANG_AGO_S // WINDOW_S
    assert t["step"].max() == 20 * (HISTORY_S - HANG_AGO_S) // SCRAPE_S - 1
    assert t["comm.forward_s"].isna().all()  # an exporter without train_phase_blocked_seconds: not known
    np.testing.assert_allclose(t["duration_s"], 0.23)
    np.testing.assert_allclose(t["forward_s"], 0.1)
    assert "data_s" not in t.columns and "tokens" not in t.columns  # never counted, so absent
    p0, p1 = run.progress[0], run.progress[1]
    assert p0["collective"] == "a collective" and p1["collective"] is None
    assert p1["open_step"] == p1["last_step"] + 1 and p1["open_step_since_s"] == pytest.approx(end - HANG_AGO_S)
    [hang] = [f for f in analyze(t, run.progress, run.world_size).findings if f.kind == "hang"]
    assert hang.ranks == [1] and "rank(s) 0 wait in a collective" in hang.evidence


def test_window_rule_and_bounds(backfilled):
    url, truth = backfilled
    end = truth["end"]
    run = open_prometheus(url, "train-a", now=end, minutes=10, window_s=120)
    assert run.meta["window_s"] == 120 and run.meta["windows"] == 5 and run.table["step"].nunique() == 5
    # more windows than one query may return per series: the window grows, and says so
    run = open_prometheus(url, "train-a", now=end, minutes=24 * 60, window_s=1)
    assert run.meta["window_s"] >= 24 * 3600 / 11_000 and run.meta["windows"] <= 11_000
    assert any("raised to" in w for w in run.warnings)
    with pytest.raises(TableError, match="minutes"):
        open_prometheus(url, "train-a", minutes=0)


def test_not_a_prometheus_api(backfilled):
    url, _ = backfilled
    with pytest.raises(TableError, match="not a Prometheus server's HTTP API"):
        list_jobs(url + "/metrics")


def test_an_empty_server_says_what_to_scrape(tmp_path):
    with prometheus(tmp_path, NO_SCRAPES) as prom:
        with pytest.raises(TableError, match="no train_steps_total.*prometheus_sd_dir"):
            open_prometheus(prom.url)
        assert list_jobs(prom.url) == []


# ---- live: a real demo job scraped by a real Prometheus -----------------------------------------
def test_a_live_demo_job_shows_every_rank(tmp_path):
    run_dir = tmp_path / "runs" / "live"
    base = free_port_range(4)
    config = training_scrape_config(tmp_path / "runs" / "prometheus_targets")
    with prometheus(tmp_path, config) as prom:
        env = {**os.environ, "TELEMETRY_PROMETHEUS_PORT": str(base)}
        demo = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "telemetry",
                "demo",
                "--ranks",
                "4",
                "--steps",
                "100000",
                "--run-dir",
                str(run_dir),
                "--json",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            prom.wait_for('train_steps_total{job="live"}', lambda r: len(r) == 4, timeout=60)
            collecting = _says_collecting(prom.url)  # seconds old: 8 windows of 15 s are 2 min away
            deadline = time.monotonic() + 90
            while True:  # until every rank has a few 2 s windows of steps
                run = open_prometheus(prom.url, minutes=1, window_s=2)
                per_rank = run.table.groupby("rank")["step"].nunique()
                if (len(per_rank) == 4 and per_rank.min() >= 3) or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
        finally:
            stop_demo(demo, run_dir)
    cli, page = collecting
    assert cli["need"] == 8 and 0 <= cli["have"] < 8 and cli["window_s"] == 15, cli
    assert "collecting" in page and "windows of 15 s" in page, page
    assert run.meta["job"] == "live" and run.world_size == 4 and run.meta["window_s"] == 2
    t = run.table
    assert sorted(t["rank"].unique()) == [0, 1, 2, 3] and t["step"].nunique() >= 2
    assert (t["duration_s"] > 0).all() and (t["comm_s"] > 0).all()
    # a phase is known once its series has two samples in a window: from each rank's second window on,
    # never a false 0 before (NaN: not known)
    for _, rows in t.sort_values("step").groupby("rank"):
        assert (rows["forward_s"].iloc[1:] > 0).all() and not (rows["forward_s"] == 0).any(), rows["forward_s"]
    assert {"forward_s", "backward_s", "optimizer_s"} <= set(t.columns)
    # The op counters and device gauges of a rank appear with its first call and first sample: in the
    # rank's first window they may have one sample only (no increase, not known); from its second, all.
    first = {r: min(rec["step"] for rec in run.records if rec["rank"] == r) for r in range(4)}
    later = [rec for rec in run.records if rec["step"] > first[rec["rank"]]]
    assert later and all(rec["ops"].get("all_reduce") for rec in later)
    assert all("process_cpu_ratio" in (rec["device"] or {}) for rec in later)
    assert sorted(run.progress) == [0, 1, 2, 3] and all(p["last_step"] for p in run.progress.values())
    json.dumps(run.meta)
    assert math.isfinite(analyze(t, run.progress, run.world_size).summary["step_time_s"])


def _says_collecting(url: str) -> tuple[dict, str]:
    """In a job's first minute: ``telemetry analyze --prometheus --json``'s ``summary.collecting`` (its
    report says the same), and what the dashboard's page says instead of a finding list."""
    from streamlit.testing.v1 import AppTest

    from telemetry.dashboards.serve import APP

    def cli(*extra: str) -> subprocess.CompletedProcess:
        args = [sys.executable, "-m", "telemetry", "analyze", "--prometheus", url, "--job", "live", *extra]
        return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)

    js = cli("--json")
    assert js.returncode == 0, js.stderr
    doc = json.loads(js.stdout)
    assert not [f for f in doc["findings"] if f["kind"] not in ("hang", "rank_lost")], doc["findings"]
    text = cli()
    assert text.returncode == 0 and "collecting:" in text.stdout and "No finding" not in text.stdout, text.stdout
    os.environ["TELEMETRY_DASHBOARD_PROMETHEUS"], os.environ["TELEMETRY_DASHBOARD_JOB"] = url, "live"
    try:
        at = AppTest.from_file(APP, default_timeout=60)
        at.run()
    finally:
        del os.environ["TELEMETRY_DASHBOARD_PROMETHEUS"], os.environ["TELEMETRY_DASHBOARD_JOB"]
    assert not at.exception, [e.value for e in at.exception]
    page = " ".join(i.value for i in at.info)
    assert not [e.label for e in at.expander if "straggler" in e.label], page
    return doc["summary"]["collecting"], page

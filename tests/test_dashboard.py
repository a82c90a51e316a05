"""The Streamlit dashboard, driven by Streamlit's AppTest: every page renders without an exception
and shows the numbers and the straggler's rank; bad input is a message, not a traceback."""

import os

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from dashboards import data as D  # noqa: E402
from telemetry.demo.simulate import Fault, Scenario, simulate  # noqa: E402

APP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "dashboards", "app.py")


@pytest.fixture
def straggler_table(tmp_path):
    path = tmp_path / "steps.parquet"
    simulate(Scenario(ranks=8, steps=300, faults=(Fault("straggler", ranks=(5,), phase="forward", factor=1.5),))
             ).to_parquet(path, index=False)
    return str(path)


def run_app(monkeypatch, path):
    monkeypatch.setenv("TELEMETRY_DASHBOARD_PATH", path)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_every_page_shows_the_run_and_names_the_straggler(monkeypatch, straggler_table):
    at = run_app(monkeypatch, straggler_table)
    [views] = [r for r in at.sidebar.radio if r.label == "view"]
    assert views.options == ["Overview", "Ranks", "Findings"]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["median step time"].endswith(" ms") and metrics["tokens/s"] != "-"
    assert float(metrics["estimated slowdown"].rstrip("%")) > 1
    titles = [e.label for e in at.expander]
    assert any("straggler - rank 5 - phase forward" in t for t in titles), titles
    assert len(at.get("vega_lite_chart")) == 2  # step time, goodput

    views.set_value("ranks").run()
    assert not at.exception and at.header[0].value == "Ranks"
    summary = at.dataframe[0].value
    assert "straggler (forward)" in summary.loc[summary["rank"] == 5, "findings"].iloc[0]
    assert len(at.get("vega_lite_chart")) == 1  # the heatmap

    [views] = [r for r in at.sidebar.radio if r.label == "view"]
    views.set_value("findings").run()
    assert not at.exception and any("straggler - rank 5" in e.label for e in at.expander)


def test_a_missing_run_is_a_message(monkeypatch, tmp_path):
    at = run_app(monkeypatch, str(tmp_path / "nope"))
    assert "does not exist" in at.error[0].value


def test_an_empty_run_directory_is_a_message(monkeypatch, tmp_path):
    (tmp_path / "run" / "ranks").mkdir(parents=True)
    at = run_app(monkeypatch, str(tmp_path / "run"))
    assert "holds no steps yet" in at.error[0].value


def test_the_heatmap_downsamples_and_still_shows_one_slow_rank():
    table = simulate(Scenario(ranks=16, steps=2000, jitter=0.1,
                              faults=(Fault("straggler", ranks=(11,), phase="backward", factor=1.3),)))
    from telemetry.analysis.detectors.matrix import from_table

    cells = D.heatmap(from_table(table), "compute")
    assert cells["step"].nunique() <= D.MAX_HEATMAP_COLUMNS and cells["rank"].nunique() == 16
    per_rank = cells.groupby("rank")["ms"].median()
    assert per_rank.idxmax() == 11 and per_rank[11] > 1.1 * per_rank.drop(11).max()


def test_step_percentiles_are_one_line_per_percentile():
    from telemetry.analysis.detectors.matrix import from_table

    df = D.step_percentiles(from_table(simulate(Scenario(ranks=8, steps=50))))
    assert set(df["percentile"]) == {"p50", "p95"} and len(df) == 100
    p = df.pivot(index="step", columns="percentile", values="ms")
    assert (p["p95"] >= p["p50"]).all()


def test_without_a_path_it_offers_the_runs_under_runs(monkeypatch, tmp_path):
    import telemetry

    for name in ("a", "b"):
        telemetry.init(run_dir=str(tmp_path / "runs" / name), job=name, sinks=["store"])
        with telemetry.step():
            pass
        telemetry.shutdown()
    monkeypatch.delenv("TELEMETRY_DASHBOARD_PATH", raising=False)
    monkeypatch.setenv("TELEMETRY_DASHBOARD_ROOT", str(tmp_path / "runs"))
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception
    [box] = [s for s in at.sidebar.selectbox if s.label == "run"]
    assert sorted(os.path.basename(o) for o in box.options) == ["a", "b"]
    monkeypatch.setenv("TELEMETRY_DASHBOARD_ROOT", str(tmp_path / "empty"))
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert "No run directory under" in at.error[0].value


def test_without_streamlit_the_command_says_how_to_install(monkeypatch, capsys, straggler_table):
    import importlib.util

    from telemetry.cli import main as cli

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "streamlit" else real(name, *a))
    assert cli(["dashboard", straggler_table]) == 2
    assert "pip install 'training-telemetry[dashboard]'" in capsys.readouterr().err


@pytest.mark.slow
def test_telemetry_dashboard_serves_on_localhost_and_stops_with_its_server(straggler_table):
    import signal
    import subprocess
    import sys
    import time
    import urllib.request

    from servers import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "telemetry", "dashboard", straggler_table, "--port", str(port)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = proc.stdout.readline()
        assert f"http://127.0.0.1:{port}" in line
        deadline = time.monotonic() + 60
        while True:
            try:
                assert urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read() == b"ok"
                break
            except OSError:
                assert time.monotonic() < deadline, "the dashboard never became healthy"
                time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 130
        with pytest.raises(OSError):  # the Streamlit server went with it
            urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_real_browser_renders_the_findings_and_charts_without_an_exception(straggler_table):
    import signal
    import subprocess
    import sys
    import time
    import urllib.request

    import browser
    from servers import free_port

    if browser.chromium() is None:
        pytest.skip("Debian's chromium is not installed (scripts/system-deps.sh installs it)")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "telemetry", "dashboard", straggler_table, "--port", str(port)],
                            stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/_stcore/health", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, "the dashboard never became healthy"
                time.sleep(0.3)
        # A dump can race the app's websocket and show the empty shell (the first after a start
        # always does): dump again until the page has drawn its findings, up to a deadline.
        for _ in range(6):
            dom = browser.dump_dom(url)
            if 'data-testid="stExpander"' in dom:
                break
        assert 'data-testid="stApp"' in dom
        assert "straggler - rank 5 - phase forward" in dom
        assert 'data-testid="stVegaLiteChart"' in dom
        assert 'data-testid="stException"' not in dom
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)


def test_a_long_run_is_drawn_in_blocks_that_keep_a_slow_step():
    from telemetry.analysis.detectors.matrix import from_table

    table = simulate(Scenario(ranks=4, steps=3000, spikes=((1, 1234, 0.5),)))
    df = D.step_percentiles(from_table(table), max_points=1000)
    assert df["step"].nunique() <= 1000
    p95 = df[df["percentile"] == "p95"].set_index("step")["ms"]
    assert p95.idxmax() <= 1234 < p95.idxmax() + 3 and p95.max() > 400  # the 0.5 s spike survives

"""The Streamlit dashboard, driven by Streamlit's AppTest: every page renders without an exception
and shows the numbers and the straggler's rank; bad input is a message, not a traceback."""

import os
import time

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from telemetry.analysis.load import open_input
from telemetry.dashboards import data as D
from telemetry.dashboards.serve import APP
from telemetry.demo.simulate import Fault, Scenario, simulate


@pytest.fixture
def straggler_table(tmp_path):
    path = tmp_path / "steps.parquet"
    simulate(
        Scenario(ranks=8, steps=300, faults=(Fault("straggler", ranks=(5,), phase="forward", factor=1.5),))
    ).to_parquet(path, index=False)
    return str(path)


def run_app(monkeypatch, path):
    monkeypatch.setenv("TELEMETRY_DASHBOARD_PATH", path)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


VIEWS = ["Overview", "Ranks", "Findings", "Collectives", "Input and devices", "Compare"]


def show(at, view):
    """Switch the app to ``view`` (a key of views.VIEWS) and check it drew without an exception."""
    [radio] = [r for r in at.sidebar.radio if r.label == "view"]
    radio.set_value(view).run()
    assert not at.exception, [e.value for e in at.exception]
    assert (
        at.header[0].value
        == dict(zip(["overview", "ranks", "findings", "collectives", "devices", "compare"], VIEWS))[view]
    )
    return at


def test_every_page_shows_the_run_and_names_the_straggler(monkeypatch, straggler_table):
    at = run_app(monkeypatch, straggler_table)
    [views] = [r for r in at.sidebar.radio if r.label == "view"]
    assert views.options == VIEWS
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["median step time"].endswith(" ms") and metrics["tokens/s"] != "-"
    assert float(metrics["estimated slowdown"].rstrip("%")) > 1
    titles = [e.label for e in at.expander]
    assert any("straggler - rank 5 - phase forward" in t for t in titles), titles
    assert len(at.get("vega_lite_chart")) == 2  # step time, goodput

    show(at, "ranks")
    summary = at.dataframe[0].value
    assert "straggler (forward)" in summary.loc[summary["rank"] == 5, "findings"].iloc[0]
    assert len(at.get("vega_lite_chart")) == 1  # the heatmap

    show(at, "findings")
    assert any("straggler - rank 5" in e.label for e in at.expander)
    [focus] = [s for s in at.selectbox if s.label == "finding"]
    assert "forward compute (ms/step)" in at.caption[0].value and len(at.get("vega_lite_chart")) == 2

    show(at, "collectives")  # a steps table: only comm_s, said so, and its heatmap
    assert "no per-collective records" in at.info[0].value and len(at.get("vega_lite_chart")) == 1

    show(at, "devices")  # the simulator's tables carry CUDA memory readings
    [signal] = [s for s in at.selectbox if s.label == "signal"]
    assert "CUDA memory allocated (GiB)" in signal.options
    assert list(at.dataframe[0].value["rank"]) == list(range(8))

    show(at, "compare")  # no base given
    assert "Nothing to compare with" in at.info[0].value


@pytest.mark.slow
def test_every_page_on_a_real_demo_run_with_a_straggler(monkeypatch, straggler_demo):
    """A run directory written by a real 4-rank gloo job, rank 2's forward 2x slower."""
    _, _, run_dir = straggler_demo
    monkeypatch.setenv("TELEMETRY_DASHBOARD_BASE", run_dir)  # compared with itself: no change
    at = run_app(monkeypatch, run_dir)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["tokens/s"] != "-" and float(metrics["estimated slowdown"].rstrip("%")) > 1
    assert any("straggler - rank 2 - phase forward" in e.label for e in at.expander)
    assert not [m for m in at.markdown if "live" in m.value]  # a finished run: no live marker, no polling

    show(at, "ranks")
    summary = at.dataframe[0].value
    assert "straggler (forward)" in summary.loc[summary["rank"] == 2, "findings"].iloc[0]

    show(at, "findings")
    focus = at.selectbox(key="focus")  # the straggler: the job's low_utilization may be listed first
    focus.set_value(next(i for i, title in enumerate(focus.options) if "straggler" in title)).run()
    assert "forward compute (ms/step)" in at.caption[0].value

    show(at, "collectives")  # per-op records: latency, bandwidth, message sizes, per rank
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["ops"] == "1" and metrics["latency per call (median)"].endswith(" ms")
    assert metrics["bus bandwidth (median)"].endswith(" GB/s")
    assert len(at.get("vega_lite_chart")) == 5
    table = at.dataframe[0].value
    assert set(table["op"]) == {"all_reduce"} and sorted(table["rank"]) == [0, 1, 2, 3]
    assert table.set_index("rank")["blocked ms/step"].idxmin() == 2  # the straggler arrives last, waits least

    show(at, "devices")  # a CPU run: said so, with the process's CPU and memory
    assert any("No GPU was sampled" in i.value for i in at.info)
    [signal] = [s for s in at.selectbox if s.label == "signal"]
    assert signal.options[:2] == ["process CPU (% of one core)", "process resident memory (GiB)"]
    assert sorted(at.dataframe[0].value["rank"]) == [0, 1, 2, 3]

    show(at, "compare")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["step time change (new against base)"] == "+0.0%"
    assert at.subheader[-1].value == "Changes (0)"


def test_compare_shows_the_regressed_phase(monkeypatch, tmp_path):
    base, new = tmp_path / "base.parquet", tmp_path / "new.parquet"
    simulate(Scenario(ranks=8, steps=300)).to_parquet(base, index=False)
    simulate(
        Scenario(ranks=8, steps=300, seed=7, faults=(Fault("regression", phase="backward", factor=1.3),))
    ).to_parquet(new, index=False)
    monkeypatch.setenv("TELEMETRY_DASHBOARD_BASE", str(base))
    at = show(run_app(monkeypatch, str(new)), "compare")
    metrics = {m.label: m.value for m in at.metric}
    assert float(metrics["step time change (new against base)"].rstrip("%")) > 5
    table = at.dataframe[0].value.set_index("series")
    assert table.loc["backward", "significant"] and table.loc["backward", "change"] > 0.2
    assert not table.loc["forward", "significant"]
    assert any("regression - job-wide - phase backward" in e.label for e in at.expander)


def test_the_app_writes_nothing_in_the_run(monkeypatch, tmp_path):
    import telemetry

    run = str(tmp_path / "run")
    telemetry.init(run_dir=run, job="ro", sinks=["store"])
    for _ in range(20):
        with telemetry.step():
            pass
    telemetry.shutdown()

    def listing():
        return sorted(
            (os.path.join(d, f), os.path.getmtime(os.path.join(d, f)), os.path.getsize(os.path.join(d, f)))
            for d, _, fs in os.walk(tmp_path)
            for f in fs
        )

    before = listing()
    at = run_app(monkeypatch, run)
    for view in ("ranks", "findings", "collectives", "devices", "compare"):
        show(at, view)
    assert listing() == before


def test_a_run_still_being_written_is_marked_live_and_a_finished_one_is_not(monkeypatch, tmp_path):
    import telemetry

    run = str(tmp_path / "run")
    telemetry.init(run_dir=run, job="live", sinks=["store"], flush_interval_s=0.05)
    for _ in range(30):
        with telemetry.step():
            pass
    deadline = time.monotonic() + 20
    while (open_input(run).progress.get(0) or {}).get("last_step") != 29:  # the pipeline thread wrote it
        assert time.monotonic() < deadline, "the run store never saw step 29"
        time.sleep(0.05)
    try:
        at = run_app(monkeypatch, run)
        [marker] = [m.value for m in at.markdown if "live" in m.value]
        assert "last step 29 at" in marker and "every" in marker
    finally:
        telemetry.shutdown()
    at = run_app(monkeypatch, run)
    assert not [m for m in at.markdown if "live" in m.value]


def test_gpu_signals_and_throttle_reasons_are_shown_per_rank():
    from telemetry.analysis.detectors.matrix import from_table
    from telemetry.dashboards import devices

    t = simulate(Scenario(ranks=4, steps=100))
    t["dev.gpu_utilization_ratio"] = 0.9
    t["dev.gpu_sm_clock_hertz"] = 1.98e9
    t.loc[t["rank"] == 3, "dev.gpu_sm_clock_hertz"] = 1.2e9
    t["dev.gpu_clock_event_hw_slowdown"] = 0.0
    t.loc[(t["rank"] == 3) & (t["step"] >= 50), "dev.gpu_clock_event_hw_slowdown"] = 1.0
    m = from_table(t)
    assert devices.has_gpu(m) and devices.signals(m)[:2] == ["gpu_utilization_ratio", "gpu_sm_clock_hertz"]
    summary = devices.summary(m).set_index("rank")
    assert summary.loc[3, "SM clock (MHz)"] == pytest.approx(1200) and summary.loc[0, "GPU utilization (%)"] == 90
    thr = devices.throttle_reasons(m)
    assert thr.to_dict("records") == [{"rank": 3, "reason": "hw slowdown", "share of steps": 0.5}]
    assert devices.throttle_reasons(m, (0, 49)).empty


def test_a_missing_run_is_a_message(monkeypatch, tmp_path):
    at = run_app(monkeypatch, str(tmp_path / "nope"))
    assert "does not exist" in at.error[0].value


def test_an_empty_run_directory_is_a_message(monkeypatch, tmp_path):
    (tmp_path / "run" / "ranks").mkdir(parents=True)
    at = run_app(monkeypatch, str(tmp_path / "run"))
    assert "holds no steps yet" in at.error[0].value


def test_the_heatmap_downsamples_and_still_shows_one_slow_rank():
    table = simulate(
        Scenario(
            ranks=16, steps=2000, jitter=0.1, faults=(Fault("straggler", ranks=(11,), phase="backward", factor=1.3),)
        )
    )
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
    import urllib.request

    from tests.helpers.servers import free_port

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "telemetry", "dashboard", straggler_table, "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout.readline().startswith(f"telemetry dashboard: starting on 127.0.0.1:{port}")
        # the URL is printed once the server answers
        assert f"http://127.0.0.1:{port} " in proc.stdout.readline()
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read() == b"ok"
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

    from tests.helpers import browser
    from tests.helpers.servers import free_port

    if browser.chromium() is None:
        pytest.skip("Debian's chromium is not installed (scripts/system-deps.sh installs it)")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "telemetry", "dashboard", straggler_table, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
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


@pytest.mark.parametrize(
    "args, says",
    [
        (["--job", "exp1"], "--job goes with --prometheus"),
        (["--prometheus", "127.0.0.1:9090"], "accepted: an http:// or https:// URL"),
        (["RUN", "--prometheus", "http://127.0.0.1:9090"], "give it no run directory"),
        (["RUN", "--base", "/nonexistent/base"], "'/nonexistent/base' does not exist"),
    ],
)
def test_dashboard_arguments_are_checked_before_anything_starts(capsys, straggler_table, args, says):
    from telemetry.cli import main as cli

    assert cli(["dashboard", *[straggler_table if a == "RUN" else a for a in args]]) == 2
    assert says in capsys.readouterr().err


@pytest.mark.slow  # a 128 x 4,000 table through every view: seconds of CPU, no server
def test_every_page_on_a_large_simulated_run(monkeypatch, tmp_path):
    path = tmp_path / "large.parquet"
    simulate(
        Scenario(
            ranks=128,
            steps=4000,
            jitter=0.05,
            faults=(Fault("straggler", ranks=(77,), phase="forward", factor=1.3, start=1000),),
        )
    ).to_parquet(path, index=False)
    at = run_app(monkeypatch, str(path))
    assert any("straggler - rank 77 - phase forward" in e.label for e in at.expander)
    assert at.caption[0].value.startswith("128 ranks, 4000 steps")
    show(at, "ranks")
    summary = at.dataframe[0].value
    assert len(summary) == 128 and "straggler" in summary.loc[summary["rank"] == 77, "findings"].iloc[0]
    for view in ("findings", "collectives", "devices", "compare"):
        show(at, view)
    [slider] = [s for s in at.sidebar.slider if s.label == "steps"]
    slider.set_value((1500, 2500)).run()  # a step range: the views follow it
    assert not at.exception


def test_a_slow_node_is_marked_on_its_ranks_and_the_summary_names_the_nodes(monkeypatch, tmp_path):
    path = tmp_path / "nodes.parquet"
    simulate(
        Scenario(
            ranks=16,
            steps=400,
            ranks_per_node=4,
            faults=(Fault("straggler", ranks=(4, 5, 6, 7), phase="backward", factor=1.1),),
        )
    ).to_parquet(path, index=False)
    at = run_app(monkeypatch, str(path))
    assert any("straggler - rank 4, 5, 6, 7 - phase backward" in e.label for e in at.expander)
    summary = show(at, "ranks").dataframe[0].value.set_index("rank")
    assert summary.loc[5, "node"] == "node1" and "straggler" in summary.loc[5, "findings"]
    assert summary.loc[0, "findings"] == ""

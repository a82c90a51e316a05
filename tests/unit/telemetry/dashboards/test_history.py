"""The dashboard's History view: its tables (telemetry/dashboards/history.py) on a simulated series of 12
runs whose backward phase is 3% slower from run 8 on, and the view driven by Streamlit's AppTest."""

import os

import pytest

pytest.importorskip("streamlit")

from telemetry.dashboards import history as H
from telemetry.demo.simrun import write_series
from telemetry.demo.simulate import Fault, Scenario
from tests.helpers.apptest import run_app, show
from tests.helpers.kineto_traces import write_capture


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("history") / "series")
    sc = Scenario(
        name="hist", ranks=8, steps=300, seed=7, faults=(Fault("regression", phase="backward", factor=1.03, start=0),)
    )
    runs = write_series(sc, out, 12, from_run=8)
    for k, run in enumerate(runs, start=1):  # each run's baseline capture, the gemm 40 us longer from run 8
        write_capture(run, "baseline", {0: "baseline", 3: "baseline"}, slow_us=40.0 if k >= 8 else 0.0)
    return out


def test_the_tables_name_run_8_backward_and_write_nothing_in_the_runs(series):
    h = H.load([series])
    assert not h.skipped and len(h.doc["runs"]) == 12
    assert not any(os.path.exists(os.path.join(series, n, "summary.json")) for n in os.listdir(series))

    assert H.metrics(h)[0] == "step_time_s"
    assert {"forward_s", "backward_s", "optimizer_s"} <= set(H.metrics(h))

    df = H.trend(h)
    assert list(df.columns) == ["n", "run", "start", "commit", "tags", "metric", "value"]
    steps = df[df["metric"] == "step_time_s"]
    assert list(steps["n"]) == list(range(1, 13)) and list(steps["run"])[7] == "run-08"
    assert steps["start"].notna().all() and list(steps["commit"])[7] == "sim-8"

    table = H.changes_table(h)
    [row] = table[table["metric"] == "backward_s"].to_dict("records")
    assert row["from run"] == 8 and row["run after"] == "run-08" and row["run before"] == "run-07"
    assert row["regression"] and 0.015 < row["change"] < 0.05

    [c] = [c for c in h.doc["changes"] if c["metric"] == "backward_s"]
    diff = H.diff_table(c)
    assert diff.iloc[0]["metric"] == "backward_s"
    before, after = H.pair(h, c)
    assert (os.path.basename(before), os.path.basename(after)) == ("run-07", "run-08")
    assert H.compare_command(h, c) == f"telemetry dashboard {after} --base {before}"
    assert "from run 8 (run-08): backward_s +" in H.change_label(c)


def test_the_chart_marks_the_change_at_run_8(series):
    h = H.load([series])
    df = H.trend(h)
    for x in ("n", "start"):
        spec = H.chart(df, "backward_s", h.doc["changes"], x).to_dict()
        marks = [layer["mark"]["type"] if isinstance(layer["mark"], dict) else layer["mark"] for layer in spec["layer"]]
        assert marks == ["line", "point", "rule"]
    rules = H.chart(df, "backward_s", h.doc["changes"]).to_dict()
    data = rules["datasets"]
    assert any(row.get("n") == 8 and row.get("this series") for rows in data.values() for row in rows)


def test_the_source_paths_and_no_runs(tmp_path):
    assert H.source_paths("") == []
    assert H.source_paths(os.pathsep.join(["/a", "/b"])) == ["/a", "/b"]
    h = H.load([str(tmp_path)])
    assert h.doc["runs"] == [] and H.changes_table(h).empty


def test_the_history_view_shows_the_trend_and_names_run_8_backward(monkeypatch, series):
    monkeypatch.setenv(H.ENV, series)
    at = show(run_app(monkeypatch, os.path.join(series, "run-12")), "history")
    assert not at.info
    [metric] = [s for s in at.selectbox if s.label == "series"]
    assert metric.value == "step_time_s" and "backward_s" in metric.options
    assert len(at.get("vega_lite_chart")) == 1
    changes = at.dataframe[0].value
    assert 8 in set(changes.loc[changes["metric"] == "backward_s", "from run"])
    [change] = [s for s in at.selectbox if s.label == "change"]
    label = next(o for o in change.options if "backward_s" in o)
    assert label.startswith("from run 8 (run-08)")
    change.set_value(label).run()
    assert at.dataframe[1].value.iloc[0]["metric"] == "backward_s"
    # the runs either side: their steps compared, and their captures of rank 0: the kernel that moved
    assert any("run-07 -> run-08, regression: phase backward" in m.value for m in at.markdown)
    assert any(m.value.startswith("**Captures compared**: rank 0 in the slower run (run-08") for m in at.markdown)
    top = at.dataframe[2].value.iloc[0]
    assert (top["kind"], top["name"]) == ("kernel", "sm80_xmma_gemm_f32") and abs(top["extra ms/step"] - 0.04) < 1e-3
    assert any("telemetry dashboard " in m.value and "--base" in m.value for m in at.markdown)

    metric.set_value("backward_s").run()
    assert not at.exception

    # compare the runs either side: the Compare view on run-08 against run-07, and back
    [button] = [b for b in at.button if b.label.startswith("Compare run-08 against run-07")]
    button.click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.header[0].value == "Compare"
    assert any("base: run-07" in m.value for m in at.markdown)
    assert any("run-08 against run-07" in c.value for c in at.sidebar.caption)
    [back] = [b for b in at.sidebar.button if b.label == "back to the run given"]
    back.click().run()
    assert not at.exception
    assert any(c.value.endswith("run-12") for c in at.sidebar.caption)


def test_without_a_history_source_the_view_says_how_to_give_one(monkeypatch, series):
    monkeypatch.delenv(H.ENV, raising=False)
    at = show(run_app(monkeypatch, os.path.join(series, "run-01")), "history")
    [info] = at.info
    assert "--history" in info.value


def test_the_view_opens_on_the_largest_regression():
    c = [
        {"change": 0.02, "regression": True},
        {"change": -0.3, "regression": False},  # a larger improvement: not what one opens the view for
        {"change": 0.05, "regression": True},
    ]
    assert H.first_shown(c) == 2 and H.first_shown(c[:2]) == 0 and H.first_shown([c[1]]) == 0

"""The Streamlit dashboard (telemetry/dashboards/script/app.py and its views), driven in this process
by Streamlit's AppTest: every page renders without an exception and shows the numbers and the
straggler's rank; bad input is a message, not a traceback. A real server, a real browser, a real
demo run and a large run: tests/integration/test_dashboard.py."""

import os
import time

import pytest

from tests.helpers.apptest import VIEWS, run_app, show

pytest.importorskip("streamlit")


from streamlit.testing.v1 import AppTest

from telemetry.analysis.inputs.load import open_input
from telemetry.dashboards.serve import APP
from telemetry.demo.simulate import Fault, Scenario, simulate


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
    for view in ("ranks", "findings", "collectives", "devices", "io", "compare"):
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


def test_a_missing_run_is_a_message(monkeypatch, tmp_path):
    at = run_app(monkeypatch, str(tmp_path / "nope"))
    assert "does not exist" in at.error[0].value


def test_an_empty_run_directory_is_a_message(monkeypatch, tmp_path):
    (tmp_path / "run" / "ranks").mkdir(parents=True)
    at = run_app(monkeypatch, str(tmp_path / "run"))
    assert "holds no steps yet" in at.error[0].value


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


def test_a_findings_traces_link_to_the_trace_ui(monkeypatch, tmp_path):
    """A run that exported traces (its meta says how steps were chosen): each finding lists the trace
    ids of its worst steps, linked with the trace UI URL (telemetry dashboard --trace-ui-url)."""
    import json

    from telemetry.demo.simrun import write_simulated_run
    from telemetry.traceids import trace_id_hex

    run = str(tmp_path / "traced")
    sc = Scenario(ranks=4, steps=120, seed=3, faults=(Fault("straggler", ranks=(2,), phase="forward", factor=1.5),))
    write_simulated_run(sc, run)
    with open(os.path.join(run, "meta.json")) as f:
        meta = json.load(f)
    meta["traces"] = {"job": "traced", "every": 1}
    with open(os.path.join(run, "meta.json"), "w") as f:
        json.dump(meta, f)
    monkeypatch.setenv("TELEMETRY_DASHBOARD_TRACE_UI_URL", "http://127.0.0.1:16686/trace/{trace_id}")
    at = show(run_app(monkeypatch, run), "findings")
    table = open_input(run).table
    rank2 = table[table["rank"] == 2].set_index("step")["forward_s"]
    links = [m.value for m in at.markdown if m.value.startswith("**Traces of its worst steps**")]
    assert links, [m.value for m in at.markdown]
    ids = [trace_id_hex("traced", int(s)) for s in rank2.index]
    assert any(f"(http://127.0.0.1:16686/trace/{i})" in links[0] for i in ids)
    monkeypatch.delenv("TELEMETRY_DASHBOARD_TRACE_UI_URL")
    at = show(run_app(monkeypatch, run), "findings")
    plain = [m.value for m in at.markdown if m.value.startswith("**Traces of its worst steps**")]
    assert plain and "http" not in plain[0] and "--trace-ui-url" in plain[0]


def test_the_collectives_view_splits_by_parallel_dimension(monkeypatch, tmp_path):
    """A steps table with comm_group.<dimension> columns (a 2x2 FSDP2 x TP job): the Collectives view
    shows the time blocked in each dimension's collectives, per rank and over steps."""
    import numpy as np
    import pandas as pd

    rows = []
    for rank in range(4):
        for step in range(40):
            rows.append(
                {
                    "rank": rank,
                    "step": step,
                    "start_s": step * 0.05,
                    "duration_s": 0.05,
                    "comm_s": 0.02,
                    "forward_s": 0.02,
                    "comm_group.dp_s": 0.015 if rank == 3 else 0.005,
                    "comm_group.dp_bytes": 2_000_000,
                    "comm_group.tp_s": 0.002 + 0.001 * np.sin(step),
                    "comm_group.tp_bytes": 32_768,
                }
            )
    path = tmp_path / "dims.parquet"
    pd.DataFrame(rows).to_parquet(path, index=False)
    at = show(run_app(monkeypatch, str(path)), "collectives")
    assert any(h.value == "By parallel dimension" for h in at.subheader)
    table = at.dataframe[0].value
    assert set(table["dimension"]) == {"dp", "tp"}
    dp3 = table[(table["dimension"] == "dp") & (table["rank"] == 3)]["blocked ms/step"].iloc[0]
    assert abs(dp3 - 15.0) < 1e-6 and table[table["dimension"] == "dp"]["MB/step"].max() == 2.0


def test_the_io_view_shows_checkpoints_input_and_network_or_says_what_the_run_lacks(
    monkeypatch, tmp_path, straggler_table
):
    """A steps table with io.* and dev.* columns (4 ranks on 2 nodes, rank 3's checkpoint storage slow,
    node1's NIC errors growing): each part drawn; a table without them: a line per part saying so."""
    import numpy as np

    t = simulate(Scenario(ranks=4, steps=120, ranks_per_node=2))
    for c in ("checkpoint_s", "checkpoint_saves", "checkpoint_bytes", "checkpoint_io_s", "checkpoint_async_s"):
        t[f"io.{c}"] = 0.0
    save = t["step"].isin([30, 60, 90])
    t.loc[save, ["io.checkpoint_s", "io.checkpoint_saves", "io.checkpoint_bytes"]] = [0.5, 1.0, 1e9]
    t.loc[save, "io.checkpoint_io_s"] = np.where(t.loc[save, "rank"] == 3, 1.0, 0.25)
    t["io.input_ready"] = np.where(t["rank"] == 1, (t["step"] % 2).astype(float), 1.0)
    t["io.read_bytes"] = 1e6
    t["dev.input_fetch_seconds"] = t.groupby("rank")["duration_s"].cumsum()
    t["dev.input_workers"] = 2.0
    t["dev.nic_bytes_tx"] = t["dev.nic_bytes_rx"] = (t["step"] + 1) * 1e8
    t["dev.nic_errors_symbol_error"] = np.where((t["rank"] >= 2) & (t["step"] > 50), 3.0, 0.0)
    path = tmp_path / "io.parquet"
    t.to_parquet(path, index=False)

    at = show(run_app(monkeypatch, str(path)), "io")
    assert not at.info, [i.value for i in at.info]
    assert [h.value for h in at.subheader] == ["Checkpoints", "Input", "Network"]
    assert any(m.value.startswith("Checkpoints: 3 save(s)") and "recommended every" in m.value for m in at.markdown)
    assert len(at.get("vega_lite_chart")) == 2  # bandwidth over the saves, readiness per rank
    per_rank, saves, inputs, network = (d.value for d in at.dataframe)
    assert per_rank.set_index("rank").loc[3, "median MB/s"] == 1000 and len(saves) == 12
    assert inputs.set_index("rank").loc[1, "% ready"] == 50
    network = network.set_index("node")
    assert network.loc["node1", "NIC symbol_error"] == 3 and network.loc["node0", "ranks"] == "0-1"

    [slider] = [s for s in at.sidebar.slider if s.label == "steps"]
    slider.set_value((0, 20)).run()  # no save in these steps
    assert not at.exception and "No checkpoint in the chosen steps" in at.info[0].value

    at = show(run_app(monkeypatch, straggler_table), "io")
    lacks = [i.value for i in at.info]
    assert len(lacks) == 3 and "No checkpoint was timed" in lacks[0] and "telemetry.checkpoint" in lacks[0]
    assert "telemetry.watch_dataset" in lacks[1] and "No network reading" in lacks[2]


def test_a_long_run_is_drawn_from_its_blocks_and_a_zoom_reads_every_step(monkeypatch, tmp_path):
    from telemetry.analysis.longrun import coarse
    from telemetry.dashboards import data as D
    from telemetry.dashboards import source as S
    from telemetry.demo.simrun import write_simulated_run
    from tests.helpers.apptest import KEYS

    out = str(tmp_path / "long")
    fault = Fault("straggler", ranks=(9,), phase="forward", factor=1.5, start=1000)
    write_simulated_run(Scenario(name="long", ranks=32, steps=3000, seed=3, faults=(fault,)), out)
    monkeypatch.setattr(coarse, "COARSE_ROWS", 10_000)  # 32 x 3,000 = 96,000 rows: a long run here
    monkeypatch.setattr(S, "ZOOM_ROWS", 32 * 200)  # every rank's 200 steps, or 2 ranks' 3,200
    at = run_app(monkeypatch, out)
    said = " ".join(c.value for c in at.caption)
    assert "32 ranks x 3,000 steps: drawn from medians over blocks of 64 steps" in said, said
    assert "Choose at most 200 steps (or a few ranks) to read every step" in said
    # the last block holds 56 of 64 steps: a band's highest of its medians would read as slow steps
    assert "steps 2,944-2,999 (a block short of 64 steps) are left out of its heatmaps and lines" in said, said
    whole = S.load_view(out)
    assert D.view_heatmap(whole, "forward")["step"].max() == 2880 == D.view_percentiles(whole)["step"].max()
    assert D.whole_blocks(whole) == (0, 2943)
    titles = [e.label for e in at.expander]
    assert any("straggler - rank 9 - phase forward" in t for t in titles), titles
    for view in KEYS[1:]:  # every page draws the blocks
        show(at, view)
    show(at, "collectives")  # the records with spans are not read for the whole run: the page says so
    assert any("read record by record" in i.value and "choose fewer steps or ranks" in i.value for i in at.info)
    show(at, "ranks")
    summary = at.dataframe[0].value
    assert len(summary) == 32 and "straggler (forward)" in summary.loc[summary["rank"] == 9, "findings"].iloc[0]

    [steps] = [s for s in at.sidebar.slider if s.label == "steps"]
    assert steps.value == (0, 2999)  # the run's steps, not its blocks' first steps
    steps.set_value((1500, 1699)).run()  # 200 steps of every rank: read row by row
    assert not at.exception, [e.value for e in at.exception]
    said = " ".join(c.value for c in at.caption)
    assert "Zoomed in: steps 1,500 to 1,699 of every rank, every step" in said, said
    summary = at.dataframe[0].value
    assert "straggler (forward)" in summary.loc[summary["rank"] == 9, "findings"].iloc[0]  # those steps' findings

    steps.set_value((0, 2999)).run()  # back to the whole run; two ranks' every step
    [ranks] = [m for m in at.sidebar.multiselect if m.label.startswith("ranks")]
    ranks.set_value([9, 10]).run()
    assert not at.exception, [e.value for e in at.exception]
    said = " ".join(c.value for c in at.caption)
    assert "Zoomed in: steps 0 to 2,999 of ranks 9, 10, every step" in said, said
    show(at, "collectives")  # 6,000 records: read (the simulator writes no collective spans, said so)
    assert any("holds no per-collective records" in i.value for i in at.info), [i.value for i in at.info]
    show(at, "ranks")
    view = S.load_zoom(S.load_view(out).blocks, (0, 2999), (9, 10))
    assert sorted(view.run.table["rank"].unique()) == [9, 10] and view.matrix.n_steps == 3000


def test_a_zoom_into_every_rank_of_a_compacted_long_run_is_drawn_from_its_picture(monkeypatch, tmp_path):
    from telemetry.analysis.longrun import coarse
    from telemetry.analysis.longrun import kept_picture as picture
    from telemetry.cli import main
    from telemetry.dashboards import data as D
    from telemetry.dashboards import source as S
    from telemetry.demo.simrun import write_simulated_run

    out = str(tmp_path / "long")
    fault = Fault("straggler", ranks=(9,), phase="forward", factor=1.5, start=1000)
    write_simulated_run(Scenario(name="long", ranks=32, steps=3000, seed=3, faults=(fault,)), out)
    monkeypatch.setattr(coarse, "COARSE_ROWS", 10_000)  # 32 x 3,000 = 96,000 rows: a long run here
    monkeypatch.setattr(picture, "BANDS", 8)  # 32 ranks in 8 bands of 4, as 10,000 ranks in 256 of 40
    monkeypatch.setattr(S, "ZOOM_ROWS", 32 * 200)
    assert main(["compact", out]) == 0
    at = run_app(monkeypatch, out)
    [steps] = [s for s in at.sidebar.slider if s.label == "steps"]
    steps.set_value((1500, 1699)).run()  # 200 steps of every rank: from the picture, no rank's file read
    assert not at.exception, [e.value for e in at.exception]
    said = " ".join(c.value for c in at.caption)
    assert (
        "steps 1,500 to 1,699 of every rank of a run of 32 ranks x 3,000 steps, drawn step by step from the picture"
        in said
    )
    show(at, "ranks")
    assert not at.exception, [e.value for e in at.exception]
    said = " ".join(c.value for c in at.caption)
    assert "8 bands of 4 consecutive ranks" in said and "9 (straggler: band 8-11)" in said, said
    view = S.load_picture(S.load_view(out), (1500, 1699))
    cells = D.view_heatmap(view, "forward")
    assert sorted(cells["step"].unique()) == list(range(1500, 1700)) and cells["rank"].nunique() == 8
    worst = cells.groupby("rank")["ms"].mean().idxmax()
    assert worst == 8 and set(cells.loc[cells["rank"] == 8, "last_rank"]) == {11}
    lines = D.view_percentiles(view)
    assert sorted(lines["step"].unique()) == list(range(1500, 1700))
    show(at, "devices")
    assert not at.exception, [e.value for e in at.exception]
    assert at.query_params["steps"] == "1500-1699"  # the zoom is in the URL: a link opens it
    # wider than rows could be read (32 x 1,000 > ZOOM_ROWS): still every step, from the picture, grouped
    monkeypatch.setattr(S, "PICTURE_STEPS", 1_000)
    steps.set_value((1000, 1999)).run()
    said = " ".join(c.value for c in at.caption)
    assert "steps 1,000 to 1,999 of every rank" in said and "a heatmap's column the median of a few steps'" in said
    assert D.view_heatmap(S.load_picture(S.load_view(out), (1000, 1999)), "forward")["step"].nunique() == 333
    steps.set_value((1000, 2000)).run()  # 1,001 steps: beyond the picture's reach, the blocks
    said = " ".join(c.value for c in at.caption)
    assert "drawn from medians over blocks of 64 steps" in said, said
    assert "Choose at most 1,000 steps to draw each step from its picture, or at most 200 steps" in said, said
    steps.set_value((1500, 1699)).run()
    # ranks chosen: read row by row, as before
    [ranks] = [m for m in at.sidebar.multiselect if m.label.startswith("ranks")]
    ranks.set_value([9]).run()
    said = " ".join(c.value for c in at.caption)
    assert "Zoomed in: steps 1,500 to 1,699 of ranks 9, every step" in said, said
    assert at.query_params["ranks"] == "9"

    # a link to a zoom opens it
    monkeypatch.setenv("TELEMETRY_DASHBOARD_PATH", out)
    link = AppTest.from_file(APP, default_timeout=60)
    link.query_params.update({"view": "ranks", "steps": "2000-2099"})
    link.run()
    assert not link.exception, [e.value for e in link.exception]
    said = " ".join(c.value for c in link.caption)
    assert "steps 2,000 to 2,099 of every rank" in said and "step by step from the picture" in said, said
    assert link.header[0].value == "Ranks"


def test_a_link_s_steps_and_ranks_are_checked_and_a_bad_one_is_said_and_ignored(monkeypatch, straggler_table):
    monkeypatch.setenv("TELEMETRY_DASHBOARD_PATH", straggler_table)
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params.update({"steps": "10-19", "ranks": "1,3"})
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    [steps] = [s for s in at.sidebar.slider if s.label == "steps"]
    [ranks] = [m for m in at.sidebar.multiselect if m.label.startswith("ranks")]
    assert steps.value == (10, 19) and ranks.value == [1, 3]
    for asked, said in (
        ({"steps": "ten-20"}, "steps='ten-20' is not FIRST-LAST"),
        ({"steps": "90000-90010"}, "holds none of the run's steps"),
        ({"ranks": "1,99"}, "names ranks the run does not have (99)"),
    ):
        at = AppTest.from_file(APP, default_timeout=60)
        at.query_params.update(asked)
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        warned = " ".join(w.value for w in at.sidebar.warning)
        assert said in warned and "ignored" in warned, (asked, warned)
        [steps] = [s for s in at.sidebar.slider if s.label == "steps"]
        [ranks] = [m for m in at.sidebar.multiselect if m.label.startswith("ranks")]
        assert steps.value == (steps.min, steps.max) and ranks.value == []  # the whole run, as with no link


def test_a_link_s_ranks_follow_the_run_chosen_under_a_root(monkeypatch, tmp_path):
    from telemetry.demo.simrun import write_simulated_run

    for name, n in (("small", 2), ("big", 8)):  # the newest first: big
        write_simulated_run(Scenario(name=name, ranks=n, steps=40, seed=1), str(tmp_path / "runs" / name))
    monkeypatch.delenv("TELEMETRY_DASHBOARD_PATH", raising=False)
    monkeypatch.setenv("TELEMETRY_DASHBOARD_ROOT", str(tmp_path / "runs"))
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params.update({"ranks": "1,7"})
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    [box] = [s for s in at.sidebar.selectbox if s.label == "run"]
    [ranks] = [m for m in at.sidebar.multiselect if m.label.startswith("ranks")]
    assert os.path.basename(box.value) == "big" and ranks.value == [1, 7]
    box.set_value([o for o in box.options if o.endswith("small")][0]).run()  # 2 ranks: rank 7 is not one
    assert not at.exception, [e.value for e in at.exception]
    [ranks] = [m for m in at.sidebar.multiselect if m.label.startswith("ranks")]
    assert ranks.value == [1]


def test_a_heatmap_of_hundreds_of_ranks_draws_bands_and_names_the_straggler_s_band(monkeypatch, tmp_path):
    path = str(tmp_path / "wide.parquet")
    fault = Fault("straggler", ranks=(437,), phase="forward", factor=2.0)
    simulate(Scenario(ranks=600, steps=60, seed=2, faults=(fault,))).to_parquet(path, index=False)
    at = show(run_app(monkeypatch, path), "ranks")
    said = " ".join(c.value for c in at.caption)
    assert "150 bands of 4 consecutive ranks, each cell the band's highest" in said, said
    assert "Ranks a finding names: 437 (straggler: band 436-439)" in said, said
    assert len(at.dataframe[0].value) == 600  # the per-rank table keeps every rank

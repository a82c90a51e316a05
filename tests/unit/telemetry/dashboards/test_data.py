"""What the views show, as plain tables (telemetry/dashboards/data.py): heatmaps and step percentiles
downsampled so that a slow rank or a slow step still shows; and how the run is read for them
(telemetry/dashboards/source.py): read ahead by the server, a link's steps and ranks."""

from telemetry.dashboards import data as D
from telemetry.dashboards import source as S
from telemetry.demo.simulate import Fault, Scenario, simulate


def test_the_heatmap_downsamples_and_still_shows_one_slow_rank():
    table = simulate(
        Scenario(
            ranks=16, steps=2000, jitter=0.1, faults=(Fault("straggler", ranks=(11,), phase="backward", factor=1.3),)
        )
    )
    from telemetry.steptable.matrix import from_table

    cells = D.heatmap(from_table(table), "compute")
    assert cells["step"].nunique() <= D.MAX_HEATMAP_COLUMNS and cells["rank"].nunique() == 16
    per_rank = cells.groupby("rank")["ms"].median()
    assert per_rank.idxmax() == 11 and per_rank[11] > 1.1 * per_rank.drop(11).max()


def test_a_heatmap_of_thousands_of_ranks_draws_bands_in_which_the_slow_rank_shows():
    import altair as alt

    from telemetry.dashboards import charts
    from telemetry.steptable.matrix import from_table

    table = simulate(
        Scenario(
            ranks=1000, steps=40, jitter=0.1, faults=(Fault("straggler", ranks=(613,), phase="forward", factor=2.0),)
        )
    )
    cells = D.heatmap(from_table(table), "compute")
    assert cells["rank"].nunique() == 250 and cells["step"].nunique() == 40  # bands of 4 ranks
    per_band = cells.groupby(["rank", "last_rank"])["ms"].median()
    assert per_band.idxmax() == (612, 615) and per_band.max() > 1.1 * per_band.drop((612, 615)).max()
    chart = charts.heatmap(cells, "compute (ms per step)", {613: "straggler"})
    with alt.data_transformers.disable_max_rows():  # Streamlit sends any size; Altair's own check is 5,000
        y = chart.to_dict()["encoding"]["y"]
    # the bands top to bottom in rank order, as the cells come (no sort expression per cell)
    labels = list(dict.fromkeys(chart.data["label"]))
    assert y["sort"] is None and len(labels) == 250 and labels[0] == "0-3" and labels[1] == "4-7"
    assert "612-615  <- 613 straggler" in labels and labels[-1] == "996-999"
    assert y["title"] == "ranks (bands of 4: the highest)"


def test_step_percentiles_are_one_line_per_percentile():
    from telemetry.steptable.matrix import from_table

    df = D.step_percentiles(from_table(simulate(Scenario(ranks=8, steps=50))))
    assert set(df["percentile"]) == {"p50", "p95"} and len(df) == 100
    p = df.pivot(index="step", columns="percentile", values="ms")
    assert (p["p95"] >= p["p50"]).all()


def test_a_long_run_is_drawn_in_blocks_that_keep_a_slow_step():
    from telemetry.steptable.matrix import from_table

    table = simulate(Scenario(ranks=4, steps=3000, spikes=((1, 1234, 0.5),)))
    df = D.step_percentiles(from_table(table), max_points=1000)
    assert df["step"].nunique() <= 1000
    p95 = df[df["percentile"] == "p95"].set_index("step")["ms"]
    assert p95.idxmax() <= 1234 < p95.idxmax() + 3 and p95.max() > 400  # the 0.5 s spike survives


def test_a_run_read_ahead_is_the_first_visitors_view_once_and_only_while_unchanged(tmp_path, monkeypatch):
    """The dashboard's server reads its run before anyone asks (serve.read_ahead): the first view
    of that run, unchanged since, is that read, not a read of its own; a run changed since is read
    again, as it is now."""
    import os
    import threading

    readers = []
    opened = S.analyze_run
    monkeypatch.setattr(S, "analyze_run", lambda *a, **k: readers.append(threading.current_thread()) or opened(*a, **k))
    path = str(tmp_path / "steps.parquet")
    simulate(Scenario(ranks=4, steps=60)).to_parquet(path, index=False)
    S.load_ahead(path)
    seen = S.changed_at(path)
    first = S.load_view(path, seen)
    assert first.analysis.summary["ranks"] == 4
    assert len(readers) == 1 and readers[0] is not threading.current_thread()  # read in the thread ahead only
    again = S.load_view(path, seen)  # taken once: the app's cache holds it from then on
    assert again is not first and again.analysis.summary == first.analysis.summary
    assert readers[1:] == [threading.current_thread()]

    S.load_ahead(path)
    simulate(Scenario(ranks=8, steps=60)).to_parquet(path, index=False)
    os.utime(path, (seen + 5, seen + 5))  # a new modification time, however coarse the file system's clock
    assert S.load_view(path, S.changed_at(path)).analysis.summary["ranks"] == 8


def test_a_run_read_ahead_that_cannot_be_shown_says_why_to_its_visitor_without_reading_it_again(tmp_path, monkeypatch):
    import threading

    import pytest

    readers = []
    opened = S.analyze_run
    monkeypatch.setattr(S, "analyze_run", lambda *a, **k: readers.append(threading.current_thread()) or opened(*a, **k))
    path = tmp_path / "steps.csv"
    path.write_text("not,a\nsteps,table\n")
    S.load_ahead(str(path))
    with pytest.raises(S.ViewError, match="missing column"):
        S.load_view(str(path), S.changed_at(str(path)))
    assert len(readers) == 1 and readers[0] is not threading.current_thread()


def test_a_wide_heatmap_of_many_ranks_draws_fewer_bands_so_the_browser_draws_it_in_time():
    """Bands enough to keep a heatmap at about 10,000 cells (a browser draws each in about 30-40 us here),
    but at least 64: 2,000 ranks x 400 steps are 63 bands of 32 ranks (not 250 of 8: 100,000 cells); 100
    steps, 100 bands of 20; the slow rank's band still stands out."""
    from types import SimpleNamespace

    import numpy as np

    from telemetry.dashboards.grid import grid_cells

    for steps, bands, height in ((400, 63, 32), (100, 100, 20)):
        m = SimpleNamespace(ranks=np.arange(2000), steps=np.arange(steps), n_ranks=2000, n_steps=steps)
        a = np.full((2000, steps), 10.0)
        a[1234] = 15.0
        cells = grid_cells(m, a)
        assert cells["rank"].nunique() == bands and len(cells) == bands * steps
        assert (cells["last_rank"] - cells["rank"]).max() == height - 1
        top = cells.groupby("rank")["value"].max()
        assert top.idxmax() == 1234 // height * height and (top == 15.0).sum() == 1


def test_rows_that_are_bands_already_are_grouped_a_whole_number_at_a_time():
    """A picture's rows (telemetry.analysis.longrun.kept_picture) are bands of ranks: 250 bands of 40 over 200 steps
    are more cells than 10,000, so four at a time (63 bands of 160 ranks, the last of 80: at least 64 bands
    wanted), each labelled by its first and last rank; 25 steps keep the 250 as they are, labelled as kept."""
    from types import SimpleNamespace

    import numpy as np

    from telemetry.dashboards.grid import grid_cells

    firsts = np.arange(0, 10_000, 40)
    for steps, bands in ((200, 63), (25, 250)):
        m = SimpleNamespace(ranks=firsts, steps=np.arange(steps), n_ranks=250, n_steps=steps)
        a = np.full((250, steps), 10.0)
        a[7500 // 40] = 15.0  # the band of the slow rank 7500 (7480-7519)
        cells = grid_cells(m, a, last=firsts + 39)
        assert cells["rank"].nunique() == bands and len(cells) == bands * steps
        per = cells.groupby("rank")["last_rank"].first()
        assert per.iloc[-1] == 9999 and (per.index[1:] == per.iloc[:-1].to_numpy() + 1).all()  # consecutive
        top = cells.groupby("rank")["value"].max()
        slow = top.idxmax()
        assert slow <= 7500 <= per[slow] and (top == 15.0).sum() == 1
    assert per[7480] == 7519  # kept as it was


def test_bars_of_thousands_of_ranks_draw_the_highest_and_the_named_ones_in_rank_order():
    """A bar per rank is for a few dozen: of 10,000 (whose bars the browser never drew), the 64 highest
    and the ranks a finding names, in rank order, the title saying so; of 50, every one."""
    import numpy as np
    import pandas as pd

    from telemetry.dashboards import charts

    df = pd.DataFrame({"rank": np.arange(10_000), "median ms": np.arange(10_000) % 997 / 10.0})
    chart = charts.rank_bars(df, "median ms", "data-loader wait", {3: "straggler"})
    shown = chart.data
    assert len(shown) == 65 and 3 in set(shown["rank"]) and shown["rank"].is_monotonic_increasing
    assert shown.loc[shown["rank"] != 3, "median ms"].min() >= 99.0  # the highest 64: 99.6 .. 99.0
    assert list(shown["label"])[0] == "3  <- straggler"
    spec = chart.to_dict()["encoding"]
    assert spec["x"]["title"] == "data-loader wait: the 64 highest of 10,000 ranks, and the ranks findings name"
    assert spec["y"]["sort"] is None
    few = charts.rank_bars(df.head(50), "median ms", "data-loader wait", {}).data
    assert list(few["rank"]) == list(range(50))


def test_the_server_serves_once_its_run_and_base_are_read(tmp_path, monkeypatch):
    """serve.read_ahead returns (and the server then starts answering) once the run it was given and its
    base run are read, so the first visitor's view is drawn from those reads; a read longer than the
    wait is left running for the first visitor."""
    from telemetry.dashboards import serve

    run, base = str(tmp_path / "run.parquet"), str(tmp_path / "base.parquet")
    simulate(Scenario(ranks=4, steps=60)).to_parquet(run, index=False)
    simulate(Scenario(ranks=2, steps=60)).to_parquet(base, index=False)
    monkeypatch.setenv("TELEMETRY_DASHBOARD_PATH", run)
    monkeypatch.setenv("TELEMETRY_DASHBOARD_BASE", base)
    assert serve.read_ahead() == [run, base]
    assert S._AHEAD[run].done() and S._AHEAD[base].done()
    assert S.load_view(base, S.changed_at(base)).analysis.summary["ranks"] == 2
    assert S.load_view(run, S.changed_at(run)).analysis.summary["ranks"] == 4

    # a read that outlasts the wait: the server serves, and the first view waits for that read
    import threading

    slow, readers = threading.Event(), []
    opened = S.analyze_run

    def held(*a, **k):
        readers.append(threading.current_thread())
        slow.wait(60)
        return opened(*a, **k)

    monkeypatch.setattr(S, "analyze_run", held)
    monkeypatch.delenv("TELEMETRY_DASHBOARD_BASE")
    assert serve.read_ahead(wait_s=0.05) == [run] and not S._AHEAD[run].done()
    slow.set()
    assert S.load_view(run, S.changed_at(run)).analysis.summary["ranks"] == 4
    assert len(readers) == 1 and readers[0] is not threading.current_thread()


def test_a_link_s_steps_and_ranks_are_read_within_the_run():
    assert S.steps_asked("5000-5199", 0, 9999) == ((5000, 5199), None)
    assert S.steps_asked("7", 0, 9999) == ((7, 7), None)  # one step
    assert S.steps_asked("9900-20000", 0, 9999) == ((9900, 9999), None)  # kept within the run's
    assert S.steps_asked(None, 0, 9999) == (None, None) and S.ranks_asked("", [0, 1]) == ([], None)
    for bad in ("5199-5000", "-3", "a-b", "20000-30000"):
        got, why = S.steps_asked(bad, 0, 9999)
        assert got is None and why and repr(bad) in why, (bad, why)
    assert S.ranks_asked("3,1,3", [0, 1, 2, 3]) == ([1, 3], None)
    assert S.ranks_asked("1,x", [0, 1])[0] == [] and "not a list of ranks" in S.ranks_asked("1,x", [0, 1])[1]

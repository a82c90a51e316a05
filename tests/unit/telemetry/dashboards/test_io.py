"""The I/O view's tables (telemetry/dashboards/io.py): checkpoints save by save with their bandwidth
and its source, the input per rank, the network per node; and each part empty when the run lacks its
columns."""

import numpy as np
import pandas as pd
import pytest

from telemetry.demo.simulate import Scenario, simulate
from telemetry.steptable.matrix import from_table


def io_table(steps=60, ranks_per_node=2):
    """4 ranks, 2 per node: saves at steps 20 and 40 (1 GB each, 0.5 s blocked; storage 0.25 s, rank 3's
    1 s, rank 0's unknown), rank 1's batch waiting every other step, 1 MB read a step, 2 workers fetching
    half of each step, the nodes' NICs sending 100 MB a step, node1's symbol errors growing by 3 at step 31."""
    t = simulate(Scenario(ranks=4, steps=steps, ranks_per_node=ranks_per_node))
    for c in ("checkpoint_s", "checkpoint_saves", "checkpoint_bytes", "checkpoint_io_s", "checkpoint_async_s"):
        t[f"io.{c}"] = 0.0
    save = t["step"].isin([20, 40])
    t.loc[save, "io.checkpoint_s"] = 0.5
    t.loc[save, "io.checkpoint_saves"] = 1.0
    t.loc[save, "io.checkpoint_bytes"] = 1e9
    t.loc[save, "io.checkpoint_io_s"] = np.where(t.loc[save, "rank"] == 3, 1.0, 0.25)
    t.loc[save & (t["rank"] == 0), "io.checkpoint_io_s"] = 0.0
    t["io.input_ready"] = 1.0
    t.loc[(t["rank"] == 1) & (t["step"] % 2 == 0), "io.input_ready"] = 0.0
    t["io.read_bytes"] = 1e6
    t["dev.input_workers"] = 2.0
    t["dev.input_fetch_seconds"] = t.groupby("rank")["duration_s"].cumsum()  # 2 workers x half of each step
    t["dev.nic_bytes_tx"] = (t["step"] + 1) * 1e8
    t["dev.nic_errors_symbol_error"] = np.where((t["rank"] >= 2) & (t["step"] > 30), 3.0, 0.0)
    t["dev.gpu_nvlink_errors_replay"] = np.where((t["rank"] == 1) & (t["step"] > 50), 2.0, 0.0)
    return t


def test_checkpoints_are_one_row_per_rank_and_save_with_bandwidth_from_own_storage_time():
    from telemetry.dashboards import io

    m = from_table(io_table())
    saves = io.checkpoint_saves(m)
    assert list(saves["step"].unique()) == [20, 40] and len(saves) == 8
    s20 = saves[saves["step"] == 20].set_index("rank")
    assert (s20["what"] == "save").all() and (s20["MB"] == 1000).all()
    assert s20.loc[1, "MB/s"] == pytest.approx(4000) and s20.loc[1, "bandwidth from"] == "storage time"
    assert s20.loc[3, "MB/s"] == pytest.approx(1000)
    # no storage time: bytes over the time blocked, and said so
    assert s20.loc[0, "MB/s"] == pytest.approx(2000) and s20.loc[0, "bandwidth from"] == "time blocked"
    per = io.checkpoint_per_rank(saves).set_index("rank")
    assert per.loc[3, "median MB/s"] == pytest.approx(1000) and per.loc[3, "saves"] == 2
    assert per.loc[2, "blocking s (total)"] == pytest.approx(1.0) and per.loc[0, "bandwidth from"] == "time blocked"
    lines, per_rank = io.checkpoint_lines(saves, {3: "slow_checkpoint"})
    assert per_rank and set(lines["rank"]) == {"0", "1", "2", "3 <- slow_checkpoint"}
    # the chosen steps and ranks
    assert list(io.checkpoint_saves(m, (30, 59), [3])[["rank", "step"]].itertuples(index=False)) == [(3, 40)]
    assert io.checkpoint_saves(m, (0, 10)).empty


def test_an_async_upload_and_a_load_are_rows_and_many_ranks_draw_median_and_lowest():
    from telemetry.dashboards import io

    t = io_table()
    up = (t["step"] == 21) & (t["rank"] == 2)
    t.loc[up, ["io.checkpoint_async_s", "io.checkpoint_bytes", "io.checkpoint_io_s"]] = [2.0, 1e9, 0.0]
    t.loc[(t["step"] == 5) & (t["rank"] == 1), "io.checkpoint_s"] = 0.1  # time blocked without a save: a load
    saves = io.checkpoint_saves(from_table(t)).set_index(["rank", "step"])
    assert saves.loc[(2, 21), "what"] == "upload" and saves.loc[(2, 21), "MB/s"] == pytest.approx(500)
    assert saves.loc[(1, 5), "what"] == "load" and np.isnan(saves.loc[(1, 5), "MB/s"])
    assert saves.loc[(1, 5), "bandwidth from"] == ""

    lines, per_rank = io.checkpoint_lines(io.checkpoint_saves(from_table(io_table())), max_ranks=2)
    assert not per_rank and set(lines["rank"]) == {"median over ranks", "lowest rank"}
    assert lines[lines["rank"] == "lowest rank"]["value"].tolist() == pytest.approx([1000, 1000])


def test_input_per_rank_readiness_bytes_and_worker_busy_share():
    from telemetry.dashboards import io

    t = io_table()
    m = from_table(t)
    df = io.input_per_rank(m).set_index("rank")
    assert df.loc[1, "% ready"] == pytest.approx(50) and df.loc[0, "% ready"] == 100
    assert df.loc[0, "steps watched"] == 60
    step_time = (t["duration_s"] + t["data_s"]).groupby(t["rank"]).sum()
    assert df.loc[2, "read MB/s"] == pytest.approx(60 / step_time[2])
    # from the end of step 0 (no reading before it): 59 steps' bytes over their fetch time
    rank2 = t[t["rank"] == 2]
    fetch = rank2["duration_s"].iloc[1:].sum()
    assert df.loc[2, "worker fetch s"] == pytest.approx(fetch)
    assert (
        df.loc[2, "MB/s fetching"] == pytest.approx(59 / fetch) and df.loc[2, "fetch time from"] == "worker fetch time"
    )
    busy = fetch / (2 * (rank2["duration_s"] + rank2["data_s"]).iloc[1:].sum())
    assert df.loc[2, "% workers busy"] == pytest.approx(100 * busy) and 45 < df.loc[2, "% workers busy"] < 50
    # a step range and a rank: the growth counts from the reading at the end of the step before it
    sub = io.input_per_rank(m, (10, 29), [1]).set_index("rank")
    assert list(sub.index) == [1] and sub.loc[1, "steps watched"] == 20 and sub.loc[1, "% ready"] == 50
    rank1 = t[t["rank"] == 1].set_index("step")
    assert sub.loc[1, "worker fetch s"] == pytest.approx(rank1.loc[10:29, "duration_s"].sum())


def test_input_without_fetch_time_divides_by_data_wait_and_readiness_ignores_steps_without_a_batch():
    from telemetry.dashboards import io

    t = io_table().drop(columns=["dev.input_fetch_seconds", "dev.input_workers"])
    t.loc[t["step"] >= 30, "io.input_ready"] = np.nan  # no watched batch in these steps
    df = io.input_per_rank(from_table(t)).set_index("rank")
    assert "% workers busy" not in df and (df["fetch time from"] == "data wait").all()
    assert df.loc[0, "MB/s fetching"] == pytest.approx(60 / t[t["rank"] == 0]["data_s"].sum())
    assert df.loc[1, "steps watched"] == 30 and df.loc[1, "% ready"] == pytest.approx(50)


def test_network_per_node_rates_and_errors_grown_and_per_rank_without_nodes():
    from telemetry.dashboards import io

    t = io_table()
    m = from_table(t)
    table, errors, by_node = io.network(m)
    assert by_node and errors == ["NIC symbol_error", "NVLink replay"]
    table = table.set_index("node")
    assert table.loc["node0", "ranks"] == "0-1" and table.loc["node1", "NIC symbol_error"] == 3
    assert table.loc["node0", "NIC symbol_error"] == 0 and table.loc["node0", "NVLink replay"] == 2
    after0 = t[t["step"] > 0]  # counted from the end of step 0, the first reading
    rates = 5.9 / (after0["duration_s"] + after0["data_s"]).groupby(after0["rank"]).sum()
    assert table.loc["node0", "NIC sent GB/s"] == pytest.approx(rates[[0, 1]].median())
    early, _, _ = io.network(m, (0, 30))
    assert (early["NIC symbol_error"] == 0).all()
    later, _, _ = io.network(m, (31, 59), [2])
    assert later.to_dict("records")[0]["ranks"] == "2" and later["NIC symbol_error"].tolist() == [3]

    flat, errors, by_node = io.network(from_table(t.drop(columns="node")))
    assert not by_node and list(flat["rank"]) == [0, 1, 2, 3] and flat["NIC symbol_error"].tolist() == [0, 0, 3, 3]


def test_a_counter_that_went_back_counts_from_zero_again():
    from telemetry.dashboards import io

    t = io_table()
    t.loc[t["step"] >= 30, "dev.nic_bytes_tx"] = (t["step"] - 29) * 1e8  # a restart: the counter from 0
    m = from_table(t)
    g, span = io.growth(m, "dev.nic_bytes_tx", np.ones(m.n_steps, dtype=bool))
    assert g == pytest.approx(np.full(4, 59 * 1e8)) and span.sum(axis=1).tolist() == [59] * 4
    assert io.growth(m, "dev.nope", np.ones(m.n_steps, dtype=bool)) is None


def test_a_run_without_io_columns_has_no_part():
    from telemetry.dashboards import io

    m = from_table(simulate(Scenario(ranks=4, steps=30)))
    assert not io.has_checkpoints(m) and not io.has_input(m) and io.network_signals(m) == []
    assert io.checkpoint_saves(m).empty and io.checkpoint_per_rank(io.checkpoint_saves(m)).empty
    assert list(io.input_per_rank(m).columns) == ["rank"]
    table, errors, by_node = io.network(m)
    assert errors == [] and list(table.columns) == ["rank"]
    # only some columns: the input part has what they give
    t = simulate(Scenario(ranks=2, steps=30))
    t["io.read_bytes"] = 1e6
    df = io.input_per_rank(from_table(t))
    assert list(df.columns) == ["rank", "read MB/s", "MB/s fetching", "fetch time from"]


def test_the_rank_list_is_compact():
    from telemetry.dashboards import io

    assert io.rank_list([8, 0, 1, 2, 3, 10, 11]) == "0-3, 8, 10-11" and io.rank_list([]) == ""


def test_a_table_with_missing_cells_still_gives_rows():
    from telemetry.dashboards import io

    t = io_table()
    t = t[~((t["rank"] == 3) & (t["step"] == 40))]  # a row missing: NaN in the grids
    t.loc[t["rank"] == 2, "dev.nic_bytes_tx"] = np.nan  # a rank without NIC readings
    m = from_table(pd.DataFrame(t))
    assert len(io.checkpoint_saves(m)) == 7
    flat, _, _ = io.network(m)
    assert flat.set_index("node").loc["node1", "NIC sent GB/s"] > 0  # rank 3 read it for the node

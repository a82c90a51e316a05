"""Simulated run directories (telemetry/demo/simrun.py, `telemetry simulate`): written as a real run
store, with their ground truth, and read by analyze."""

import json
import os

from telemetry.analysis.inputs.load import open_input
from tests.helpers.runs import analyzed, simulated


def test_simulate_writes_a_run_directory_that_analyze_reads(tmp_path, capsys):
    out = simulated(tmp_path, "straggler:rank=5,phase=forward,factor=1.6")
    assert "wrote 9,600 step records (16 ranks x 600 steps)" in capsys.readouterr().out
    truth = json.load(open(os.path.join(out, "truth.json")))
    assert truth["faults"][0]["kind"] == "straggler" and truth["faults"][0]["ranks"] == [5]
    assert truth["scenario"]["ranks"] == 16 and truth["records"] == 9600
    names = os.listdir(os.path.join(out, "ranks"))
    assert "rank-00005.seg-000001.parquet" in names and not [n for n in names if "tail" in n]
    code, doc = analyzed(capsys, out)
    stragglers = [
        (f["ranks"], f["phase"]) for f in doc["findings"] if f["kind"] == "straggler" and f["severity"] != "info"
    ]
    assert stragglers == [([5], "forward")]
    run = open_input(out)
    assert set(run.table["node"]) == {"node0", "node1"}  # eight ranks a node


def test_simulate_injects_host_work_between_steps(tmp_path, capsys):
    out = simulated(tmp_path, "host_gap:delay_ms=10,start=300")  # 16 ranks x 600 steps
    capsys.readouterr()
    code, doc = analyzed(capsys, out)
    [f] = [f for f in doc["findings"] if f["kind"] == "utilization_regression"]
    assert f["severity"] == "warning" and abs(f["first_step"] - 300) <= 3 and f["details"]["grew"] == "between_steps"
    assert json.load(open(os.path.join(out, "truth.json")))["faults"][0]["delay_s"] == 0.01


def _files(root):
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            path = os.path.join(d, n)
            out[os.path.relpath(path, root)] = open(path, "rb").read()
    return out


def _scenario():
    from telemetry.demo.faults import Fault
    from telemetry.demo.simulate import Scenario

    faults = (
        Fault("straggler", ranks=(3,), phase="forward", factor=1.5, start=5),
        Fault("imbalance", start=20),  # the per-step work draws
        Fault("straggler", ranks=(9,), factor=1.3, probability=0.3, cause="gpu_errors"),  # coins, a counter signal
        Fault("memory_growth", ranks=(1,)),
    )
    return Scenario(name="bounded", ranks=12, steps=50, seed=5, stages=2, ranks_per_node=4, faults=faults)


def test_the_files_do_not_depend_on_the_memory_bound(tmp_path):
    """A piece simulated 3 steps at a time and written 2 ranks at a time through the scratch file makes
    the same files, byte for byte, as the piece held whole; no scratch file is left."""
    from telemetry.demo.simrun import write_simulated_run

    sc = _scenario()
    whole, bounded = str(tmp_path / "whole"), str(tmp_path / "bounded")
    write_simulated_run(sc, whole, chunk_steps=16, start_time_s=1.8e9)
    write_simulated_run(sc, bounded, chunk_steps=16, start_time_s=1.8e9, max_cells=40)  # 16 x 12 > 40: spilled
    a, b = _files(whole), _files(bounded)
    assert sorted(a) == sorted(b) and len([n for n in a if ".seg-" in n]) == 12 * 4
    assert all(a[n] == b[n] for n in a)


def test_the_segments_hold_the_simulators_tables(tmp_path):
    """What is written is what simulate_chunks gives for the same pieces (the writer's reference)."""
    import pandas as pd
    import pyarrow.parquet as pq

    from telemetry.demo.simrun import write_simulated_run
    from telemetry.demo.simulate import SIM_EPOCH_S, simulate_chunks
    from telemetry.store import layout

    sc = _scenario()
    out = str(tmp_path / "run")
    write_simulated_run(sc, out, chunk_steps=16, start_time_s=SIM_EPOCH_S, max_cells=40)
    for seq, piece in enumerate(simulate_chunks(sc, 16), start=1):
        for r in (0, 3, 9, 11):
            want = piece[piece["rank"] == r].reset_index(drop=True)
            got = pq.read_table(layout.segment_path(out, r, seq)).to_pandas()
            pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_no_more_than_max_cells_are_simulated_or_turned_into_rows_at_once(tmp_path, monkeypatch):
    from telemetry.demo import simrun, simulate

    sc = _scenario()
    sizes = []
    grid, table = simulate._grid, simrun.rank_table

    def counted_grid(sc, lo, n, draws, state):
        sizes.append(("steps", n * sc.ranks))
        return grid(sc, lo, n, draws, state)

    def counted_table(sc, piece, first, cols):
        sizes.append(("rows", cols["start_s"].size))
        return table(sc, piece, first, cols)

    monkeypatch.setattr(simulate, "_grid", counted_grid)
    monkeypatch.setattr(simrun, "rank_table", counted_table)
    simrun.write_simulated_run(sc, str(tmp_path / "run"), chunk_steps=16, max_cells=40)
    assert {kind for kind, _ in sizes} == {"steps", "rows"} and max(n for _, n in sizes) <= 40
    assert sum(n for kind, n in sizes if kind == "rows") == 12 * 50

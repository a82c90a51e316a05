"""Real PyTorch profiler traces of spawned gloo ranks as analysis input (telemetry/analysis/inputs/kineto.py):
the run store's steps, the slow rank named, exported."""

import json
import os

import numpy as np
import pandas as pd
import pytest
import torch.multiprocessing as mp

from telemetry.analysis.inputs.load import KINETO_TRACES, open_input
from telemetry.cli import main as cli
from tests.helpers import kineto_traces as kt
from tests.helpers.servers import free_port


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("kineto"))
    mp.start_processes(kt.profiled_rank, args=(2, free_port(), out), nprocs=2, start_method="spawn", join=True)
    return out


def test_real_traces_become_the_run_stores_steps(profiled):
    traces = open_input(os.path.join(profiled, "traces"))
    store = open_input(os.path.join(profiled, "run"))
    assert traces.kind == KINETO_TRACES and traces.world_size == 2
    t = traces.table
    # The schedule recorded steps 2-11 (first cycle) and 14-15 (second cycle, its own file).
    assert sorted(set(t["rank"])) == [0, 1]
    for r in (0, 1):
        assert t.loc[t["rank"] == r, "step"].tolist() == list(range(2, 12)) + [14, 15]
    for c in ("forward_s", "backward_s", "optimizer_s", "data_s", "comm_s"):
        assert c in t.columns and (t[c] > 0).all(), c
    # The trace's steps are the run store's steps: same numbers, same starts and durations.
    s = store.table.set_index(["rank", "step"]).loc[t.set_index(["rank", "step"]).index]
    # a few microseconds apart, unless the scheduler preempts the job between telemetry's clock read and
    # the profiler's range (as for the data wait below): typically under 0.1 ms, never a sizeable part of a step
    step = float(np.median(s["duration_s"]))
    start = np.abs(t["start_s"].to_numpy() - s["start_s"].to_numpy())
    took = np.abs(t["duration_s"].to_numpy() - s["duration_s"].to_numpy())
    assert np.median(start) < 1e-4 and start.max() < 0.25 * step, start
    assert np.median(took) < 1e-4 and took.max() < 0.25 * step, took
    # the data wait: the profiler's DataLoader range lies inside telemetry.watch's next(): the same to well
    # under a ms, but a preemption between the two marks adds to one step's (4.1 ms once, on a fresh clone's
    # make test beside other jobs): the median under 1 ms, none over a quarter of a step
    data = np.abs(t["data_s"].to_numpy() - s["data_s"].to_numpy())
    assert np.median(data) < 1e-3 and data.max() < 0.25 * float(np.median(s["duration_s"])), data
    # Rank 1's forward does extra work; rank 0 waits for it in the gradient all-reduce.
    by = t.groupby("rank").median(numeric_only=True)
    assert by.loc[1, "forward_s"] > 5 * by.loc[0, "forward_s"]
    # by how much depends on the machine (2.4x rather than 3x with the parity demos on the other worker):
    # rank 0's extra wait is at least half of rank 1's extra forward
    assert by.loc[0, "comm_s"] - by.loc[1, "comm_s"] > 0.5 * (by.loc[1, "forward_s"] - by.loc[0, "forward_s"])


def test_analyze_names_the_slow_rank_from_its_traces(profiled, capsys):
    assert cli(["analyze", os.path.join(profiled, "traces"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    stragglers = [(f["ranks"], f["phase"]) for f in doc["findings"] if f["kind"] == "straggler"]
    # the rank is what the traces must give; the phase is forward on a quiet machine, and under a CPU
    # hog the scheduler's own delays can spread its excess so that no one phase holds most of it
    # (a stress run: phase None, "compute outside the instrumented phases")
    assert [kt.SLOW] in [ranks for ranks, _ in stragglers], stragglers
    assert all(phase in ("forward", None) for _, phase in stragglers), stragglers
    assert all(kt.SLOW in ranks for ranks, _ in stragglers)
    assert doc["summary"]["ranks"] == 2


def test_export_writes_the_traces_steps_table(profiled, tmp_path, capsys):
    out = str(tmp_path / "steps.csv")
    assert cli(["export", os.path.join(profiled, "traces"), "--to", out]) == 0
    back = pd.read_csv(out)
    assert len(back) == 24 and {"forward_s", "comm_s", "data_s"} <= set(back.columns)
    assert cli(["export", os.path.join(profiled, "traces"), "--to", str(tmp_path / "t.json")]) == 2
    assert "a trace export needs a run directory" in capsys.readouterr().err


def test_profiler_steps_alone_give_the_same_steps(profiled, tmp_path, capsys):
    """The same traces without telemetry's ranges (a job profiled without profiler_ranges): steps
    from ProfilerStep#N, the data wait from the data loader's annotation, phases from DDP's and the
    optimizer's own annotations, the rest of the step's work as 'other'."""
    src, dst = os.path.join(profiled, "traces"), tmp_path / "plain"
    dst.mkdir()
    ours = {"forward", "backward", "optimizer"}
    for name in os.listdir(src):
        with open(os.path.join(src, name)) as f:
            trace = json.load(f)
        trace["traceEvents"] = [
            e
            for e in trace["traceEvents"]
            if not (e.get("name", "").startswith("telemetry.step#") or e.get("name") in ours)
        ]
        kt.write_trace(str(dst / (name + ".gz")), trace)
    t = open_input(str(dst)).table
    store = open_input(os.path.join(profiled, "run")).table.set_index(["rank", "step"])
    s = store.loc[t.set_index(["rank", "step"]).index]
    assert len(t) == 24 and {"forward_s", "optimizer_s", "other_s", "data_s", "comm_s"} <= set(t.columns)
    # the profiler's step mark and telemetry.step's start are a few microseconds apart, unless the
    # scheduler preempts the job between them (a stress run saw 4.3 ms under a CPU hog): typically
    # under 1 ms, and never a sizeable part of a step
    off = np.abs(t["start_s"].to_numpy() - s["start_s"].to_numpy())
    assert np.median(off) < 1e-3 and off.max() < 0.25 * s["duration_s"].median(), (off, s["duration_s"].median())
    wait = np.abs(t["data_s"].to_numpy() - s["data_s"].to_numpy())
    assert np.median(wait) < 1e-3 and wait.max() < 0.25 * s["duration_s"].median(), wait
    assert cli(["analyze", str(dst), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    stragglers = [f["ranks"] for f in doc["findings"] if f["kind"] == "straggler"]
    assert [kt.SLOW] in stragglers and all(kt.SLOW in ranks for ranks in stragglers), stragglers

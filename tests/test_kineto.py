"""PyTorch profiler (Kineto) trace directories as analysis input (telemetry/analysis/kineto.py).

A real profiled 2-rank gloo run of ours (its traces and its run store side by side), hand-built
GPU-shaped traces with exact expected numbers, a rank that cannot be told, a directory that is
neither input, and a large trace read with bounded memory.
"""

import json
import os
import tracemalloc

import numpy as np
import pandas as pd
import pytest
import torch.multiprocessing as mp

from telemetry.analysis import kineto, tracefile
from telemetry.analysis.load import KINETO_TRACES, open_input
from telemetry.analysis.table import TableError
from telemetry.cli import main as cli
from tests.helpers import kineto_traces as kt
from tests.helpers.servers import free_port

US = 1e-6


# ---- (a) a real profiled gloo run -------------------------------------------------------------


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("kineto"))
    mp.start_processes(kt.profiled_rank, args=(2, free_port(), out), nprocs=2, start_method="spawn", join=True)
    return out


@pytest.mark.slow
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
    assert np.abs(t["start_s"].to_numpy() - s["start_s"].to_numpy()).max() < 1e-3
    assert np.abs(t["duration_s"].to_numpy() - s["duration_s"].to_numpy()).max() < 1e-4
    assert np.abs(t["data_s"].to_numpy() - s["data_s"].to_numpy()).max() < 1e-3
    # Rank 1's forward does extra work; rank 0 waits for it in the gradient all-reduce.
    by = t.groupby("rank").median(numeric_only=True)
    assert by.loc[1, "forward_s"] > 5 * by.loc[0, "forward_s"]
    assert by.loc[0, "comm_s"] > 3 * by.loc[1, "comm_s"]


@pytest.mark.slow
def test_analyze_names_the_slow_rank_from_its_traces(profiled, capsys):
    assert cli(["analyze", os.path.join(profiled, "traces"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    stragglers = [(f["ranks"], f["phase"]) for f in doc["findings"] if f["kind"] == "straggler"]
    assert ([kt.SLOW], "forward") in stragglers
    assert all(kt.SLOW in ranks for ranks, _ in stragglers)
    assert doc["summary"]["ranks"] == 2


@pytest.mark.slow
def test_export_writes_the_traces_steps_table(profiled, tmp_path, capsys):
    out = str(tmp_path / "steps.csv")
    assert cli(["export", os.path.join(profiled, "traces"), "--to", out]) == 0
    back = pd.read_csv(out)
    assert len(back) == 24 and {"forward_s", "comm_s", "data_s"} <= set(back.columns)
    assert cli(["export", os.path.join(profiled, "traces"), "--to", str(tmp_path / "t.json")]) == 2
    assert "a trace export needs a run directory" in capsys.readouterr().err


# ---- (b) hand-built GPU traces, exact numbers --------------------------------------------------


def test_gpu_traces_exact_numbers(tmp_path):
    d = tmp_path / "traces"
    kt.write_trace(str(d / "host-a.1.pt.trace.json"), kt.gpu_trace(0))
    kt.write_trace(str(d / "host-b.2.pt.trace.json.gz"), kt.gpu_trace(1, slow_us=30))
    run = open_input(str(d))
    t = run.table
    assert run.kind == KINETO_TRACES and run.world_size == 2 and run.warnings == []
    assert t[["rank", "step"]].values.tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    base = kt.BASE_NS * 1e-9
    for r, slow in ((0, 0.0), (1, 30.0)):
        rows = t[t["rank"] == r]
        np.testing.assert_allclose(rows["start_s"], base + (np.arange(3) * 1000 + 50) * US, rtol=0, atol=1e-7)
        np.testing.assert_allclose(rows["duration_s"], 850 * US)
        np.testing.assert_allclose(rows["data_s"], 50 * US)
        np.testing.assert_allclose(rows["forward_s"], (80 + slow) * US)
        np.testing.assert_allclose(rows["backward_s"], 120 * US)
        np.testing.assert_allclose(rows["optimizer_s"], 20 * US)
        np.testing.assert_allclose(rows["other_s"], 10 * US)  # launched in the step, outside every phase
        np.testing.assert_allclose(rows["comm_s"], 150 * US)  # the NCCL kernel, not counted as compute
        np.testing.assert_allclose(rows["comm_bytes"], 4000)  # 1,000 float32 elements
    # Phases come first in the order the step ran them.
    assert [c for c in t.columns if c.endswith("_s")][2:] == [
        "forward_s",
        "backward_s",
        "optimizer_s",
        "other_s",
        "data_s",
        "comm_s",
    ]


def test_kernels_without_launches_are_placed_by_their_own_time(tmp_path):
    trace = kt.gpu_trace(0, steps=1)
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e.get("cat") != "cuda_runtime"]
    kt.write_trace(str(tmp_path / "t" / "r.json"), trace)
    t = open_input(str(tmp_path / "t")).table
    # forward kernels at 130-170 and 140-180 (in forward), backward 330.., optimizer 730, fill 870 (other)
    assert t.loc[0, "forward_s"] == pytest.approx(80 * US)
    assert t.loc[0, "comm_s"] == pytest.approx(150 * US)


def test_user_annotations_become_phases_with_identifier_names(tmp_path):
    ev = [
        kt.x("ProfilerStep#7", "user_annotation", 0, 1000),
        kt.x("DistributedDataParallel.forward", "user_annotation", 0, 300),
        kt.x("aten::mm", "cpu_op", 10, 200),
        kt.x("aten::add", "cpu_op", 20, 50),  # inside aten::mm: not top level
        kt.x("my loss (fp32)", "user_annotation", 300, 100),
        kt.x("aten::mse_loss", "cpu_op", 310, 40),
        kt.x("Optimizer.step#SGD.step", "user_annotation", 500, 100),
        kt.x("aten::_foreach_add_", "cpu_op", 510, 30),
        kt.x("Optimizer.zero_grad#SGD.zero_grad", "user_annotation", 650, 50),
        kt.x("aten::zero_", "cpu_op", 660, 5),
        kt.x("aten::copy_", "cpu_op", 800, 7),  # outside every annotation: other
        kt.x("gloo:all_reduce", "user_annotation", 320, 400, tid=9),  # comm, on gloo's thread
        kt.x("gloo:broadcast", "user_annotation", 700, 50, tid=10),  # overlaps it by 20: union 430
        kt.x("c10d::allreduce_", "cpu_op", 360, 1),
    ]  # a collective's op: not compute
    kt.write_trace(str(tmp_path / "t" / "rank-4.json"), {"traceEvents": ev})
    t = open_input(str(tmp_path / "t")).table
    row = t.iloc[0]
    assert (row["rank"], row["step"]) == (4, 7)
    assert row["forward_s"] == pytest.approx(200 * US)
    assert row["my_loss_fp32_s"] == pytest.approx(40 * US)
    assert row["optimizer_s"] == pytest.approx(35 * US)
    assert row["other_s"] == pytest.approx(7 * US)
    assert row["comm_s"] == pytest.approx(430 * US)
    assert row["start_s"] == 0 and row["duration_s"] == pytest.approx(1000 * US)


def test_distributed_info_rank_wins_over_the_name(tmp_path):
    trace = kt.gpu_trace(None, steps=1)
    trace["distributedInfo"] = {"rank": "6", "world_size": 8}
    kt.write_trace(str(tmp_path / "t" / "rank-3.json"), trace)
    run = open_input(str(tmp_path / "t"))
    assert run.table["rank"].tolist() == [6] and run.world_size == 8


@pytest.mark.parametrize(
    "name,rank",
    [("rank-3.json", 3), ("rank3.pt.trace.json", 3), ("host_rank_12.1234.pt.trace.json", 12), ("worker_5.json.gz", 5)],
)
def test_rank_from_the_file_name(tmp_path, name, rank):
    kt.write_trace(str(tmp_path / "t" / name), kt.gpu_trace(None, steps=1))
    assert open_input(str(tmp_path / "t")).table["rank"].tolist() == [rank]


# ---- (c) errors ---------------------------------------------------------------------------------


def test_a_file_with_no_rank_is_an_error_naming_it(tmp_path, capsys):
    kt.write_trace(str(tmp_path / "t" / "trace.json"), kt.gpu_trace(None, steps=1))
    with pytest.raises(TableError, match=r"trace\.json: a trace without distributedInfo and no rank in its file name"):
        open_input(str(tmp_path / "t"))
    assert cli(["analyze", str(tmp_path / "t")]) == 2
    assert "trace.json" in capsys.readouterr().err


def test_a_directory_that_is_neither_input_is_an_error(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.json").write_text('{"hello": 1}')
    with pytest.raises(TableError, match="neither a run directory .* nor a directory of PyTorch profiler traces"):
        open_input(str(tmp_path / "d"))


def test_a_truncated_trace_is_an_error_naming_it(tmp_path):
    text = json.dumps(kt.gpu_trace(0, steps=2))
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "rank0.json").write_text(text[: len(text) // 2])
    with pytest.raises(TableError, match=r"rank0\.json: not valid JSON"):
        open_input(str(tmp_path / "t"))


def test_traces_without_steps_are_an_error(tmp_path):
    kt.write_trace(str(tmp_path / "t" / "rank0.json"), {"traceEvents": [kt.x("aten::mm", "cpu_op", 0, 5)]})
    with pytest.raises(TableError, match="no steps in its 1 trace file"):
        open_input(str(tmp_path / "t"))


# ---- the streaming reader -----------------------------------------------------------------------


def test_streaming_reader_matches_json_load_at_every_chunk_boundary(tmp_path, monkeypatch):
    trace = kt.gpu_trace(1, steps=2)
    trace["traceEvents"].append(
        {"ph": "i", "name": "n", "ts": 12345678901234.5, "s": "g", "args": {"x": [1, 2.5e-3, None, True]}}
    )
    trace["after"] = {"unicode": "ü∑", "n": 17}
    path = str(tmp_path / "rank1.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(trace, f, indent=1, ensure_ascii=False)
    for chunk in (1, 3, 7, 64, 1 << 20):
        monkeypatch.setattr(tracefile, "_CHUNK", chunk)
        top = {}
        events = list(kineto.iter_trace(path, top))
        assert events == trace["traceEvents"], chunk
        assert top == {k: v for k, v in trace.items() if k != "traceEvents"}, chunk


# ---- (d) a large trace, bounded memory ----------------------------------------------------------


def test_a_large_trace_is_streamed_with_bounded_memory(tmp_path):
    """200,000 events (about 35 MB): the reader's peak Python allocation stays a small part of it."""
    d = tmp_path / "big"
    d.mkdir()
    path = d / "rank0.pt.trace.json"
    steps = 4000
    n = kt.write_big_trace(str(path), steps)  # ProfilerStep, 2 phases, 23 launches, 23 kernels, NCCL
    assert n == 200_000
    size = os.path.getsize(path)
    tracemalloc.start()
    try:
        run = open_input(str(d))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    t = run.table
    assert len(t) == steps
    assert t["forward_s"].iloc[0] == pytest.approx(14 * 100 * US)  # 14 kernels launched at 150..4050
    assert t["comm_s"].iloc[0] == pytest.approx(500 * US)
    print(f"trace {size / 1e6:.1f} MB, {n} events: peak {peak / 1e6:.1f} MB")  # 35.8 MB: 8.1 MB here
    assert peak < size / 3, (peak, size)


@pytest.mark.slow
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
    assert np.abs(t["start_s"].to_numpy() - s["start_s"].to_numpy()).max() < 2e-3
    assert np.abs(t["data_s"].to_numpy() - s["data_s"].to_numpy()).max() < 1e-3
    assert cli(["analyze", str(dst), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [f["ranks"] for f in doc["findings"] if f["kind"] == "straggler"] == [[kt.SLOW]]


def test_other_json_files_beside_the_traces_are_skipped_and_said(tmp_path):
    kt.write_trace(str(tmp_path / "t" / "rank0.json"), kt.gpu_trace(0, steps=2))
    (tmp_path / "t" / "config.json").write_text('{"lr": 0.1}')
    run = open_input(str(tmp_path / "t"))
    assert len(run.table) == 2
    assert run.warnings == ["config.json: not a Chrome trace (no traceEvents); skipped"]

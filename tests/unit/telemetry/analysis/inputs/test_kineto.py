"""PyTorch profiler (Kineto) trace directories as analysis input (telemetry/analysis/inputs/kineto.py), on
hand-built traces. Traces of real profiled ranks: tests/integration/test_kineto_traces.py."""

import json

import numpy as np
import pytest

from telemetry.analysis.inputs.load import KINETO_TRACES, open_input
from telemetry.cli import main as cli
from telemetry.steptable.table import TableError
from tests.helpers import kineto_traces as kt

US = 1e-6


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


def test_other_json_files_beside_the_traces_are_skipped_and_said(tmp_path):
    kt.write_trace(str(tmp_path / "t" / "rank0.json"), kt.gpu_trace(0, steps=2))
    (tmp_path / "t" / "config.json").write_text('{"lr": 0.1}')
    run = open_input(str(tmp_path / "t"))
    assert len(run.table) == 2
    assert run.warnings == ["config.json: not a Chrome trace (no traceEvents); skipped"]

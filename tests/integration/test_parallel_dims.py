"""Collectives of multi-dimensional parallelism (issue 30) on real gloo jobs launched by torchrun
(examples/train_tp.py): tensor parallelism's DTensor collectives (functional collectives) are timed
and named by their mesh dimension, FSDP2 x TP shows both dimensions, and a rank slowed inside its
tensor-parallel pair is named with that dimension."""

import os
import subprocess
import sys

import pytest

from telemetry.analysis import analyze_run
from telemetry.analysis.inputs.load import open_input
from tests.helpers.paths import ROOT

pytest.importorskip("torch.distributed.tensor.parallel")


def torchrun(tmp_path, nproc, mesh, *extra):
    run = str(tmp_path / f"run-{mesh.replace(',', '-').replace('=', '')}")
    env = {**os.environ, "TELEMETRY_SINKS": "store", "TELEMETRY_ANNOUNCE": "0", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    cmd += ["examples/train_tp.py", "--mesh", mesh, "--steps", "30", "--run-dir", run, *extra]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run


def per_rank(table, cols):
    return table[table["step"] >= 2].groupby("rank")[cols].median()


def test_tensor_parallel_collectives_are_timed_and_named_tp(tmp_path):
    """The done-when: a 2-rank TP script (DTensor, a mesh dimension named tp) shows positive blocked
    time on both ranks and a comm_group.tp_s column."""
    run = open_input(torchrun(tmp_path, 2, "tp=2"))
    assert not [w for w in run.warnings if "no time in collectives" in w]
    med = per_rank(run.table, ["comm_s", "comm_group.tp_s", "comm_group.tp_bytes"])
    assert (med["comm_s"] > 0).all() and (med["comm_group.tp_s"] > 0).all(), med
    assert (med["comm_group.tp_bytes"] == 32 * 256 * 4).all()  # one all-reduce of the (32 x 256) fp32 output
    assert "comm.forward_s" in run.table.columns  # the row-wise layer's all-reduce, in the forward


def test_fsdp2_by_tensor_parallel_shows_both_dimensions(tmp_path):
    run = open_input(torchrun(tmp_path, 4, "dp=2,tp=2"))
    med = per_rank(run.table, ["comm_group.dp_s", "comm_group.dp_bytes", "comm_group.tp_s", "comm_group.tp_bytes"])
    assert sorted(med.index) == [0, 1, 2, 3]
    assert (med > 0).all().all(), med
    assert (med["comm_group.dp_bytes"] > 10 * med["comm_group.tp_bytes"]).all()  # FSDP moves the parameters
    groups = {c[len("comm_group.") :].rsplit("_", 1)[0] for c in run.table.columns if c.startswith("comm_group.")}
    assert groups == {"dp", "tp"}  # every collective named by its dimension: no world, no unnamed group


def test_a_slow_rank_in_a_tensor_parallel_pair_is_named_with_its_dimension(tmp_path):
    result = analyze_run(torchrun(tmp_path, 2, "tp=2", "--slow-rank", "1", "--slow-ms", "20"))
    (f,) = [f for f in result.findings if f.kind == "straggler"]
    assert f.ranks == [1] and f.phase == "forward" and f.details["group"] == "tp"
    assert "wait for it in the tp collectives" in f.evidence


def test_a_two_stage_pipeline_is_timed_and_named_pp(tmp_path):
    run = str(tmp_path / "pp")
    env = {**os.environ, "TELEMETRY_SINKS": "store", "TELEMETRY_ANNOUNCE": "0", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    cmd += ["examples/train_pp.py", "--steps", "20", "--run-dir", run]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = open_input(run).table
    med = per_rank(table, ["comm_group.pp_s", "comm_group.pp_bytes"])
    assert sorted(med.index) == [0, 1] and (med > 0).all().all(), med
    assert not [c for c in table.columns if c.startswith("comm_group.") and not c.startswith("comm_group.pp_")]

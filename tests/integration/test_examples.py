"""The examples run as a user runs them: torchrun DDP, a profiled job, the Hugging Face Trainer under
torchrun and Lightning under DDP, each on two gloo ranks."""

import os
import subprocess
import sys

import pytest

from telemetry.analysis.inputs.load import open_input
from tests.helpers.paths import ROOT
from tests.helpers.servers import free_port


def test_the_torchrun_example_records_every_rank_with_its_all_reduce(tmp_path):
    run_dir = str(tmp_path / "example")
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    proc = subprocess.run(
        [
            torchrun,
            "--nproc_per_node",
            "2",
            "--master_port",
            str(free_port()),
            "examples/train_ddp.py",
            "--steps",
            "20",
            "--run-dir",
            run_dir,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "OMP_NUM_THREADS": "1", "EXAMPLE_PROMETHEUS_PORT": str(free_port())},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = open_input(run_dir)
    t = run.table
    assert sorted(t["rank"].unique()) == [0, 1] and len(t) == 40
    assert (t["comm_s"] > 0).all()  # DDP's all-reduce was timed without instrument_ddp
    assert run.warnings == []
    assert "telemetry: rank 1 of 2" in proc.stderr  # each process said where its data is


def test_the_profiler_example_s_traces_are_the_run_store_s_steps(tmp_path):
    out = str(tmp_path / "prof")
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    proc = subprocess.run(
        [
            torchrun,
            "--nproc_per_node",
            "2",
            "--master_port",
            str(free_port()),
            "examples/profile_traces.py",
            "--out",
            out,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "OMP_NUM_THREADS": "1", "EXAMPLE_PROMETHEUS_PORT": str(free_port())},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    traces = open_input(os.path.join(out, "traces")).table.set_index(["rank", "step"])
    run = open_input(os.path.join(out, "run")).table.set_index(["rank", "step"])
    assert sorted(traces.index) == [(r, s) for r in (0, 1) for s in range(2, 12)]  # the profiled steps
    same = run.loc[traces.index]
    assert (abs(traces["start_s"] - same["start_s"]) < 1e-3).all()
    assert (abs(traces["duration_s"] - same["duration_s"]) < 1e-3).all()
    assert (traces["comm_s"] > 0).all() and (traces["forward_s"] > 0).all()


def test_hf_example_runs_on_two_gloo_ranks_under_torchrun(tmp_path):
    pytest.importorskip("transformers")
    run_dir = str(tmp_path / "hf")
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    proc = subprocess.run(
        [
            torchrun,
            "--nproc_per_node",
            "2",
            "--master_port",
            str(free_port()),
            "examples/hf_trainer.py",
            "--steps",
            "6",
            "--run-dir",
            run_dir,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "EXAMPLE_PROMETHEUS_PORT": str(free_port())},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = open_input(run_dir)
    t = run.table
    assert run.warnings == [] and sorted(t["rank"].unique()) == [0, 1]
    assert t.groupby("rank")["step"].apply(list).tolist() == [list(range(6))] * 2
    assert (t["comm_s"] > 0).all()  # DDP's gradient all-reduce over gloo


def test_lightning_example_runs_ddp_on_two_gloo_ranks(tmp_path):
    pytest.importorskip("lightning.pytorch")
    run_dir = str(tmp_path / "pl")
    proc = subprocess.run(
        [sys.executable, "examples/lightning_train.py", "--devices", "2", "--steps", "6", "--run-dir", run_dir],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "MASTER_PORT": str(free_port()),
            "EXAMPLE_PROMETHEUS_PORT": str(free_port()),
        },
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = open_input(run_dir)
    t = run.table
    assert run.warnings == [] and sorted(t["rank"].unique()) == [0, 1]
    assert t.groupby("rank")["step"].apply(list).tolist() == [list(range(6))] * 2
    assert (t["comm_s"] > 0).all()

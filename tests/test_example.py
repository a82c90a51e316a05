"""examples/train_ddp.py runs under torchrun as the README says, and its run is analyzable."""

import os
import subprocess
import sys

import pytest

from telemetry.analysis.load import open_input
from tests.helpers.servers import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
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


@pytest.mark.slow
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

"""examples/train_ddp.py runs under torchrun as the README says, and its run is analyzable."""

import os
import subprocess
import sys

import pytest

from telemetry.analysis.load import open_input
from servers import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_the_torchrun_example_records_every_rank_with_its_all_reduce(tmp_path):
    run_dir = str(tmp_path / "example")
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    proc = subprocess.run([torchrun, "--nproc_per_node", "2", "--master_port", str(free_port()),
                           "examples/train_ddp.py", "--steps", "20", "--run-dir", run_dir],
                          cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "EXAMPLE_PROMETHEUS_PORT": str(free_port())})
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = open_input(run_dir)
    t = run.table
    assert sorted(t["rank"].unique()) == [0, 1] and len(t) == 40
    assert (t["comm_s"] > 0).all()  # DDP's all-reduce was timed without instrument_ddp
    assert run.warnings == []
    assert "telemetry: rank 1 of 2" in proc.stderr  # each process said where its data is

"""Checkpoint timing (telemetry/hooks/checkpoint.py): ``telemetry.checkpoint`` around any save or load,
torch.distributed.checkpoint's save and load timed by themselves in one process, each in the step it
returns in (one between steps in the next), through the store's tail and its sealed columns alike.
On real gloo ranks (async save, per-rank bytes): tests/integration/test_checkpoints_gloo.py."""

import glob
import os
import time

import pytest
import torch

import telemetry
from telemetry.analysis.inputs.load import open_input


def io(table, step, key):
    return table.loc[table["step"] == step, f"io.{key}"].item()


def test_a_checkpoint_counts_in_the_step_it_returns_in_and_one_between_steps_in_the_next(run_dir, tmp_path):
    blob = tmp_path / "model.pt"
    telemetry.init(run_dir=run_dir, job="ck", sinks=["store"], flush_interval_s=0.05)
    for i in range(4):
        with telemetry.step():
            with telemetry.phase("forward"):
                torch.ones(32, 32) @ torch.ones(32, 32)
            if i == 1:
                with telemetry.checkpoint("save", nbytes=12345):
                    torch.save({"w": torch.ones(1000)}, blob)
        if i == 2:  # between steps 2 and 3: counted in step 3, its bytes the file's size
            with telemetry.checkpoint("load", path=str(blob)):
                torch.load(blob)
    deadline = time.monotonic() + 60
    while True:  # read from the tail while the job runs
        t = open_input(run_dir).table
        if len(t) == 4 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    telemetry.shutdown()
    for table in (t, open_input(run_dir).table):  # the tail, then the sealed columns
        assert io(table, 1, "checkpoint_s") > 0 and io(table, 1, "checkpoint_bytes") == 12345
        assert io(table, 3, "checkpoint_s") > 0 and io(table, 3, "checkpoint_bytes") == os.path.getsize(blob)
        assert io(table, 0, "checkpoint_s") == 0 and io(table, 2, "checkpoint_bytes") == 0
        assert (table["io.checkpoint_async_s"] == 0).all()
    [span] = [s for s in list(open_input(run_dir).records)[1]["spans"] if s[0] == "checkpoint"]
    assert span[1] == "save" and span[5] == 12345


def test_bad_arguments_are_refused_naming_the_field_and_what_it_accepts():
    with pytest.raises(ValueError, match="kind must be one of save, load; got 'write'"):
        telemetry.checkpoint("write")
    with pytest.raises(ValueError, match="nbytes must be a non-negative int"):
        telemetry.checkpoint("save", nbytes=-1)


def test_a_save_that_raises_passes_its_exception_through_and_counts_nothing(run_dir):
    telemetry.init(run_dir=run_dir, job="ck", sinks=["store"])
    with telemetry.step():
        with pytest.raises(OSError, match="disk full"):
            with telemetry.checkpoint("save", nbytes=10):
                raise OSError("disk full")
    telemetry.shutdown()
    t = open_input(run_dir).table
    assert not [c for c in t.columns if c.startswith("io.checkpoint")]  # no checkpoint in the run


def test_dcp_save_and_load_are_timed_with_the_bytes_of_the_files_written(run_dir, tmp_path):
    import torch.distributed.checkpoint as dcp

    ckpt = str(tmp_path / "ckpt")
    sd = {"w": torch.randn(128, 128), "b": torch.randn(100)}
    telemetry.init(run_dir=run_dir, job="dcp", sinks=["store"])
    with telemetry.step():
        dcp.save(sd, checkpoint_id=ckpt)  # one process: DCP saves without a process group
    with telemetry.step():
        back = {"w": torch.zeros(128, 128), "b": torch.zeros(100)}
        dcp.load(back, checkpoint_id=ckpt)
    telemetry.shutdown()
    assert torch.equal(back["w"], sd["w"])
    assert not getattr(dcp.save, "__wrapped_by_telemetry__", False)  # shutdown put DCP back
    t = open_input(run_dir).table
    files = glob.glob(os.path.join(ckpt, "*")) + glob.glob(os.path.join(ckpt, ".*"))
    assert io(t, 0, "checkpoint_bytes") == sum(map(os.path.getsize, files))  # data files and .metadata
    assert io(t, 0, "checkpoint_io_s") > 0 and io(t, 0, "checkpoint_s") >= io(t, 0, "checkpoint_io_s")
    data = [f for f in files if f.endswith(".distcp")]
    assert io(t, 1, "checkpoint_bytes") == sum(map(os.path.getsize, data))  # every stored item read once


def test_init_imports_no_dcp_and_a_later_import_is_timed_even_bound_by_name(tmp_path):
    """A fresh interpreter: ``init`` leaves torch.distributed.checkpoint unimported (about a second,
    for every job); a ``from torch.distributed.checkpoint import save`` after it gets the timed save;
    shutdown puts DCP back and removes the import hook."""
    import subprocess
    import sys

    code = """
import sys
import telemetry
telemetry.init(run_dir=sys.argv[1], job="x", sinks=["store"], announce=False)
assert "torch.distributed.checkpoint" not in sys.modules
import torch
from torch.distributed.checkpoint import save
with telemetry.step():
    save({"a": torch.ones(10)}, checkpoint_id=sys.argv[1] + "/ck")
telemetry.shutdown()
import torch.distributed.checkpoint as dcp
assert not getattr(dcp.save, "__wrapped_by_telemetry__", False)
assert not [f for f in sys.meta_path if type(f).__module__ == "telemetry.hooks.checkpoint"]
"""
    run = str(tmp_path / "run")
    done = subprocess.run([sys.executable, "-c", code, run], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    t = open_input(run).table
    files = glob.glob(os.path.join(run, "ck", "*")) + glob.glob(os.path.join(run, "ck", ".*"))
    assert io(t, 0, "checkpoint_bytes") == sum(map(os.path.getsize, files)) > 0


def test_a_writer_passed_again_is_counted_afresh_each_save_and_left_as_it_was(run_dir, tmp_path):
    """The caller's storage writer is wrapped for one call and put back after it: three saves through
    one writer each count their own bytes (never wrapper on wrapper), and the writer ends as it began."""
    import torch.distributed.checkpoint as dcp

    writer = dcp.FileSystemWriter(str(tmp_path / "ck"), overwrite=True)
    telemetry.init(run_dir=run_dir, job="w", sinks=["store"])
    for i in range(3):
        with telemetry.step():
            dcp.save({"w": torch.ones(1000 * (i + 1))}, storage_writer=writer)
    telemetry.shutdown()
    assert "write_data" not in vars(writer) and "finish" not in vars(writer)
    t = open_input(run_dir).table
    got = [io(t, s, "checkpoint_bytes") for s in range(3)]
    assert got[0] < got[1] < got[2]  # each its own save's bytes: 4, 8 and 12 KB of tensor
    assert got[2] - got[1] == pytest.approx(4000, abs=200) and got[1] - got[0] == pytest.approx(4000, abs=200)

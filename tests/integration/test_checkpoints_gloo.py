"""Checkpoint timing (telemetry/hooks/checkpoint.py) on real gloo ranks: torch.distributed.checkpoint's
save, async_save and load, each rank's bytes as its storage writer reports them (the files written,
the metadata file on the rank that writes it), the blocking part apart from the async upload, in the
step each belongs to."""

import glob
import os

import pytest
import torch.multiprocessing as mp

from telemetry.analysis.inputs.load import open_input
from tests.helpers import dist_cases
from tests.helpers.servers import free_port


def files_bytes(folder):
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(folder, "*")) + glob.glob(os.path.join(folder, ".*")))


# four ranks on two cores: run alone (beside another worker's tests it starves them: scripts/suite.sh)
@pytest.mark.parametrize("world", [2, pytest.param(4, marks=pytest.mark.alone)])
def test_dcp_saves_and_loads_are_timed_with_the_bytes_written(tmp_path, world):
    run = str(tmp_path / "run")
    mp.start_processes(
        dist_cases.checkpoints, args=(world, free_port(), run), nprocs=world, start_method="spawn", join=True
    )
    table = open_input(run).table

    def io(rank, step, key):
        return table.loc[(table["rank"] == rank) & (table["step"] == step), f"io.{key}"].item()

    for folder, step in (("ckpt-sync", 1), ("ckpt-async", 3)):
        written = files_bytes(os.path.join(run, folder))
        ranks = [io(r, step, "checkpoint_bytes") for r in range(world)]
        assert sum(ranks) == written, (folder, ranks, written)  # every byte of every file, counted once
        assert len(set(ranks)) == world  # each rank its own part (ranks hold different sizes)
    for r in range(world):
        assert io(r, 1, "checkpoint_s") > 0 and io(r, 1, "checkpoint_io_s") > 0
        assert io(r, 1, "checkpoint_async_s") == 0
        # the async save: its call blocked between steps 2 and 3 (counted in step 3), its upload ended by
        # step 3's wait for it
        assert io(r, 3, "checkpoint_s") > 0 and io(r, 3, "checkpoint_async_s") > 0
        assert io(r, 4, "checkpoint_s") > 0  # the load
        # what this rank read: its own tensor and the shared one, as stored (a few hundred bytes of framing each)
        raw = (r + 1) * 16384 * 4 + 256 * 4
        assert raw < io(r, 4, "checkpoint_bytes") < raw + 8192
        for step in (0, 2, 5):
            assert io(r, step, "checkpoint_s") == 0 and io(r, step, "checkpoint_bytes") == 0


@pytest.mark.parametrize("world,slow", [(2, 1), pytest.param(4, 2, marks=pytest.mark.alone)])
def test_a_rank_whose_checkpoint_writes_are_throttled_is_named_slow_checkpoint(tmp_path, world, slow):
    from telemetry.analysis import analyze_run

    run = str(tmp_path / "run")
    mp.start_processes(
        dist_cases.slow_checkpoints, args=(world, free_port(), run, slow), nprocs=world, start_method="spawn", join=True
    )
    result = analyze_run(run)
    named = [f for f in result.findings if f.kind == "slow_checkpoint" and f.ranks]
    assert [f.ranks for f in named] == [[slow]], [(f.kind, f.ranks, f.evidence) for f in result.findings]
    bw = named[0].details["bandwidth_Bps"][str(slow)]
    assert bw * 4 < named[0].details["peer_bandwidth_Bps"]  # far under its peers'
    assert named[0].first_step == 1 and named[0].last_step == 5
    assert result.summary["checkpoint_advice"]["saves"] == 3


def test_the_demos_slow_checkpoint_injection_is_named_with_its_rank(tmp_path):
    """`telemetry demo --inject slow_checkpoint:rank=1,factor=10`: the demo saves every 25 steps (each rank
    its own DCP checkpoint), rank 1's writes 10x slower; analyze names slow_checkpoint on rank 1 and
    advises an interval."""
    import json
    import subprocess
    import sys

    run = str(tmp_path / "run")
    demo = subprocess.run(
        [sys.executable, "-m", "telemetry", "demo", "--ranks", "2", "--steps", "100", "--run-dir", run, "--json"]
        + ["--inject", "slow_checkpoint:rank=1,factor=10"],
        env={**os.environ, "TELEMETRY_SINKS": "store"},
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert demo.returncode in (0, 1), demo.stderr[-3000:]
    doc = json.loads(demo.stdout)
    named = [f for f in doc["findings"] if f["kind"] == "slow_checkpoint" and f["ranks"]]
    assert [f["ranks"] for f in named] == [[1]], [(f["kind"], f["ranks"]) for f in doc["findings"]]
    assert named[0]["first_step"] == 24 and named[0]["last_step"] == 99  # saves at steps 24, 49, 74, 99
    assert doc["summary"]["checkpoint_advice"]["saves"] == 4
    kept = sorted(os.listdir(os.path.join(run, "checkpoints", "rank-1")))
    assert kept == ["step-000074", "step-000099"]  # the latest two kept

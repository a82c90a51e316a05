"""Every launch pattern finds its rank, for real: the PyTorch DDP tutorial's torch.multiprocessing.spawn
(telemetry.init after init_process_group, and before it), ranks named only by MPICH's or SLURM's
variables, and a second live process that claims a rank already being written (refused, named)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from telemetry.analysis.inputs.load import open_input
from tests.helpers.paths import ROOT
from tests.helpers.servers import free_port

STEPS = 20

# The tutorial's shape: setup() sets MASTER_ADDR/PORT and joins the group; no RANK anywhere.
SPAWN = """
import os, sys
import torch, torch.distributed as dist, torch.multiprocessing as mp
import telemetry

RUN, PORT, ORDER, STEPS = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

def setup(rank, world):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = PORT
    dist.init_process_group("gloo", rank=rank, world_size=world)

def worker(rank, world):
    if ORDER == "after":
        setup(rank, world)
        telemetry.init(run_dir=RUN, job="spawned", sinks=["store"], announce=False)
    else:
        os.environ["MASTER_ADDR"] = "127.0.0.1"  # the tutorial sets these first
        telemetry.init(run_dir=RUN, job="spawned", sinks=["store"], announce=False)
        for _ in range(3):  # steps before the group exists: held, then written as the group's rank
            with telemetry.step():
                pass
        setup(rank, world)
    x = torch.ones(1000)
    for _ in range(STEPS - (0 if ORDER == "after" else 3)):
        with telemetry.step():
            with telemetry.phase("forward"):
                y = (x * (rank + 1)).sum()
            dist.all_reduce(x)
    telemetry.shutdown()
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2, join=True)
"""


def run_script(code: str, *args: str, env: dict | None = None, timeout: int = 180) -> subprocess.CompletedProcess:
    p = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=ROOT,
        env=env or {k: v for k, v in os.environ.items() if not k.startswith(("TELEMETRY_", "SLURM_", "PMI_"))},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert p.returncode == 0, p.stderr[-4000:]
    return p


@pytest.mark.parametrize("order", ["after", "before"])
def test_the_tutorials_mp_spawn_gives_two_ranks_with_every_step(tmp_path, order):
    run_dir = str(tmp_path / "run")
    script = tmp_path / "train.py"  # spawn re-imports the main module: a file, as the tutorial's
    script.write_text(textwrap.dedent(SPAWN))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TELEMETRY_", "SLURM_", "PMI_", "MASTER_"))}
    env["PYTHONPATH"] = ROOT
    p = subprocess.run(
        [sys.executable, str(script), run_dir, str(free_port()), order, str(STEPS)],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert p.returncode == 0, p.stderr[-4000:]
    run = open_input(run_dir)
    t = run.table
    assert sorted(t["rank"].unique()) == [0, 1]
    for r in (0, 1):
        assert t[t["rank"] == r]["step"].tolist() == list(range(STEPS))
    assert not any("duplicate" in w for w in run.warnings), run.warnings
    metas = [json.load(open(os.path.join(run_dir, "ranks", f"rank-{r:05d}.json"))) for r in (0, 1)]
    assert [(m["rank"], m["world_size"], m["local_rank"], m["launcher"]) for m in metas] == [
        (0, 2, 0, "process_group"),
        (1, 2, 1, "process_group"),  # both on this host: numbered in rank order
    ]


RANKED = """
import os, sys, time
import torch, torch.distributed as dist
import telemetry

RUN, STEPS = sys.argv[1], int(sys.argv[2])
session = telemetry.init(run_dir=RUN, job="ranked", sinks=["store"], announce=False)
dist.init_process_group("gloo", rank=session.ctx.rank, world_size=session.ctx.world_size)
x = torch.ones(100)
for _ in range(STEPS):
    with telemetry.step():
        dist.all_reduce(x)
telemetry.shutdown()
dist.destroy_process_group()
"""

VARIABLES = {
    "mpich": lambda r: {"PMI_RANK": str(r), "PMI_SIZE": "2", "MPI_LOCALRANKID": str(r), "MPI_LOCALNRANKS": "2"},
    "slurm": lambda r: {
        "SLURM_PROCID": str(r),
        "SLURM_NTASKS": "2",
        "SLURM_LOCALID": str(r),
        "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_NODEID": "0",
        "SLURMD_NODENAME": "node-a",
    },
}


@pytest.mark.parametrize("launcher", sorted(VARIABLES))
def test_ranks_named_by_mpi_or_slurm_variables(tmp_path, launcher):
    run_dir = str(tmp_path / "run")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TELEMETRY_", "SLURM_", "PMI_"))}
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(RANKED), run_dir, str(STEPS)],
            cwd=ROOT,
            env={**base, **VARIABLES[launcher](r)},
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err[-3000:]
    t = open_input(run_dir).table
    assert sorted(t["rank"].unique()) == [0, 1] and len(t) == 2 * STEPS
    metas = [json.load(open(os.path.join(run_dir, "ranks", f"rank-{r:05d}.json"))) for r in (0, 1)]
    assert {m["launcher"] for m in metas} == {launcher} and [m["local_rank"] for m in metas] == [0, 1]


HOLDER = """
import sys, time
import telemetry
telemetry.init(run_dir=sys.argv[1], job="twice", sinks=["store"], announce=False)
for _ in range(5):
    with telemetry.step():
        pass
print("holding", flush=True)
sys.stdin.readline()
telemetry.shutdown()
"""

SECOND = """
import logging, sys
import telemetry
logging.basicConfig(level=logging.ERROR, format="%(message)s")
s = telemetry.init(run_dir=sys.argv[1], job="twice", sinks=["store"], announce=False)
for _ in range(7):
    with telemetry.step():
        pass
stats = telemetry.shutdown()
print(stats["records"], flush=True)
"""


def test_a_second_live_process_as_the_same_rank_is_refused_with_the_first_ones_pid(tmp_path):
    run_dir = str(tmp_path / "run")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TELEMETRY_", "SLURM_", "PMI_"))}
    env.update(RANK="0", WORLD_SIZE="1")
    first = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(HOLDER), run_dir],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stdout.readline().strip() == "holding"
        second = run_script(SECOND, run_dir, env=env)
        assert second.stdout.strip() == "0"  # it recorded nothing
        assert f"being written by another live process: pid {first.pid} on " in second.stderr
    finally:
        first.communicate("\n", timeout=60)
    t = open_input(run_dir).table
    assert t["step"].tolist() == [0, 1, 2, 3, 4]  # the first one's steps, alone
    run_script(SECOND, run_dir, env=env)  # the first is gone: a restart writes as before
    assert len(open_input(run_dir).table) == 5 + 7 - 5  # its re-run steps 0-4 replace the first's, 5-6 added

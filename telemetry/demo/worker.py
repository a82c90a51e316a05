"""One rank of the demo job: torch.distributed (gloo), a small LM, instrumented end to end.

Started by :mod:`telemetry.demo.launcher` with the torchrun variables set (RANK, WORLD_SIZE, ...)
and the job's settings in ``TRAINING_TELEMETRY_DEMO`` (JSON). Runnable under torchrun too::

    TRAINING_TELEMETRY_DEMO='{"steps": 50, "run_dir": "runs/x"}' torchrun --nproc-per-node 4 -m telemetry.demo.worker
"""

from __future__ import annotations

from telemetry.children import die_with_parent

die_with_parent()  # first, before torch's import: started by `telemetry demo`, it dies with the launcher

import json
import os
import signal
import sys
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Iterable, Iterator, TypeVar

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

import telemetry

from .faults import Fault, FaultPlan
from .model import TinyLM, TokenShard

if TYPE_CHECKING:
    from torch.distributed import Work
    from torch.distributed.checkpoint.planner import SavePlan, SavePlanner
    from torch.distributed.checkpoint.storage import WriteResult
    from torch.futures import Future

B = TypeVar("B")

DEFAULTS = {
    "steps": 200,
    "batch": 8,
    "seq_len": 64,
    "vocab": 128,
    "d_model": 64,
    "layers": 2,
    "heads": 4,
    "lr": 3e-3,
    "run_dir": "runs/demo",
    "job": "demo",
    "faults": [],
    "pg_timeout_s": 120,
    "telemetry": {},
    "launcher_store": False,
    "checkpoint_every": 0,  # a checkpoint of the model and optimizer every N steps (0: none)
}
STORE_FD_ENV = "TRAINING_TELEMETRY_DEMO_STORE_FD"  # rank 0's: the launcher's listening socket


def _stretch(t0: float, factor: float) -> None:
    """Keep this rank inside the current phase until it has taken ``factor`` x its own time."""
    if factor > 1.0:
        elapsed = time.perf_counter() - t0
        time.sleep(elapsed * (factor - 1.0))


_WORK = torch.ones(48, 48)


def _compute_more(cpu0: float, factor: float) -> None:
    """Do (factor - 1) x the CPU time this thread has spent since ``cpu0``, as real tensor work."""
    if factor > 1.0:
        now = time.thread_time()
        until = now + (now - cpu0) * (factor - 1.0)
        while time.thread_time() < until:
            torch.mm(_WORK, _WORK)


_SLOW_OPS = {
    "exp": torch.exp,
    "softmax": lambda t: torch.softmax(t, -1),
    "sort": lambda t: torch.sort(t, -1).values,
    "cumsum": lambda t: torch.cumsum(t, -1),
}


def _slow_op(cpu0: float, op: tuple[str, float] | None, t: torch.Tensor) -> None:
    """slow_op: run ``op`` on ``t`` until (factor - 1) x the CPU time since ``cpu0`` is spent in it."""
    if op is None:
        return
    fn, factor = _SLOW_OPS[op[0]], op[1]
    now = time.thread_time()
    until = now + (now - cpu0) * (factor - 1.0)
    with torch.no_grad():
        while time.thread_time() < until:
            fn(t)


def _save_checkpoint(run_dir: str, rank: int, step: int, state: dict, factor: float) -> None:
    """This rank's checkpoint (model and optimizer) with torch.distributed.checkpoint, each rank to its
    own folder (``no_dist``: per-rank local checkpoints), keeping the latest two; ``factor`` > 1: its
    writes take that many times as long (slow_checkpoint: a slower disk)."""
    import shutil

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.filesystem import FileSystemWriter

    class SlowWriter(FileSystemWriter):
        def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
            t0 = time.perf_counter()
            fut = super().write_data(plan, planner)
            fut.wait()
            time.sleep((time.perf_counter() - t0) * (factor - 1.0))  # the slow disk: I/O wait, not CPU
            return fut

    root = os.path.join(run_dir, "checkpoints", f"rank-{rank}")
    path = os.path.join(root, f"step-{step:06d}")
    writer = SlowWriter(path) if factor > 1.0 else FileSystemWriter(path)
    # dcp.save looked up at the call: the one telemetry times
    dcp.save(state, storage_writer=writer, no_dist=True)  # pyright: ignore[reportPrivateImportUsage] - DCP's public save, re-exported without __all__
    for old in sorted(os.listdir(root))[:-2]:
        shutil.rmtree(os.path.join(root, old), ignore_errors=True)


def _stall_forever() -> None:
    while True:  # a hung rank: alive, making no progress, until the launcher kills it
        time.sleep(1.0)


def _install_slow_comm(plan: FaultPlan, step_ref: list[int]) -> None:
    """Make the gradient all-reduce F times slower from inside the call, beneath telemetry's
    wrapper: the call also reduces (F-1) x its payload of padding, so every rank does F times the
    communication work for the bytes it asked for, as it would over a link F times slower."""
    real = dist.all_reduce
    pads: dict[int, torch.Tensor] = {}

    def slowed(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Work | None:
        out = real(tensor, *args, **kwargs)
        factor = plan.comm_factor(step_ref[0])
        if factor > 1.0:
            n = int(tensor.numel() * (factor - 1.0))
            pad = pads.get(n)
            if pad is None:
                pad = pads[n] = torch.zeros(n, dtype=tensor.dtype)
            real(pad, *args, **kwargs)
        return out

    dist.all_reduce = slowed


def _batches(loader: Iterable[B], plan: FaultPlan) -> Iterator[B]:
    for i, batch in enumerate(loader):
        delay = plan.data_delay_s(i)
        if delay > 0:
            time.sleep(delay)  # a slow input pipeline: the wait is inside next()
        yield batch


def sync_gradients(model: torch.nn.Module, world: int) -> None:
    """Average gradients over ranks with one flat all_reduce (what DDP does, in buckets)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = _flatten_dense_tensors(grads)
    dist.all_reduce(flat)
    flat.div_(world)
    for g, synced in zip(grads, _unflatten_dense_tensors(flat, grads)):
        g.copy_(synced)


_HOG = """
import ctypes, os, signal, sys
ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: it dies with the rank, however the rank ends
os.sched_setaffinity(0, {int(sys.argv[1])})
while True:
    pass
"""


def _start_cpu_hog() -> None:
    """A process that spins on this rank's CPU, with this rank pinned to it: it gets about half a
    core from now on (the `cpu_hog` fault). Linux only (affinity, parent-death signal)."""
    import atexit
    import subprocess

    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    hog = subprocess.Popen([sys.executable, "-c", _HOG, str(cpu)])
    atexit.register(hog.kill)


def _init_process_group(rank: int, world: int, timeout: timedelta, launcher_store: bool) -> None:
    """Join the gloo process group. Started by ``telemetry demo`` (``launcher_store``), rank 0 serves
    the group's store on the socket the launcher bound to 127.0.0.1 (its file descriptor in
    ``STORE_FD_ENV``) and the other ranks connect to it; under torchrun, env:// as usual."""
    if not launcher_store:
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world, timeout=timeout)
        return
    fd = os.environ.pop(STORE_FD_ENV, None)
    store = dist.TCPStore(  # pyright: ignore[reportPrivateImportUsage] - torch.distributed's public TCPStore, re-exported without __all__
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        world,
        is_master=rank == 0,
        timeout=timeout,
        master_listen_fd=int(fd) if rank == 0 and fd is not None else None,
    )
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)


def main() -> None:
    args = {**DEFAULTS, **json.loads(os.environ.get("TRAINING_TELEMETRY_DEMO", "{}"))}
    torch.set_num_threads(1)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    plan = FaultPlan([Fault(**f) for f in args["faults"]], rank)
    step_ref = [0]
    _init_process_group(rank, world, timedelta(seconds=args["pg_timeout_s"]), args["launcher_store"])
    if plan.has_slow_comm:
        _install_slow_comm(plan, step_ref)
    telemetry.init(run_dir=args["run_dir"], job=args["job"], **args["telemetry"])

    torch.manual_seed(0)  # identical initial weights on every rank
    model = TinyLM(args["vocab"], args["d_model"], args["layers"], args["heads"], args["seq_len"])
    opt = torch.optim.AdamW(model.parameters(), lr=args["lr"])
    batch, steps = args["batch"], args["steps"]
    # every rank reads its batches from its own token file, past the page cache (slow_input: slower reads)
    data = TokenShard(
        os.path.join(args["run_dir"], "data", f"rank-{rank}.tokens"),
        steps * batch,
        args["seq_len"],
        args["vocab"],
        seed=rank,
        slow=lambda item: plan.input_factor(item // batch),
    )
    loader = torch.utils.data.DataLoader(telemetry.watch_dataset(data), batch_size=batch, shuffle=False, num_workers=0)
    tokens = batch * args["seq_len"]

    for i, (x, y) in enumerate(telemetry.watch(_batches(loader, plan))):
        step_ref[0] = i
        if plan.hog_starts_at(i):
            _start_cpu_hog()
        with telemetry.step(tokens=tokens, samples=batch):
            with telemetry.phase("forward"):
                t0, c0 = time.perf_counter(), time.thread_time()
                if plan.hangs_at(i):
                    _stall_forever()
                if plan.killed_at(i):
                    os.kill(os.getpid(), signal.SIGKILL)  # no shutdown, no last flush: a lost rank
                logits = model(x)
                loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
                _slow_op(c0, plan.slow_op(i), logits.detach())
                _compute_more(c0, plan.work_factor(i, "forward"))
                _stretch(t0, plan.phase_factor(i, "forward"))
            with telemetry.phase("backward"):
                t0, c0 = time.perf_counter(), time.thread_time()
                loss.backward()
                _compute_more(c0, plan.work_factor(i, "backward"))
                _stretch(t0, plan.phase_factor(i, "backward"))
                sync_gradients(model, world)  # blocks until the slowest rank arrives
            with telemetry.phase("optimizer"):
                t0, c0 = time.perf_counter(), time.thread_time()
                opt.step()
                opt.zero_grad(set_to_none=True)
                _compute_more(c0, plan.work_factor(i, "optimizer"))
                _stretch(t0, plan.phase_factor(i, "optimizer"))
            telemetry.log(loss=loss.detach())
            every = args["checkpoint_every"]
            if every and i % every == every - 1:
                state = {"model": model.state_dict(), "optim": opt.state_dict()}
                _save_checkpoint(args["run_dir"], rank, i, state, plan.checkpoint_factor(i))
        gap = plan.host_gap_s(i)
        if gap > 0:
            time.sleep(gap)  # host work between steps, outside telemetry.step (the host_gap fault)
    stats = telemetry.shutdown()
    try:
        print(f"rank {rank}: telemetry {json.dumps(stats, default=str)}", file=sys.stderr, flush=True)
    except OSError:
        pass  # its log's disk is full: training is done all the same
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

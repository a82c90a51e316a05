"""Tensor parallelism (DTensor), optionally with FSDP2 on a second mesh dimension, on CPU (gloo), with
telemetry: each collective is timed and named by its mesh dimension (``comm_group.tp_s``, ...).

    torchrun --nproc_per_node 2 examples/train_tp.py --mesh tp=2 --steps 40 --run-dir runs/tp
    torchrun --nproc_per_node 4 examples/train_tp.py --mesh dp=2,tp=2 --steps 40 --run-dir runs/fsdp_tp
    telemetry analyze runs/tp

``--slow-rank R --slow-ms M`` makes rank R compute M ms longer in each forward (a straggler inside its
tensor-parallel group).
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import telemetry


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mesh", default="tp=2", help="mesh dimensions, outermost first: tp=2 or dp=2,tp=2")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--run-dir", default="runs/tp")
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--slow-ms", type=float, default=0.0)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    args = ap.parse_args()
    dims = [(name, int(size)) for name, size in (part.split("=") for part in args.mesh.split(","))]

    dist.init_process_group("gloo")
    telemetry.init(run_dir=args.run_dir, job=os.path.basename(args.run_dir.rstrip("/")) or "tp")
    mesh = init_device_mesh("cpu", tuple(s for _, s in dims), mesh_dim_names=tuple(n for n, _ in dims))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(args.width, 4 * args.width), nn.ReLU(), nn.Linear(4 * args.width, args.width))
    model = parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    if "dp" in mesh.mesh_dim_names:
        from torch.distributed.fsdp import fully_shard

        model = fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if args.compile:
        model = torch.compile(model)
    rank = dist.get_rank()
    for step in range(args.steps):
        x = torch.randn(32, args.width, generator=torch.Generator().manual_seed(step))
        with telemetry.step(samples=32):
            with telemetry.phase("forward"):
                if rank == args.slow_rank:
                    time.sleep(args.slow_ms / 1000)
                loss = model(x).pow(2).mean()
            with telemetry.phase("backward"):
                loss.backward()
            with telemetry.phase("optimizer"):
                opt.step()
                opt.zero_grad()
    telemetry.shutdown()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

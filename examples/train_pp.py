"""Pipeline parallelism (torch.distributed.pipelining, GPipe) on CPU (gloo), one stage per rank, on a
1-D mesh named ``pp``: the stages' sends and receives are timed and named ``pp``.

    torchrun --nproc_per_node 2 examples/train_pp.py --steps 30 --run-dir runs/pp
    telemetry analyze runs/pp
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

import telemetry


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--run-dir", default="runs/pp")
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--microbatches", type=int, default=4)
    args = ap.parse_args()

    dist.init_process_group("gloo")
    telemetry.init(run_dir=args.run_dir, job=os.path.basename(args.run_dir.rstrip("/")) or "pp")
    world, rank = dist.get_world_size(), dist.get_rank()
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("pp",))
    torch.manual_seed(rank)
    block = nn.Sequential(nn.Linear(args.width, args.width), nn.ReLU(), nn.Linear(args.width, args.width))
    stage = PipelineStage(block, rank, world, torch.device("cpu"), group=mesh.get_group("pp"))
    schedule = ScheduleGPipe(stage, n_microbatches=args.microbatches, loss_fn=lambda out, y: (out - y).pow(2).mean())
    opt = torch.optim.SGD(block.parameters(), lr=0.01)
    for step in range(args.steps):
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(32, args.width, generator=g), torch.randn(32, args.width, generator=g)
        with telemetry.step(samples=32):
            with telemetry.phase("pipeline"):
                if rank == 0:
                    schedule.step(x)
                elif rank == world - 1:
                    schedule.step(target=y)
                else:
                    schedule.step()
            with telemetry.phase("optimizer"):
                opt.step()
                opt.zero_grad()
    telemetry.shutdown()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

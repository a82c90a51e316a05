"""A complete torchrun job with telemetry: DDP on CPU (gloo), the order of set-up that matters.

    torchrun --nproc_per_node 2 examples/train_ddp.py --steps 50 --run-dir runs/example
    telemetry analyze runs/example

The order: ``init_process_group`` first, then ``telemetry.init`` (it finds the process group and
starts online detection at once; the other way round it starts on the first tick that sees the
group), then wrap the model in DDP (its gradient all-reduce is timed from its first forward).
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import telemetry


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--run-dir", default="runs/example")
    args = ap.parse_args()

    dist.init_process_group("gloo")  # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    telemetry.init(
        run_dir=args.run_dir,
        job=os.path.basename(args.run_dir.rstrip("/")) or "example",
        prometheus_port=int(os.environ.get("EXAMPLE_PROMETHEUS_PORT", "9464")),
    )
    torch.manual_seed(dist.get_rank())
    model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = [torch.randn(32, 256) for _ in range(8)]

    for i in range(args.steps):
        batch = data[i % len(data)]
        with telemetry.step(samples=len(batch)):
            with telemetry.phase("forward"):
                loss = model(batch).square().mean()
            with telemetry.phase("backward"):
                loss.backward()
            with telemetry.phase("optimizer"):
                opt.step()
                opt.zero_grad()
            telemetry.log(loss=loss)

    telemetry.shutdown()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""The PyTorch profiler beside telemetry: ranges that line up, and the traces analyzed as a run.

    torchrun --nproc_per_node 2 examples/profile_traces.py --out runs/prof
    telemetry analyze runs/prof/traces     # the profiler's traces, per rank, as a steps table
    telemetry analyze runs/prof/run        # telemetry's own run store of the same steps

With init(profiler_ranges=True) every telemetry step opens a range `telemetry.step#N` and every phase
one of its own name, so the trace's steps are the run store's (numbers, starts, durations). The
profiler records steps 2-11 (wait 1, warm up 1, 10 active); its traces go to OUT/traces, one file per
rank (tensorboard_trace_handler), the run store to OUT/run.
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

import telemetry


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="runs/prof")
    ap.add_argument("--steps", type=int, default=14)
    args = ap.parse_args()

    dist.init_process_group("gloo")  # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank = dist.get_rank()
    telemetry.init(
        run_dir=os.path.join(args.out, "run"),
        job="prof",
        profiler_ranges=True,
        prometheus_port=int(os.environ.get("EXAMPLE_PROMETHEUS_PORT", "9464")),
    )
    torch.set_num_threads(1)
    torch.manual_seed(rank)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batch = torch.randn(32, 256)

    handler = tensorboard_trace_handler(os.path.join(args.out, "traces"), worker_name=f"rank{rank}")
    with profile(
        activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=10), on_trace_ready=handler
    ) as prof:
        for _ in range(args.steps):
            with telemetry.step(samples=len(batch)):
                with telemetry.phase("forward"):
                    loss = model(batch).square().mean()
                with telemetry.phase("backward"):
                    loss.backward()
                with telemetry.phase("optimizer"):
                    opt.step()
                    opt.zero_grad()
            prof.step()
    telemetry.shutdown()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

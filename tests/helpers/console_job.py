"""A user's torchrun job that prints to its console: each rank says ``user stdout R S`` on stdout and
``user stderr R S`` on stderr at every step, around a small DDP model instrumented with the README's
lines. It makes at least STEPS steps, and goes on (up to 20,000) until the run's baseline profiler
capture has both ranks' traces, so that the test reads a console through a capture's start and stop
however busy the machine. tests/integration/test_console.py reads the job's whole output."""

import glob
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import telemetry


def main() -> None:
    steps, run_dir = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo")
    telemetry.init(run_dir=run_dir, job="console", prometheus_port=int(os.environ["CONSOLE_PORT"]))
    rank = dist.get_rank()
    model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 256)
    done = torch.zeros(1)
    for step in range(20_000):
        if step >= steps and step % 50 == 0:  # every rank decides alike: the capture's traces are both there
            done[0] = float(len(glob.glob(os.path.join(run_dir, "captures", "*", "rank-*.json.gz"))) >= 2)
            dist.all_reduce(done, op=dist.ReduceOp.MIN)
            if done[0]:
                break
        print(f"user stdout {rank} {step}", flush=True)
        print(f"user stderr {rank} {step}", file=sys.stderr, flush=True)
        with telemetry.step(samples=len(x)):
            with telemetry.phase("forward"):
                loss = model(x).square().mean()
            with telemetry.phase("backward"):
                loss.backward()
            with telemetry.phase("optimizer"):
                opt.step()
                opt.zero_grad()
    telemetry.shutdown()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

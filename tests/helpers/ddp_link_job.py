"""One rank of a user's DDP job (8 layers of 512x512: two buckets, 8.4 MB of gradients a step, batch 64) for the
slow-link test (tests/integration/test_slow_link.py), each rank in its own network namespace.

The settings come from the environment: RUN (the run directory), STEPS, and MARK: rank 0 writes the
file MARK as its step CAP_AT begins (the test then caps the link); BATCH (64) and THREADS (torch's
intra-op threads: 1 unless set, and torch's default when set empty), for bench/slow_link.py."""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import telemetry

dist.init_process_group("gloo")
if os.environ.get("THREADS", "1"):
    torch.set_num_threads(int(os.environ.get("THREADS", "1")))
telemetry.init(run_dir=os.environ["RUN"], job="slow-link", sinks=["store"], online=False)
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(8)]))
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(int(os.environ.get("BATCH", "64")), 512)
cap_at = int(os.environ["CAP_AT"])
for step in range(int(os.environ["STEPS"])):
    if step == cap_at and dist.get_rank() == 0:
        open(os.environ["MARK"], "w").close()
    with telemetry.step(index=step):
        with telemetry.phase("forward"):
            loss = model(x).square().mean()
        with telemetry.phase("backward"):
            loss.backward()
        with telemetry.phase("optimizer"):
            opt.step()
            opt.zero_grad()
telemetry.shutdown()
dist.destroy_process_group()

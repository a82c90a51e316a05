"""The per-step cost of telemetry's DDP comm hook: 1 gloo rank, a 2-layer model in small buckets, 3,000
steps of ``model(x).sum().backward()``; prints the median step after the first 500, in microseconds.
Run it at two commits, interleaved, to compare (bench/RESULTS.md, "Waits counted where they happen").

    .venv/bin/python bench/ddp_hook_cost.py [PORT]
"""

import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import telemetry

port = sys.argv[1] if len(sys.argv) > 1 else "29611"
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
torch.set_num_threads(1)
telemetry.init(run_dir=tempfile.mkdtemp(), job="ddp-hook-cost", sinks=["store"], online=False)
model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)), bucket_cap_mb=0.0005)
x = torch.randn(4, 16)
took = []
for _ in range(3000):
    t = time.perf_counter()
    model(x).sum().backward()
    took.append(time.perf_counter() - t)
telemetry.shutdown()
dist.destroy_process_group()
print(f"{statistics.median(took[500:]) * 1e6:.1f}")

"""One rank of the fault suite's job: a small model, gradients all-reduced over gloo, telemetry on.

Run by gloo_job.GlooJob as its own process (env: RANK, WORLD_SIZE, MASTER_ADDR/PORT, FAULT_JOB = the
spec as JSON). It times every step itself (perf_counter around the whole step, telemetry included),
and at the end writes OUT/rank-N.json: step times, how long shutdown() took, telemetry.stats().
With spec["hold_at"] = K it stops before step K, touches OUT/rank-N.held and waits for OUT/release,
so a test can break something at a known point mid-run.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import telemetry


def main() -> int:
    spec = json.loads(os.environ["FAULT_JOB"])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    out = spec["out"]
    torch.set_num_threads(1)
    torch.manual_seed(rank)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=120))
    t_init = time.perf_counter()
    telemetry.init(run_dir=spec["run_dir"], job="faults", announce=False, **spec.get("init", {}))
    init_s = time.perf_counter() - t_init
    model = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 128)
    times: list[float] = []
    sleep_s = spec.get("sleep_s", 0.004)
    for i in range(spec["steps"]):
        if i == spec.get("hold_at"):
            open(os.path.join(out, f"rank-{rank}.held"), "w").close()
            deadline = time.monotonic() + 120
            while not os.path.exists(os.path.join(out, "release")) and time.monotonic() < deadline:
                time.sleep(0.02)
        t0 = time.perf_counter()
        with telemetry.step(samples=64):
            with telemetry.phase("forward"):
                loss = model(x).pow(2).mean()
            with telemetry.phase("backward"):
                opt.zero_grad()
                loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            with telemetry.phase("optimizer"):
                opt.step()
            time.sleep(sleep_s)  # the rest of a step's work, so a step is long enough to time well
            telemetry.log(loss=loss.detach())
        times.append(time.perf_counter() - t0)
        if i % 10 == 0:
            with open(os.path.join(out, f"rank-{rank}.at"), "w") as f:
                f.write(str(i))
    stats_before = telemetry.stats()
    t0 = time.perf_counter()
    final = None  # shutdown's final counters: what a sink could not deliver is only known then
    if not spec.get("skip_shutdown"):
        final = telemetry.shutdown()
    shutdown_s = time.perf_counter() - t0
    with open(os.path.join(out, f"rank-{rank}.json"), "w") as f:
        json.dump(
            {
                "rank": rank,
                "times": times,
                "init_s": init_s,
                "shutdown_s": shutdown_s,
                "stats": stats_before,
                "final_stats": final,
            },
            f,
            default=str,
        )
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

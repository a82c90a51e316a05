"""A user's DDP training script, run by torchrun (tests/integration/test_cpu_causes.py): each rank
pinned to a core of its own (rank k on the k-th of ``--cores``, before anything starts a thread, so
every thread of the rank inherits it), a small MLP on gloo, its batches from a DataLoader through
telemetry.watch, forward / backward / optimizer phases.

    torchrun --nproc_per_node 2 tests/helpers/ddp_pinned.py --steps 300 --cores 0,1 --run-dir RUN_DIR
"""

import argparse
import os


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--cores", default="0,1", help="rank k runs on the k-th of these cores")
    ap.add_argument("--workers", type=int, default=0, help="DataLoader worker processes (on the rank's core)")
    args = ap.parse_args()
    rank = int(os.environ["RANK"])
    cores = [int(c) for c in args.cores.split(",")]
    os.sched_setaffinity(0, {cores[rank % len(cores)]})

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, TensorDataset

    import telemetry

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    telemetry.init(run_dir=args.run_dir, job="pinned", sinks=["store"])
    torch.manual_seed(rank)
    model = DDP(
        torch.nn.Sequential(
            torch.nn.Linear(512, 1024),
            torch.nn.ReLU(),
            torch.nn.Linear(1024, 1024),
            torch.nn.ReLU(),
            torch.nn.Linear(1024, 512),
        )
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    loader = DataLoader(TensorDataset(torch.randn(64 * 16, 512)), batch_size=64, shuffle=True, num_workers=args.workers)
    step = 0
    while step < args.steps:
        for (batch,) in telemetry.watch(loader):
            with telemetry.step(samples=len(batch)):
                with telemetry.phase("forward"):
                    loss = model(batch).square().mean()
                with telemetry.phase("backward"):
                    loss.backward()
                with telemetry.phase("optimizer"):
                    opt.step()
                    opt.zero_grad()
            step += 1
            if step == args.steps:
                break
    telemetry.shutdown()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

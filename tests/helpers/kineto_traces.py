"""PyTorch profiler (Kineto) traces for the tests: a real profiled gloo run, and small hand-built ones.

``profiled_rank`` runs inside spawned gloo ranks: a small DDP model, 16 steps under
``torch.profiler.profile`` (a schedule that records steps 2-11 in one trace and 14-15 in a second)
with ``telemetry.init(profiler_ranges=True)``; rank ``SLOW`` does extra matrix products inside its
forward phase (real work: a sleep records no operation). Each rank writes its traces to
``OUT/traces`` (``tensorboard_trace_handler``) and its run store to ``OUT/run``.

The builders write GPU-shaped traces by hand (kernels on streams, NCCL kernels, ``distributedInfo``,
``ProfilerStep#N``) whose steps table is known exactly.
"""

from __future__ import annotations

import gzip
import json
import os
from typing import Any

SLOW = 1  # the rank whose forward does extra work
STEPS = 16
BASE_NS = 1_700_000_000_000_000_000  # baseTimeNanoseconds of the hand-built traces


def profiled_rank(rank: int, world: int, port: int, out: str) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    import telemetry

    os.environ.update(
        {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(world)}
    )
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=timedelta(seconds=60)
    )
    telemetry.init(
        run_dir=os.path.join(out, "run"),
        job="kineto",
        sinks=["store"],
        online=False,
        profiler_ranges=True,
        strict=True,
        announce=False,
    )
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(torch.randn(STEPS * 16, 64), torch.randn(STEPS * 16, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=16)
    extra = torch.randn(192, 192)
    handler = tensorboard_trace_handler(os.path.join(out, "traces"), worker_name=f"rank{rank}")
    with profile(
        activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=10), on_trace_ready=handler
    ) as prof:
        for x, y in telemetry.watch(loader):
            with telemetry.step(samples=16):
                with telemetry.phase("forward"):
                    loss = ((ddp(x) - y) ** 2).mean()
                    if rank == SLOW:
                        for _ in range(60):
                            extra = torch.tanh(extra @ extra)
                with telemetry.phase("backward"):
                    loss.backward()
                with telemetry.phase("optimizer"):
                    opt.step()
                    opt.zero_grad()
            prof.step()
    telemetry.shutdown()
    dist.barrier()
    dist.destroy_process_group()


# ---- hand-built traces -------------------------------------------------------------------------


def x(name: str, cat: str, ts: float, dur: float, tid: Any = 1, pid: int = 100, **args: Any) -> dict:
    e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        e["args"] = args
    return e


def gpu_trace(rank: int, world: int = 2, slow_us: float = 0.0, steps: int = 3) -> dict:
    """A GPU-shaped trace: per step (1,000 us apart, step N from ts 1000*N):
    ProfilerStep#N [0, 900); data loader [0, 50); forward annotation [100, 300); backward [300, 700);
    optimizer [700, 800) (all relative to the step). Kernels (stream 7), launched by cudaLaunchKernel
    at the annotation's start + 10: forward 2 kernels of 40 us (+ ``slow_us`` on one), backward
    2 of 60, optimizer 1 of 20 (the last launched outside any phase: 'other'), an NCCL all-reduce
    kernel (stream 20) of 150 us launched in backward, with a record_param_comms op
    (In msg nelems 1,000, float32, group size ``world``). A memcpy that counts as nothing."""
    ev: list[dict] = [{"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "args": {"name": "python"}}]
    corr = 0

    def launch(t: float, kname: str, kdur: float, stream: int = 7, kt: float | None = None) -> None:
        nonlocal corr
        corr += 1
        ev.append(x("cudaLaunchKernel", "cuda_runtime", t, 5, correlation=corr))
        ev.append(
            x(
                kname,
                "kernel",
                kt if kt is not None else t + 20,
                kdur,
                tid=stream,
                pid=0,
                correlation=corr,
                stream=stream,
                device=0,
            )
        )

    for n in range(steps):
        s = 1000.0 * n
        ev.append(x(f"ProfilerStep#{n}", "user_annotation", s, 900))
        ev.append(x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "user_annotation", s, 50))
        ev.append(x("forward", "user_annotation", s + 100, 200))
        ev.append(x("aten::linear", "cpu_op", s + 105, 30))
        launch(s + 110, "sm80_xmma_gemm_f32", 40 + slow_us)
        launch(s + 120, "void at::native::vectorized_elementwise_kernel", 40)
        ev.append(x("backward", "user_annotation", s + 300, 400))
        launch(s + 310, "sm80_xmma_gemm_bwd", 60)
        launch(s + 320, "sm80_xmma_gemm_bwd2", 60)
        ev.append(
            x(
                "record_param_comms",
                "cpu_op",
                s + 400,
                20,
                **{
                    "Collective name": "allreduce",
                    "In msg nelems": 1000,
                    "Out msg nelems": 1000,
                    "dtype": "Float",
                    "Group size": world,
                    "Process Group Name": "0",
                },
            )
        )
        launch(
            s + 405, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", 150, stream=20
        )
        ev.append(x("optimizer", "user_annotation", s + 700, 100))
        launch(s + 710, "multi_tensor_apply_kernel", 20)
        launch(s + 850, "void at::native::fill_kernel", 10)  # outside every phase: 'other'
        ev.append(x("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", s + 60, 30, tid=7, pid=0))
    trace: dict[str, Any] = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}],
        "baseTimeNanoseconds": BASE_NS,
        "traceEvents": ev,
    }
    if rank is not None:
        trace["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
    return trace


def write_big_trace(path: str, steps: int) -> int:
    """A large GPU-shaped trace written event by event (50 events a step); returns the events written.
    Per step (10,000 us apart): ProfilerStep#N [0, 9000), forward [100, 4100), backward [4100, 8100),
    23 kernels of 100 us launched at 150 + 300 k (14 in forward), an NCCL kernel of 500 us."""
    n = 0
    with open(path, "w") as f:
        f.write('{"distributedInfo": {"rank": 0, "world_size": 1}, "baseTimeNanoseconds": 0, "traceEvents": [')
        for s in range(steps):
            t0 = s * 10_000.0
            evs = [
                x(f"ProfilerStep#{s}", "user_annotation", t0, 9000),
                x("forward", "user_annotation", t0 + 100, 4000),
                x("backward", "user_annotation", t0 + 4100, 4000),
            ]
            for k in range(23):
                ts = t0 + 150 + k * 300
                evs.append(x("cudaLaunchKernel", "cuda_runtime", ts, 5, correlation=s * 100 + k))
                evs.append(
                    x(
                        "sm90_gemm_kernel_with_a_long_name",
                        "kernel",
                        ts + 50,
                        100,
                        tid=7,
                        pid=0,
                        correlation=s * 100 + k,
                        stream=7,
                        device=0,
                        grid=[1, 2, 3],
                        block=[128, 1, 1],
                    )
                )
            evs.append(x("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "kernel", t0 + 8000, 500, tid=20, pid=0))
            for e in evs:
                f.write(("," if n else "") + json.dumps(e))
                n += 1
        f.write("]}")
    return n


def write_trace(path: str, trace: dict) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt") as f:
        json.dump(trace, f)
    return path


def write_capture(
    run: str, cid: str, roles: dict[int, str], steps: tuple[int, int] = (100, 102), slow_us: float = 0.0
) -> None:
    """A capture as online detection leaves it in ``run``: its manifest and a :func:`gpu_trace` of each rank
    (3 steps; ``slow_us``: the forward gemm kernel that much longer)."""
    d = os.path.join(run, "captures", cid)
    os.makedirs(d)
    for r in roles:
        write_trace(os.path.join(d, f"rank-{r}.json.gz"), gpu_trace(r, slow_us=slow_us))
    manifest = {
        "id": cid,
        "ranks": list(roles),
        "roles": {str(r): v for r, v in roles.items()},
        "steps": list(steps),
        "reason": "baseline" if "baseline" in roles.values() else "finding",
    }
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(manifest, f)

"""Code run inside spawned gloo ranks by the multi-rank tests (one function per case).

Each case initializes a real process group on 127.0.0.1, records with telemetry into a run
directory, and leaves the checking to the test, which reads the run store.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import telemetry

N = 1000  # float32 elements per rank in most cases: 4,000 bytes


def _setup(rank: int, world: int, port: int, run_dir: str, **kw) -> None:
    os.environ.update(
        {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(world)}
    )
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=timedelta(seconds=60)
    )
    telemetry.init(run_dir=run_dir, job="coll", strict=True, **{"sinks": ["store"], **kw})


def _teardown() -> None:
    telemetry.shutdown()
    dist.barrier()
    dist.destroy_process_group()


def collectives(rank: int, world: int, port: int, run_dir: str) -> None:
    """One step per case; the order here is the order the test expects."""
    _setup(rank, world, port, run_dir)
    t = lambda n=N: torch.ones(n)  # noqa: E731 - a one-line tensor maker the cases read as t()
    peer_send, peer_recv = (rank + 1) % world, (rank - 1) % world
    cases = [
        lambda: dist.all_reduce(t()),
        lambda: dist.all_gather([t() for _ in range(world)], t()),
        lambda: dist.all_gather_into_tensor(t(N * world), t()),
        lambda: dist.reduce_scatter_tensor(t(), t(N * world)),
        lambda: dist.reduce(t(), dst=0),
        lambda: dist.broadcast(t(), src=0),
        lambda: dist.all_to_all_single(t(N * world), t(N * world)),
        lambda: dist.barrier(),
        lambda: dist.all_reduce(t(), async_op=True).wait(),
        lambda: dist.all_gather_into_tensor(t(N * world), t(), async_op=True).wait(),
        lambda: dist.broadcast(t(), src=1, async_op=True).wait(),
        lambda: [
            w.wait()
            for w in dist.batch_isend_irecv(
                [dist.P2POp(dist.isend, t(), peer_send), dist.P2POp(dist.irecv, t(), peer_recv)]
            )
        ],
        lambda: _send_recv(rank, world, t),
        lambda: _isend_irecv(rank, world, t),
        lambda: _late_wait(t),
    ]
    for case in cases:
        with telemetry.step():
            with telemetry.phase("comm_case"):
                case()
    _teardown()


def _send_recv(rank: int, world: int, t) -> None:
    if rank % 2 == 0:
        dist.send(t(), dst=rank + 1)
    else:
        dist.recv(t(), src=rank - 1)


def _isend_irecv(rank: int, world: int, t) -> None:
    w = dist.isend(t(), dst=rank + 1) if rank % 2 == 0 else dist.irecv(t(), src=rank - 1)
    w.wait()


def _late_wait(t) -> None:
    """The op completes before anyone waits: it is still recorded (from its future), once."""
    work = dist.all_reduce(t(), async_op=True)
    deadline = time.monotonic() + 10
    while not work.is_completed() and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(0.05)
    work.wait()


def straggler_timing(rank: int, world: int, port: int, run_dir: str) -> None:
    """Rank 1 computes 50 ms longer before each all_reduce: its peers must wait ~50 ms."""
    _setup(rank, world, port, run_dir)
    for _ in range(5):
        with telemetry.step():
            with telemetry.phase("forward"):
                time.sleep(0.05 if rank == 1 else 0.0)
            with telemetry.phase("sync"):
                dist.all_reduce(torch.ones(10))
    _teardown()


def ddp(rank: int, world: int, port: int, run_dir: str) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    _setup(rank, world, port, run_dir)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
    ddp_model = DDP(model, bucket_cap_mb=0.25)
    telemetry.instrument_ddp(ddp_model)
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.01)
    for _ in range(3):
        with telemetry.step():
            with telemetry.phase("forward"):
                loss = ddp_model(torch.randn(16, 256)).square().mean()
            with telemetry.phase("backward"):
                loss.backward()
            with telemetry.phase("optimizer"):
                opt.step()
                opt.zero_grad()
    _teardown()


def fsdp(rank: int, world: int, port: int, run_dir: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    _setup(rank, world, port, run_dir)
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(2):
        with telemetry.step():
            with telemetry.phase("forward"):
                loss = model(torch.randn(8, 64)).square().mean()
            with telemetry.phase("backward"):
                loss.backward()
            with telemetry.phase("optimizer"):
                opt.step()
                opt.zero_grad()
    _teardown()


def counted(rank: int, world: int, port: int, run_dir: str) -> None:
    """Count the process group's own all_reduce calls beneath telemetry: none may be added."""
    import torch.distributed.distributed_c10d as c10d

    calls = []
    real = c10d.all_reduce

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    dist.all_reduce = c10d.all_reduce = counting
    _setup(rank, world, port, run_dir)
    for _ in range(7):
        with telemetry.step():
            dist.all_reduce(torch.ones(4))
    telemetry.shutdown()
    with open(os.path.join(run_dir, f"calls-{rank}.txt"), "w") as f:
        f.write(str(len(calls)))
    dist.barrier()
    dist.destroy_process_group()


def online(rank: int, world: int, port: int, run_dir: str, prom_port: int) -> None:
    """Rank 2 computes 30 ms longer in forward; rank 0 must say so while the job still runs."""
    import json
    import urllib.request

    _setup(
        rank,
        world,
        port,
        run_dir,
        online_every=5,
        online_interval_s=0.2,
        sinks=["store", "prometheus"],
        prometheus_port=prom_port,
        flush_interval_s=0.1,
    )
    for _ in range(120):
        with telemetry.step():
            with telemetry.phase("forward"):
                time.sleep(0.035 if rank == 2 else 0.005)
            with telemetry.phase("backward"):
                time.sleep(0.005)
                dist.all_reduce(torch.ones(100))
    if rank == 0:
        deadline = time.monotonic() + 30
        path = os.path.join(run_dir, "findings.jsonl")
        while time.monotonic() < deadline and not os.path.exists(path):
            time.sleep(0.2)
        time.sleep(0.5)
        text = urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/metrics", timeout=5).read().decode()
        scores = {
            line.split('scored_rank="')[1].split('"')[0]: float(line.split()[-1])
            for line in text.splitlines()
            if line.startswith("train_straggler_score{")
        }
        with open(os.path.join(run_dir, "scores.json"), "w") as f:
            json.dump({"scores": scores, "stats": telemetry.stats()}, f, default=str)
    dist.barrier()
    _teardown()


def checkpoints(rank: int, world: int, port: int, run_dir: str) -> None:
    """A torch.distributed.checkpoint save in step 1, an async save between steps 2 and 3 (its upload
    waited for in step 3), a load in step 4; each rank holds its own tensors of different sizes (rank
    r: (r + 1) x 64 KiB), so each rank's bytes differ. Checkpoints under RUN_DIR/ckpt-*."""
    _setup(rank, world, port, run_dir)
    sd = {f"w{rank}": torch.full(((rank + 1) * 16384,), float(rank)), "shared": torch.ones(256)}
    for i in range(6):
        with telemetry.step():
            with telemetry.phase("forward"):
                torch.ones(64, 64) @ torch.ones(64, 64)
            if i == 1:
                import torch.distributed.checkpoint as dcp

                dcp.save(sd, checkpoint_id=os.path.join(run_dir, "ckpt-sync"))
            if i == 3:
                fut.result()  # noqa: F821 - the async save made between steps 2 and 3
            if i == 4:
                back = {f"w{rank}": torch.zeros((rank + 1) * 16384), "shared": torch.zeros(256)}
                dcp.load(back, checkpoint_id=os.path.join(run_dir, "ckpt-sync"))
                assert torch.equal(back[f"w{rank}"], sd[f"w{rank}"])
        if i == 2:
            fut = dcp.async_save(sd, checkpoint_id=os.path.join(run_dir, "ckpt-async"))
            fut = getattr(fut, "upload_completion", fut)
    _teardown()


def slow_checkpoints(rank: int, world: int, port: int, run_dir: str, slow_rank: int) -> None:
    """Three DCP saves (steps 1, 3, 5); ``slow_rank``'s storage is throttled: its writer takes 0.4 s more
    per write, as a slow disk would."""
    import torch.distributed.checkpoint as dcp

    class ThrottledWriter(dcp.FileSystemWriter):
        def write_data(self, plan, planner):
            time.sleep(0.4)  # the throttled disk: this rank's writes take longer
            return super().write_data(plan, planner)

    _setup(rank, world, port, run_dir)
    sd = {f"w{rank}": torch.full((65536,), float(rank))}
    for i in range(8):
        with telemetry.step():
            with telemetry.phase("forward"):
                torch.ones(64, 64) @ torch.ones(64, 64)
            if i in (1, 3, 5):
                path = os.path.join(run_dir, f"ckpt-{i}")
                writer = ThrottledWriter(path) if rank == slow_rank else dcp.FileSystemWriter(path)
                dcp.save(sd, storage_writer=writer)
    _teardown()


class FileItems(torch.utils.data.Dataset):
    """Items of ``ITEM`` bytes read from a file past the page cache (the whole file dropped from the cache
    before each read: every read is a storage read); ``bytes_per_s`` > 0: reads throttled to that rate,
    as a slow disk or mount would."""

    ITEM = 64 * 1024

    def __init__(self, path: str, n: int, bytes_per_s: float = 0.0) -> None:
        with open(path, "wb") as f:
            f.write(os.urandom(self.ITEM * n))
            f.flush()
            os.fsync(f.fileno())  # clean pages: the cache may drop them
        self.path, self.n, self.bytes_per_s = path, n, bytes_per_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        t0 = time.perf_counter()
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            raw = os.pread(fd, self.ITEM, i * self.ITEM)
        finally:
            os.close(fd)
        if self.bytes_per_s > 0:
            time.sleep(max(0.0, len(raw) / self.bytes_per_s - (time.perf_counter() - t0)))
        return torch.frombuffer(bytearray(raw[:64]), dtype=torch.uint8).float()


def throttled_input(rank: int, world: int, port: int, run_dir: str, slow_rank: int, workers: int = 1) -> None:
    """60 steps, each on a batch of 4 items (256 KiB) from a DataLoader with ``workers`` workers reading a
    file past the page cache; ``slow_rank``'s reads are throttled to 2 MB/s (its peers read as fast as the
    disk). With 2 workers that start together the throttled rank's batches come in pairs, the second
    already waiting (readiness 0.5); started apart, none waits (0): how far apart is the host's doing."""
    _setup(rank, world, port, run_dir, device_interval_s=0.2)
    path = os.path.join(run_dir, f"items-{rank}.bin")
    os.makedirs(run_dir, exist_ok=True)
    data = FileItems(path, 240, bytes_per_s=2e6 if rank == slow_rank else 0.0)
    loader = torch.utils.data.DataLoader(telemetry.watch_dataset(data), batch_size=4, num_workers=workers)
    for batch in telemetry.watch(loader):
        with telemetry.step(samples=len(batch)):
            with telemetry.phase("forward"):
                for _ in range(20):
                    torch.ones(96, 96) @ torch.ones(96, 96)
            with telemetry.phase("backward"):
                dist.all_reduce(batch.sum().reshape(1))
    _teardown()


def mesh_calls(rank: int, world: int, port: int, run_dir: str) -> None:
    """A 2x2 (dp, tp) mesh of 4 ranks: each step an all-reduce in the rank's tp group, one in its dp
    group, an async one in the world, and a functional (DTensor's) one in the tp group; rank 3 makes one
    more tp all-reduce at step 0 with its tp peer (rank 2), so the two tp groups' counts part there; from
    step 2 rank 0 sends rank 1 a tensor in the world group, which ranks 2 and 3 take no part in."""
    import torch.distributed._functional_collectives as funcol  # its functions looked up after init wraps them
    from torch.distributed.device_mesh import init_device_mesh

    _setup(rank, world, port, run_dir)
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    tp, dp = mesh.get_group("tp"), mesh.get_group("dp")
    for i in range(4):
        with telemetry.step():
            with telemetry.phase("calls"):
                dist.all_reduce(torch.ones(N), group=tp)
                if i == 0 and rank in (2, 3):
                    dist.all_reduce(torch.ones(N), group=tp)
                dist.all_reduce(torch.ones(N), group=dp)
                dist.all_reduce(torch.ones(N), async_op=True).wait()
                funcol.all_reduce(torch.ones(N), "sum", (mesh, 1)).wait()
                if i >= 2 and rank in (0, 1):  # two sends from rank 0 to rank 1 in the world, the others idle
                    if rank == 0:
                        dist.send(torch.ones(N), 1)
                    else:
                        dist.recv(torch.ones(N), 0)
    _teardown()

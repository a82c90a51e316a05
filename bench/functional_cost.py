"""What timing a functional collective costs per call, beside the Python-API wrapper's (issue 30): in
one run, interleaved, on a 1-rank gloo group with a real DeviceMesh whose one dimension is named
``tp``:

- the Python-API wrapper (telemetry.hooks.collectives) around a no-op ``all_reduce``, bare against
  wrapped, as bench/overhead.py measures it;
- the functional wrappers (telemetry.hooks.functional) around a no-op ``funcol.all_reduce`` that
  returns an ``AsyncCollectiveTensor``-shaped result and a no-op ``wait_tensor``: issue and wait,
  bare against wrapped, the group given as ``(mesh, 0)`` as DTensor gives it.

No-ops, so that the figure is the wrappers' own cost, not gloo's. Median of 9 rounds.

    python bench/functional_cost.py [--out bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from overhead import _collective_cost, ns_per_call  # noqa: E402 - after the sys.path set-up above
from results import update_section  # noqa: E402 - after the sys.path set-up above

from telemetry.recorder.wall import Recorder  # noqa: E402 - after the sys.path set-up above


class AsyncCollectiveTensor:  # the result's shape as the wrapper sees it (its class name, .elem)
    __slots__ = ("elem",)

    def __init__(self, elem):
        self.elem = elem


def functional_cost(torch, mesh, repeats: int = 9, n: int = 20_000) -> float:
    from telemetry.hooks.functional import _wrap, _wrap_wait
    from telemetry.recorder import current as active

    t = torch.ones(1000)

    def issue(self, reduceOp, group, tag=""):
        return AsyncCollectiveTensor(t)

    def wait(tensor):
        return tensor

    w_issue, w_wait = _wrap("all_reduce", issue), _wrap_wait(wait)
    rec = Recorder(1 << 22)
    prev = active.active()
    active.set_active(rec)
    group = (mesh, 0)

    def bare(k):
        for _ in range(k):
            wait(issue(t, "sum", group).elem)

    def wrapped(k):
        for _ in range(k):
            w_wait(w_issue(t, "sum", group).elem)

    try:
        b, w = [], []
        for _ in range(repeats):
            b.append(ns_per_call(bare, rec, n=1000, reps=n // 1000))
            w.append(ns_per_call(wrapped, rec, n=1000, reps=n // 1000))
        assert rec.drain(), "the wrapped calls emitted no event"
    finally:
        active.set_active(prev)
    return statistics.median(w) - statistics.median(b)


def dispatch_mode_cost(torch, repeats: int = 9) -> tuple[float, int]:
    """The alternative for collectives out of Python's reach: a TorchDispatchMode that sees every op
    (and would pick out the _c10d_functional ones). Its tax on every op of a model, in ns per op: a
    small MLP's forward and backward with a do-nothing mode against without, and the ops it saw."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.ops += 1
            return func(*args, **(kwargs or {}))

    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(8)])
    x = torch.randn(8, 64)

    def step():
        model(x).sum().backward()

    def timed(mode: bool, n: int = 200) -> float:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            if mode:
                with Count():
                    step()
            else:
                step()
        return (time.perf_counter_ns() - t0) / n

    Count.ops = 0
    with Count():
        step()
    per_step = Count.ops
    bare, mode = [], []
    for _ in range(repeats):
        bare.append(timed(False))
        mode.append(timed(True))
    return (statistics.median(mode) - statistics.median(bare)) / per_step, per_step


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    args = ap.parse_args()
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from tests.helpers.servers import free_port

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("tp",))
        rows = []
        for _ in range(3):  # interleaved: the two wrappers side by side, three times
            rows.append(
                (
                    _collective_cost(dist, torch, 9, 20_000)["collective wrapper (all_reduce)"],
                    functional_cost(torch, mesh),
                )
            )
    finally:
        dist.destroy_process_group()
    c10d = statistics.median(r[0] for r in rows)
    funcol = statistics.median(r[1] for r in rows)
    per_op, ops = dispatch_mode_cost(torch)
    body = f"""Command: `python bench/functional_cost.py` (1-rank gloo group, a DeviceMesh dimension named `tp`;
no-op collectives, so the figures are the wrappers' own; median of 3 interleaved runs of 9 rounds x
20,000 calls each).

| wrapper | ns added per collective |
|---|---|
| Python-API collective (`dist.all_reduce`: one call) | {c10d:.0f} |
| functional collective (`funcol.all_reduce` issue + `wait_tensor`: two calls) | {funcol:.0f} |

The alternative for collectives out of a Python wrapper's reach (inside compiled graphs): a
`TorchDispatchMode` that sees every op, to pick out the `_c10d_functional` ones, taxes every op of
the model, not only collectives: {per_op:.0f} ns per op measured with a do-nothing mode on an 8-layer
MLP's forward and backward ({ops} ops per step): for a model of 10,000 ops per step that is
{per_op * 10_000 / 1e6:.1f} ms per step. Not chosen (a mode also changes what Dynamo compiles); on NCCL the
process group's completion hooks are the way (not built yet: no GPU here).

The functional figure covers two wrapped calls (the issue and the wait) and the group's mesh
dimension lookup; an all-reduce of tensor parallelism on a GPU takes tens of microseconds or more.
"""
    print(body)
    if args.out:
        update_section(args.out, "Functional collectives: the cost per call", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())

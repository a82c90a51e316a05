"""Timing DDP's gradient all-reduce, which runs in C++ and bypasses the Python collectives.

Register the hook once after wrapping the model; it runs DDP's default all-reduce (average over
the group) and times each bucket from issue to completion::

    model = DistributedDataParallel(model)
    telemetry.instrument_ddp(model)       # = model.register_comm_hook(None, telemetry.ddp_comm_hook)

DDP overlaps bucket all-reduces with backward compute, and the training thread blocks only at the
end of backward, waiting for the buckets still in flight. That wait is not visible from Python, so
the hook estimates it as the last bucket's whole duration (when the last bucket is issued, backward
compute is over and nothing else runs); earlier buckets count as overlapped (blocked 0). A rank that
computes slowly issues its last bucket late and waits little, which is what the straggler detector
needs to see.
"""

from __future__ import annotations

from typing import Any

from ..recorder import events as ev
from ..recorder import current as _current
from ..recorder.null import NULL
from .collectives import _allreduce_factor, _group_info


def ddp_comm_hook(state, bucket):  # noqa: ANN001, ANN201 - DDP rejects hooks whose annotations differ
    """DDP communication hook: the default all-reduce, timed. ``state`` is a process group or None."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    rec = _current._active
    if rec is NULL:
        return allreduce_hook(state, bucket)
    buf = bucket.buffer()
    nbytes = buf.numel() * buf.element_size()
    gsize, gname = _group_info(dist, state)
    last = bucket.is_last()
    t0 = rec.now()
    prev = rec.current_collective
    rec.current_collective = ("all_reduce", t0)  # the Python all_reduce inside is this op, not another
    try:
        fut = allreduce_hook(state, bucket)
    finally:
        rec.current_collective = prev
    factor = _allreduce_factor(gsize)

    def done(f: Any) -> Any:
        t1 = rec.now()
        rec.emit((ev.COLLECTIVE, t1, "all_reduce", t0, nbytes, gsize, gname, (t1 - t0) if last else 0, factor))
        return f.value()

    # DDP waits on the future we return: chaining makes our timestamp precede that wait's end, so
    # the bucket is charged to the step (and backward phase) it completed in.
    return fut.then(done)


def instrument_ddp(model: Any, process_group: Any = None) -> Any:
    """Register :func:`ddp_comm_hook` on a DistributedDataParallel model; returns the model."""
    model.register_comm_hook(process_group, ddp_comm_hook)
    return model

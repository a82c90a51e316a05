"""Timing DDP's gradient all-reduce, which runs in C++ and bypasses the Python collectives.

With ``collectives`` on, ``init`` makes every DistributedDataParallel model register :func:`ddp_comm_hook`
(DDP's default all-reduce, timed per bucket) at its first forward unless it has a hook
(:func:`auto_instrument_ddp`; first forward, not construction: DDP takes one hook only, and users
register theirs after wrapping); by hand, :func:`instrument_ddp`. The end-of-backward wait runs in
C++ (the reducer's finalize, an autograd final callback): it is timed from two final callbacks either
side of it (:func:`_time_the_wait`) and counted as the last bucket's blocked time; earlier buckets count
as overlapped (blocked 0), so a rank that computes slowly waits little, as the straggler detector needs.
More: docs/collectives.md, "DDP".
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any, Callable

from ..logonce import LogOnce
from ..recorder import current as _current
from ..recorder import events as ev
from ..recorder.null import NULL
from . import groups
from .collective_ops import allreduce_factor
from .collectives import _group_info

if TYPE_CHECKING:
    import torch
    from torch.distributed import ProcessGroup
    from torch.futures import Future
    from torch.nn.parallel import DistributedDataParallel


# DDP refuses a hook whose bucket or return annotation is not dist.GradBucket or Future[Tensor] itself
# (here annotations are strings): those two stay unannotated.
def ddp_comm_hook(state: ProcessGroup | None, bucket):  # pyright: ignore[reportMissingParameterType] - GradBucket: DDP reads it
    """DDP communication hook: the default all-reduce, timed. ``state`` is a process group or None."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    rec = _current._active
    if rec is NULL:
        return allreduce_hook(state, bucket)  # pyright: ignore[reportArgumentType] - None: the default group, as its body reads it
    buf = bucket.buffer()
    nbytes = buf.numel() * buf.element_size()
    gsize, gname = _group_info(dist, state)
    if bucket.index() == 0:
        rec.waiting_collective = None  # a new backward: a finalize that raised left its wait behind
    gid, counter = groups.instance(dist, state, gname)
    call = (gid, groups.next_seq(counter))  # the bucket's call number in its group
    last = bucket.is_last()
    t0 = rec.now()
    prev = rec.current_collective
    rec.current_collective = ("all_reduce", t0, *call)  # the Python all_reduce inside is this op, not another
    try:
        fut = allreduce_hook(state, bucket)  # pyright: ignore[reportArgumentType] - None: the default group, as its body reads it
    finally:
        rec.current_collective = prev
    factor = allreduce_factor(gsize)
    head = ("all_reduce", t0, nbytes, gsize, gname)
    timed = last and _time_the_wait(rec, head, factor, call)

    def done(f: Future[torch.Tensor]) -> torch.Tensor:
        if not timed:
            t1 = rec.now()
            rec.emit((ev.COLLECTIVE, t1, *head, (t1 - t0) if last else 0, factor, *call))
        return f.value()

    # DDP waits on the future we return: chaining makes our timestamp precede that wait's end, so
    # the bucket is charged to the step (and backward phase) it completed in.
    return fut.then(done)


def _time_the_wait(rec: Any, head: tuple, factor: float, call: tuple[str, int]) -> bool:
    """Time where the training thread waits for DDP's all-reduces: in the reducer's finalize, which
    autograd runs as a final callback once backward's compute is done, and which waits for every
    bucket's all-reduce and copies the results into the grads (C++: no Python call to time).

    Called from the last bucket's hook, before DDP queues its finalize (it does so once this hook has
    returned), so the callback queued here runs first, as backward's compute ends; it queues a second,
    which runs after the finalize. The second emits the last bucket's all-reduce, ending then, with
    the time between the two as its blocked time. False (the bucket's completion is timed instead, as
    the only wait) when autograd does not take a callback: a hook called outside backward."""
    from torch.autograd import Variable

    engine = Variable._execution_engine

    # Both run inside the user's backward(): nothing of ours may raise out of them.
    def computed() -> None:
        ta = rec.now()
        # the heartbeat's: blocked in this bucket's all-reduce (or an earlier one's) until the finalize ends
        rec.waiting_collective = ("all_reduce", ta, *call)

        def waited() -> None:
            rec.waiting_collective = None
            try:
                tb = rec.now()
                rec.emit((ev.COLLECTIVE, tb, *head, tb - ta, factor, *call))
            except Exception:  # noqa: BLE001 - telemetry never breaks the step: this bucket goes unrecorded
                _once("waited", "telemetry: recording DDP's end-of-backward wait failed", exc_info=True)

        try:
            engine.queue_callback(waited)
        except Exception:  # noqa: BLE001 - its wait untimed: the bucket still counted, with blocked 0
            rec.waiting_collective = None
            try:
                rec.emit((ev.COLLECTIVE, rec.now(), *head, 0, factor, *call))
            except Exception:  # noqa: BLE001 - telemetry never breaks the step: this bucket goes unrecorded
                _once("waited", "telemetry: recording DDP's end-of-backward wait failed", exc_info=True)

    try:
        engine.queue_callback(computed)
    except Exception:  # noqa: BLE001 - e.g. "Final callbacks can only be installed during backward pass"
        return False
    return True


def instrument_ddp(
    model: DistributedDataParallel, process_group: ProcessGroup | None = None
) -> DistributedDataParallel:
    """Register :func:`ddp_comm_hook` on a DistributedDataParallel model; returns the model."""
    model.register_comm_hook(process_group, ddp_comm_hook)
    return model


log = logging.getLogger("telemetry")
_once = LogOnce()
_original_forward: Callable | None = None


def auto_instrument_ddp() -> bool:
    """Make DDP models register :func:`ddp_comm_hook` at their first forward unless they have a hook.
    Idempotent; False when torch's DDP is not importable."""
    global _original_forward
    try:
        from torch.nn.parallel import DistributedDataParallel as DDP
    except ImportError:
        return False
    if _original_forward is not None:
        return True
    original = DDP.forward

    @functools.wraps(original)
    def forward(self: DistributedDataParallel, *args: Any, **kwargs: Any) -> Any:
        if "_telemetry_hook_checked" not in self.__dict__ and _current._active is not NULL:
            self.__dict__["_telemetry_hook_checked"] = True  # pyright: ignore[reportIndexIssue] - an instance's __dict__ is a dict
            _hook_unless_hooked(self)
        return original(self, *args, **kwargs)

    DDP.forward = forward
    _original_forward = original
    return True


def undo_auto_instrument_ddp() -> None:
    global _original_forward
    if _original_forward is None:
        return
    from torch.nn.parallel import DistributedDataParallel as DDP

    DDP.forward = _original_forward
    _original_forward = None


def _hook_unless_hooked(model: DistributedDataParallel) -> None:
    hooks = getattr(model, "_comm_hooks", None) or []
    if any(hook is ddp_comm_hook for hook, _ in hooks):
        return
    if hooks:
        name = getattr(hooks[0][0], "__qualname__", repr(hooks[0][0]))
        _once(
            "user-hook",
            "telemetry: this DDP model has its own comm hook (%s); it stays, and its "
            "collectives are timed only where it calls the Python torch.distributed API",
            name,
        )
        return
    try:
        model.register_comm_hook(getattr(model, "process_group", None), ddp_comm_hook)
    except Exception as exc:  # noqa: BLE001 - e.g. a built-in C++ hook is set: DDP takes one hook only
        _once(
            "register",
            "telemetry: could not time this DDP model's gradient all-reduce (%s: %s); its "
            "collectives are timed only where Python code calls torch.distributed",
            type(exc).__name__,
            exc,
        )

"""Timing torch.distributed collectives called through the Python API (:func:`instrument_collectives`).

The public functions of ``torch.distributed`` (and ``distributed_c10d``, where torch's own helpers find
them) become thin wrappers that read the clock around the call and append one event: op, bytes (from
the tensors' shapes and dtypes), group size and label (:mod:`.groups`) and the nccl-tests bus-bandwidth
factor. A collective called inside another is counted once, as the outer one; no collective and no
device synchronization is added; exceptions pass through unchanged. An async op's Work is wrapped
(:class:`_TimedWork`): its duration runs to completion, its blocked time is the caller's ``wait()``.
What is not covered: docs/collectives.md, "What is timed"; DDP: :mod:`.ddp`; functional: :mod:`.functional`.
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from typing import TYPE_CHECKING, Any, Callable

from ..recorder import current as _current
from ..recorder import events as ev
from ..recorder.null import NULL
from . import groups
from .collective_ops import Pending, allreduce_factor, ring_factor, tensor_bytes, tensors_bytes, unit_factor

if TYPE_CHECKING:
    from types import ModuleType

    import torch
    from torch.distributed import ProcessGroup, Work
    from torch.futures import Future

log = logging.getLogger("telemetry")


def _arg(args: tuple, kwargs: dict, i: int, name: str) -> Any:
    if len(args) > i:
        return args[i]
    return kwargs.get(name)


def _p2p_bytes(a: tuple, k: dict) -> int:
    ops = _arg(a, k, 0, "p2p_op_list") or ()
    return sum(tensor_bytes(getattr(op, "tensor", None)) for op in ops)


def _p2p_group(a: tuple, k: dict) -> ProcessGroup | None:
    ops = _arg(a, k, 0, "p2p_op_list") or ()
    return getattr(ops[0], "group", None) if ops else None


# op -> (bytes(args, kwargs), busbw factor(group size), group argument position or None).
# Bytes are the op's total size as nccl-tests counts it: the whole buffer for all_reduce,
# broadcast, reduce; the gathered output / scattered input for all_gather and reduce_scatter.
_SPECS: dict[str, tuple[Callable[[tuple, dict], int], Callable[[int], float], int | None]] = {
    "all_reduce": (lambda a, k: tensor_bytes(_arg(a, k, 0, "tensor")), allreduce_factor, 2),
    "all_gather": (lambda a, k: tensors_bytes(_arg(a, k, 0, "tensor_list")), ring_factor, 2),
    "all_gather_into_tensor": (lambda a, k: tensor_bytes(_arg(a, k, 0, "output_tensor")), ring_factor, 2),
    "all_gather_single": (lambda a, k: tensor_bytes(_arg(a, k, 0, "output_tensor")), ring_factor, 2),
    "_all_gather_base": (lambda a, k: tensor_bytes(_arg(a, k, 0, "output_tensor")), ring_factor, 2),
    "reduce_scatter": (lambda a, k: tensors_bytes(_arg(a, k, 1, "input_list")), ring_factor, 3),
    "reduce_scatter_tensor": (lambda a, k: tensor_bytes(_arg(a, k, 1, "input")), ring_factor, 3),
    "reduce_scatter_single": (lambda a, k: tensor_bytes(_arg(a, k, 1, "input")), ring_factor, 3),
    "_reduce_scatter_base": (lambda a, k: tensor_bytes(_arg(a, k, 1, "input")), ring_factor, 3),
    "reduce": (lambda a, k: tensor_bytes(_arg(a, k, 0, "tensor")), unit_factor, 3),
    "broadcast": (lambda a, k: tensor_bytes(_arg(a, k, 0, "tensor")), unit_factor, 2),
    "all_to_all": (lambda a, k: tensors_bytes(_arg(a, k, 1, "input_tensor_list")), ring_factor, 2),
    "all_to_all_single": (lambda a, k: tensor_bytes(_arg(a, k, 1, "input")), ring_factor, 4),
    "barrier": (lambda a, k: 0, unit_factor, 0),
    "send": (lambda a, k: tensor_bytes(_arg(a, k, 0, "tensor")), unit_factor, 2),
    "recv": (lambda a, k: tensor_bytes(_arg(a, k, 0, "tensor")), unit_factor, 2),
    "isend": (lambda a, k: tensor_bytes(_arg(a, k, 0, "tensor")), unit_factor, 2),
    "irecv": (lambda a, k: tensor_bytes(_arg(a, k, 0, "tensor")), unit_factor, 2),
    "batch_isend_irecv": (_p2p_bytes, unit_factor, None),
}
_ALWAYS_ASYNC = frozenset({"isend", "irecv", "batch_isend_irecv"})
# point-to-point: numbered per (sender, receiver) pair, not in the group's count (two ranks make them); a
# batch of them (batch_isend_irecv, several peers at once) is not numbered (-1)
_P2P = {"send": True, "isend": True, "recv": False, "irecv": False, "batch_isend_irecv": None}


def _p2p_seq(dist: ModuleType, op: str, gid: str, args: tuple, kwargs: dict) -> int:
    sends = _P2P[op]
    peer = _arg(args, kwargs, 1, "dst" if sends else "src")
    if sends is None or not isinstance(peer, int):  # a batch, or a recv from any source
        return -1
    me = dist.get_rank()
    return groups.p2p_seq(gid, me, peer) if sends else groups.p2p_seq(gid, peer, me)


# Names whose public op name differs (legacy aliases report as their modern names).
_OP_NAME = {
    "all_gather_single": "all_gather_into_tensor",
    "_all_gather_base": "all_gather_into_tensor",
    "reduce_scatter_single": "reduce_scatter_tensor",
    "_reduce_scatter_base": "reduce_scatter_tensor",
}

_originals: dict[tuple[str, str], Callable] = {}
_group_info = groups.group_info  # (size, label): the label names the group's parallel dimension


def forget_groups() -> None:
    """Drop what is known of process groups."""
    groups.forget()


class _TimedWork:
    """Wraps an async Work: completion (its future's callback) ends the op; the time the caller
    spends in ``wait()`` is its blocked time. Everything else is delegated to the Work.

    If the op completes while the caller waits, the wait reports it (with its blocked time); if
    it completes with nobody waiting, the callback reports it (blocked 0)."""

    __slots__ = ("_work", "_pending", "_finished", "_waiting", "_t_done")

    def __init__(self, work: Work, pending: Pending) -> None:
        self._work = work
        self._pending = pending
        self._finished = False
        self._waiting = False
        self._t_done = 0
        try:
            work.get_future().add_done_callback(self._on_done)
        except Exception:  # noqa: BLE001 - no future on this backend: wait() alone times it
            pass

    def _on_done(self, _fut: Future[list[torch.Tensor]]) -> None:
        t = time.perf_counter_ns()
        with self._pending.lock:
            if self._finished:
                return
            if self._waiting:
                self._t_done = t  # the waiter will report, with its blocked time
                return
            self._finished = True
        self._pending.finish(t)

    def wait(self, *args: Any, **kwargs: Any) -> bool:
        with self._pending.lock:
            self._waiting = True
        mark = _current._active.mark
        e0 = mark() if mark is not None else None
        t_w = time.perf_counter_ns()
        try:
            return self._work.wait(*args, **kwargs)
        finally:
            t1 = time.perf_counter_ns()
            if e0 is not None and mark is not None:  # (e0: mark was there)
                # on CUDA, wait() makes the current stream wait for the op: time that on the GPU
                self._pending.events = (e0, mark())
            with self._pending.lock:
                self._waiting = False
                report = not self._finished
                self._finished = True
                t_end = self._t_done or t1
            if report:
                self._pending.finish(t_end, t1 - t_w)

    def is_completed(self) -> bool:
        return self._work.is_completed()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


def _wrap(dist: ModuleType, op: str, fn: Callable) -> Callable:
    nbytes_of, factor_of, group_pos = _SPECS[op]
    always_async = op in _ALWAYS_ASYNC
    name = _OP_NAME.get(op, op)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rec = _current._active
        if rec.current_collective is not None or rec is NULL:
            return fn(*args, **kwargs)  # nested inside another collective, or telemetry is off
        try:
            nbytes = nbytes_of(args, kwargs)
            if group_pos is None:
                group = _p2p_group(args, kwargs)
            else:
                group = args[group_pos] if len(args) > group_pos else kwargs.get("group")
            gsize, gname = _group_info(dist, group)
            gid, counter = groups.instance(dist, group, gname)
            seq = _p2p_seq(dist, name, gid, args, kwargs) if name in _P2P else groups.next_seq(counter)
        except Exception:  # noqa: BLE001 - odd arguments: let torch report them
            return fn(*args, **kwargs)
        is_async = always_async or bool(kwargs.get("async_op"))
        mark = None if is_async else rec.mark
        e0 = mark() if mark is not None else None
        t0 = rec.now()
        rec.current_collective = (name, t0, gid, seq)
        try:
            out = fn(*args, **kwargs)
        finally:
            rec.current_collective = None
        factor = factor_of(gsize)
        if is_async and out is not None:
            works = out if isinstance(out, list) else [out]
            pending = Pending(name, t0, nbytes, gsize, gname, factor, len(works), gid, seq)
            wrapped = [_TimedWork(w, pending) for w in works]
            return wrapped if isinstance(out, list) else wrapped[0]
        t1 = rec.now()
        if e0 is None or mark is None:  # (e0: mark was there)
            rec.emit((ev.COLLECTIVE, t1, name, t0, nbytes, gsize, gname, t1 - t0, factor, gid, seq))
        else:
            rec.emit((ev.COLLECTIVE_DEV, t1, name, t0, nbytes, gsize, gname, t1 - t0, factor, gid, seq, e0, mark()))
        return out

    wrapper.__telemetry_original__ = fn  # pyright: ignore[reportAttributeAccessIssue] - a function takes any attribute
    return wrapper


def instrument_collectives() -> bool:
    """Wrap the torch.distributed collectives, the functional collectives (DTensor's) and the
    DeviceMesh constructor (that names its groups); idempotent. Returns False if torch is absent."""
    try:
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d
    except ImportError:
        return False
    if not dist.is_available():
        return False
    groups.known.clear()  # a session's own: the store keeps the instances its collectives are called in
    # One wrapper per original function, installed in both namespaces: torch compares them by
    # identity (P2POp accepts only ``op in [isend, irecv]``, its module's own names).
    wrappers: dict[int, Callable] = {}
    for module in (c10d, dist):
        for op in _SPECS:
            fn = getattr(module, op, None)
            if fn is None or hasattr(fn, "__telemetry_original__"):
                continue
            _originals[(module.__name__, op)] = fn
            wrapper = wrappers.get(id(fn))
            if wrapper is None:
                wrapper = wrappers[id(fn)] = _wrap(dist, op, fn)
            setattr(module, op, wrapper)
    groups.watch_meshes()
    from .functional import instrument_functional

    instrument_functional()
    return True


def uninstrument_collectives() -> None:
    """Put the original functions back."""
    from .functional import uninstrument_functional

    uninstrument_functional()
    groups.unwatch_meshes()
    for (mod_name, op), fn in list(_originals.items()):
        module = sys.modules.get(mod_name)
        if module is not None:
            setattr(module, op, fn)
    _originals.clear()
    forget_groups()


def is_instrumented() -> bool:
    return bool(_originals)

"""Timing functional collectives (``torch.distributed._functional_collectives``): DTensor's and tensor
parallelism's collectives, FSDP2's when it uses them, and any code that calls them in eager mode.

A functional collective is issued by one call (``funcol.all_reduce(t, "sum", (mesh, dim))``) and
returns at once an ``AsyncCollectiveTensor``; the caller blocks only when the result is first used,
in ``wait_tensor``. The module's public functions and its ``wait_tensor`` are replaced (DTensor looks
them up on the module at each call, so this reaches it) by wrappers that:

- at issue: read the clock, compute the bytes (as nccl-tests counts them) and the group's size and
  label (its mesh dimension's name: the group argument ``(mesh, dim)`` names it; :mod:`.groups`),
  and remember the op under its output's storage address;
- at ``wait_tensor`` of that output (or a view of it): time the wait and emit one collective event:
  issue to the wait's end (an upper bound of the op's own time: completion is not observable from
  Python without a device synchronization), blocked = the issue call plus the wait (what the
  training thread waited).

No device synchronization, no extra collective. Not reached, and so not timed: collectives inside
compiled graphs (``torch.compile`` calls the ``_c10d_functional`` ops from generated code; while
Dynamo traces, these wrappers step aside and add nothing to the graph), ``torch.ops._dtensor`` ops
(DTensor's shard-to-shard all-to-all), and the ops' autograd backward issued by torch itself (the
``_autograd`` variants' gradients). A result never waited on is forgotten after
:data:`MAX_IN_FLIGHT` later ops (counted in ``unwaited``).
"""

from __future__ import annotations

import functools
import sys
import threading
import time
import weakref
from typing import Any, Callable

from ..recorder import current as _current
from ..recorder.null import NULL
from . import groups
from .collectives import _allreduce_factor, _nbytes, _one, _Pending, _ring, _sum_bytes

MAX_IN_FLIGHT = 4096

# name -> (op as reported, bytes(args, kwargs, group size), busbw factor(group size), group position)
_SPECS: dict[str, tuple[str, Callable[[tuple, dict, int], int], Callable[[int], float], int]] = {
    "all_reduce": ("all_reduce", lambda a, k, n: _nbytes(_first(a, k)), _allreduce_factor, 2),
    "all_reduce_coalesced": ("all_reduce", lambda a, k, n: _sum_bytes(_first(a, k)), _allreduce_factor, 2),
    "all_gather_single": ("all_gather_into_tensor", lambda a, k, n: n * _nbytes(_first(a, k)), _ring, 2),
    "all_gather_single_autograd": ("all_gather_into_tensor", lambda a, k, n: n * _nbytes(_first(a, k)), _ring, 2),
    "all_gather_tensor": ("all_gather_into_tensor", lambda a, k, n: n * _nbytes(_first(a, k)), _ring, 2),
    "all_gather_tensor_autograd": ("all_gather_into_tensor", lambda a, k, n: n * _nbytes(_first(a, k)), _ring, 2),
    "all_gather_into_tensor_coalesced": (
        "all_gather_into_tensor",
        lambda a, k, n: n * _sum_bytes(_first(a, k)),
        _ring,
        1,
    ),
    "reduce_scatter_single": ("reduce_scatter_tensor", lambda a, k, n: _nbytes(_first(a, k)), _ring, 3),
    "reduce_scatter_single_autograd": ("reduce_scatter_tensor", lambda a, k, n: _nbytes(_first(a, k)), _ring, 3),
    "reduce_scatter_tensor": ("reduce_scatter_tensor", lambda a, k, n: _nbytes(_first(a, k)), _ring, 3),
    "reduce_scatter_tensor_autograd": ("reduce_scatter_tensor", lambda a, k, n: _nbytes(_first(a, k)), _ring, 3),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter_tensor", lambda a, k, n: _sum_bytes(_first(a, k)), _ring, 3),
    "all_to_all_single": ("all_to_all_single", lambda a, k, n: _nbytes(_first(a, k)), _ring, 3),
    "all_to_all_single_autograd": ("all_to_all_single", lambda a, k, n: _nbytes(_first(a, k)), _ring, 3),
    "broadcast": ("broadcast", lambda a, k, n: _nbytes(_first(a, k)), _one, 2),
    "permute_tensor": ("permute_tensor", lambda a, k, n: _nbytes(_first(a, k)), _one, 2),
}

_originals: dict[str, Callable] = {}
# the storage address of an issued op's output -> (a weak reference to that output, its _Pending)
_in_flight: dict[int, tuple[weakref.ref, _Pending]] = {}
_local = threading.local()  # .issuing: inside one of our wrappers' issue calls (nested ones step aside)
stats = {"unwaited": 0}


def _first(a: tuple, k: dict) -> Any:
    return a[0] if a else k.get("self", k.get("inputs"))


def _group_of(a: tuple, k: dict, pos: int) -> Any:
    return a[pos] if len(a) > pos else k.get("group")


def _storage_key(t: Any) -> int | None:
    try:
        return t.untyped_storage().data_ptr() or None
    except Exception:  # noqa: BLE001 - not a plain tensor (a subclass without storage)
        return None


def _unwrap(t: Any) -> Any:
    return getattr(t, "elem", t)  # AsyncCollectiveTensor -> the op's output


def _group_info(group: Any) -> tuple[int, str]:
    """(size, label) of a functional collective's group argument: (mesh, dim), a 1-D mesh, a
    process group, a group's name, or a list of ranks."""
    import torch.distributed as dist

    if isinstance(group, tuple) and len(group) == 2 and hasattr(group[0], "mesh_dim_names"):
        info = groups.mesh_dim_info(group[0], int(group[1]))
        if info is not None:
            return info
        group = group[0].get_group(int(group[1]))
    elif hasattr(group, "mesh_dim_names") and hasattr(group, "get_group"):
        info = groups.mesh_dim_info(group, 0) if group.ndim == 1 else None
        if info is not None:
            return info
        group = group.get_group(0) if group.ndim == 1 else None
    elif isinstance(group, str):
        group = dist.distributed_c10d._resolve_process_group(group)
    elif isinstance(group, list):
        n = len(group)
        return n, groups.WORLD if n == dist.get_world_size() else groups.of_ranks(group)
    return groups.group_info(dist, group)


def _wrap(name: str, fn: Callable) -> Callable:
    op, nbytes_of, factor_of, group_pos = _SPECS[name]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rec = _current._active
        if rec is NULL or getattr(_local, "issuing", False) or _tracing():
            return fn(*args, **kwargs)
        try:
            gsize, gname = _group_info(_group_of(args, kwargs, group_pos))
            nbytes = nbytes_of(args, kwargs, gsize)
        except Exception:  # noqa: BLE001 - odd arguments: let torch report them
            return fn(*args, **kwargs)
        t0 = rec.now()
        _local.issuing = True
        try:
            out = fn(*args, **kwargs)
        finally:
            _local.issuing = False
        t1 = rec.now()
        outs = out if isinstance(out, list) else [out]
        pending = _Pending(op, t0, nbytes, gsize, gname, factor_of(gsize), len(outs))
        pending.blocked_ns = t1 - t0  # the issue call: the training thread was in it
        for o in outs:
            elem = _unwrap(o)
            key = _storage_key(elem)
            if key is None or type(o).__name__ != "AsyncCollectiveTensor":
                pending.finish(t1)  # waited inside the call (a traced or synchronous path): done
                continue
            _in_flight[key] = (weakref.ref(elem), pending)
            if len(_in_flight) > MAX_IN_FLIGHT:
                _in_flight.pop(next(iter(_in_flight)))
                stats["unwaited"] += 1
        return out

    wrapper.__telemetry_original__ = fn  # type: ignore[attr-defined]
    return wrapper


def _wrap_wait(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def wait_tensor(tensor: Any) -> Any:
        if not _in_flight:
            return fn(tensor)
        key = _storage_key(tensor)
        entry = _in_flight.pop(key, None) if key is not None else None
        if entry is None or entry[0]() is None:
            return fn(tensor)  # not an op we issued (or its output is gone and the address reused)
        pending = entry[1]
        rec = _current._active
        prev = rec.current_collective
        rec.current_collective = (pending.op, pending.t0)
        t0 = time.perf_counter_ns()
        try:
            return fn(tensor)
        finally:
            rec.current_collective = prev
            t1 = time.perf_counter_ns()
            pending.finish(t1, t1 - t0)

    wait_tensor.__telemetry_original__ = fn  # type: ignore[attr-defined]
    return wait_tensor


def _tracing() -> bool:
    """Dynamo is tracing (the wrappers must add nothing to a graph), or a fake or proxy mode is on."""
    funcol = sys.modules.get("torch.distributed._functional_collectives")
    try:
        return bool(funcol is not None and funcol._are_we_tracing())
    except Exception:  # noqa: BLE001 - a torch without it: not tracing as far as we can tell
        return False


def instrument_functional() -> bool:
    """Wrap the functional collectives and their wait; idempotent. False when torch has none."""
    try:
        import torch.distributed._functional_collectives as funcol
    except Exception:  # noqa: BLE001 - no functional collectives in this torch (or it failed to import)
        return False
    for name in _SPECS:
        fn = getattr(funcol, name, None)
        if fn is None or hasattr(fn, "__telemetry_original__"):
            continue
        _originals[name] = fn
        setattr(funcol, name, _wrap(name, fn))
    wait = getattr(funcol, "wait_tensor", None)
    if wait is not None and not hasattr(wait, "__telemetry_original__"):
        _originals["wait_tensor"] = wait
        funcol.wait_tensor = _wrap_wait(wait)
    return True


def uninstrument_functional() -> None:
    funcol = sys.modules.get("torch.distributed._functional_collectives")
    if funcol is not None:
        for name, fn in _originals.items():
            setattr(funcol, name, fn)
    _originals.clear()
    _in_flight.clear()

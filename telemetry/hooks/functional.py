"""Timing functional collectives (``torch.distributed._functional_collectives``): DTensor's and tensor
parallelism's collectives, FSDP2's when it uses them, and any code that calls them in eager mode
(:func:`instrument_functional`).

The module's public functions and its ``wait_tensor`` are replaced (DTensor looks them up on the module
at each call): at issue a wrapper reads the clock, the bytes and the group (:mod:`.groups`) and
remembers the op under its output's storage; at ``wait_tensor`` of that output one collective event is
emitted, issue to the wait's end (an upper bound: completion is not observable without a device
synchronization), blocked = the issue call plus the wait. No device synchronization, no extra
collective. Not reached: compiled graphs, ``torch.ops._dtensor`` ops, and the ``_autograd`` variants'
gradients issued by torch itself. More: docs/collectives.md, "Functional collectives".
"""

from __future__ import annotations

import functools
import sys
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, cast

from ..recorder import current as _current
from ..recorder import events as ev
from ..recorder.null import NULL
from . import groups
from .collective_ops import Pending, allreduce_factor, ring_factor, tensor_bytes, tensors_bytes, unit_factor

if TYPE_CHECKING:
    import torch
    from torch.distributed import ProcessGroup
    from torch.distributed._functional_collectives import RANK_TYPES
    from torch.distributed.distributed_c10d import GroupName

MAX_IN_FLIGHT = 4096

# name -> (op as reported, bytes(args, kwargs, group size), busbw factor(group size), group position)
_SPECS: dict[str, tuple[str, Callable[[tuple, dict, int], int], Callable[[int], float], int]] = {
    "all_reduce": ("all_reduce", lambda a, k, n: tensor_bytes(_first(a, k)), allreduce_factor, 2),
    "all_reduce_coalesced": ("all_reduce", lambda a, k, n: tensors_bytes(_first(a, k)), allreduce_factor, 2),
    "all_gather_single": ("all_gather_into_tensor", lambda a, k, n: n * tensor_bytes(_first(a, k)), ring_factor, 2),
    "all_gather_single_autograd": (
        "all_gather_into_tensor",
        lambda a, k, n: n * tensor_bytes(_first(a, k)),
        ring_factor,
        2,
    ),
    "all_gather_tensor": ("all_gather_into_tensor", lambda a, k, n: n * tensor_bytes(_first(a, k)), ring_factor, 2),
    "all_gather_tensor_autograd": (
        "all_gather_into_tensor",
        lambda a, k, n: n * tensor_bytes(_first(a, k)),
        ring_factor,
        2,
    ),
    "all_gather_into_tensor_coalesced": (
        "all_gather_into_tensor",
        lambda a, k, n: n * tensors_bytes(_first(a, k)),
        ring_factor,
        1,
    ),
    "reduce_scatter_single": ("reduce_scatter_tensor", lambda a, k, n: tensor_bytes(_first(a, k)), ring_factor, 3),
    "reduce_scatter_single_autograd": (
        "reduce_scatter_tensor",
        lambda a, k, n: tensor_bytes(_first(a, k)),
        ring_factor,
        3,
    ),
    "reduce_scatter_tensor": ("reduce_scatter_tensor", lambda a, k, n: tensor_bytes(_first(a, k)), ring_factor, 3),
    "reduce_scatter_tensor_autograd": (
        "reduce_scatter_tensor",
        lambda a, k, n: tensor_bytes(_first(a, k)),
        ring_factor,
        3,
    ),
    "reduce_scatter_tensor_coalesced": (
        "reduce_scatter_tensor",
        lambda a, k, n: tensors_bytes(_first(a, k)),
        ring_factor,
        3,
    ),
    "all_to_all_single": ("all_to_all_single", lambda a, k, n: tensor_bytes(_first(a, k)), ring_factor, 3),
    "all_to_all_single_autograd": ("all_to_all_single", lambda a, k, n: tensor_bytes(_first(a, k)), ring_factor, 3),
    "broadcast": ("broadcast", lambda a, k, n: tensor_bytes(_first(a, k)), unit_factor, 2),
    "permute_tensor": ("permute_tensor", lambda a, k, n: tensor_bytes(_first(a, k)), unit_factor, 2),
}

_originals: dict[str, Callable] = {}
# An op issued, not yet waited on: its Pending (coalesced), or
# [op, t0, nbytes, gsize, gname, factor, issue_ns, gid, seq]
InFlight = Pending | list[Any]
# the storage address of an issued op's output -> (a weak reference to that output, what it is of)
_in_flight: dict[int, tuple[weakref.ref, InFlight]] = {}
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


# (id(mesh), dim) -> (a weak reference to the mesh, (size, label)): DTensor passes (mesh, dim) on every call
_mesh_cache: dict[tuple[int, int], tuple[weakref.ref, tuple[int, str]]] = {}


def _group_info(group: RANK_TYPES | None) -> tuple[int, str]:
    """(size, label) of a functional collective's group argument: (mesh, dim), a 1-D mesh, a
    process group, a group's name, or a list of ranks."""
    if type(group) is tuple and len(group) == 2:
        entry = _mesh_cache.get((id(group[0]), group[1]))
        if entry is not None and entry[0]() is group[0]:
            return entry[1]
    return _read_group_info(group)


# (id(mesh), dim) -> (a weak reference to the mesh, its dimension's group instance id, that instance's counter):
# DTensor passes (mesh, dim) on every call, and its number is then two lookups away
_mesh_calls: dict[tuple[int, int], tuple[weakref.ref, str, list[int]]] = {}


def _call_of(group: Any, label: str) -> tuple[str, int]:
    """(instance id, the call's number there) of a functional collective's group argument, counted as it
    is issued; ("", -1) when it names no group torch keeps (a list of ranks) or one we do not know."""
    if type(group) is tuple and len(group) == 2:
        entry = _mesh_calls.get((id(group[0]), group[1]))
        if entry is not None and entry[0]() is group[0]:
            return entry[1], groups.next_seq(entry[2])
    try:
        gid, counter = _read_call(group, label)
    except Exception:  # noqa: BLE001 - a group argument as we do not know it: no call number
        return "", -1
    return (gid, groups.next_seq(counter)) if gid else ("", -1)


def _read_call(group: Any, label: str) -> tuple[str, list[int]]:
    import torch.distributed as dist

    arg: Any = group  # told apart by shape, as in _read_group_info
    if type(arg) is tuple and len(arg) == 2 and hasattr(arg[0], "get_group"):
        mesh: Any = arg[0]
        gid, counter = groups.instance(dist, mesh.get_group(int(arg[1])), label)
        try:
            _mesh_calls[(id(mesh), arg[1])] = (weakref.ref(mesh), gid, counter)
        except TypeError:  # not weak-referenceable: read each time
            pass
        return gid, counter
    one: Any = group  # a 1-D mesh?
    if hasattr(one, "mesh_dim_names") and hasattr(one, "get_group"):
        return groups.instance(dist, one.get_group(0), label) if one.ndim == 1 else ("", [0])
    if isinstance(arg, str):
        resolve = dist.distributed_c10d._resolve_process_group  # pyright: ignore[reportPrivateImportUsage]
        return groups.instance(dist, resolve(cast("GroupName", arg)), label)
    if isinstance(arg, list):  # ranks: a group torch keeps no count of
        return "", [0]
    return groups.instance(dist, cast("ProcessGroup | None", arg), label)


def _read_group_info(group: Any) -> tuple[int, str]:  # RANK_TYPES | None, told apart by shape
    import torch.distributed as dist

    pair = group  # (mesh, dim)? (a name of its own: the checks below still see any group)
    if isinstance(pair, tuple) and len(pair) == 2 and hasattr(pair[0], "mesh_dim_names"):
        mesh, dim = pair[0], int(pair[1])
        info = groups.mesh_dim_info(mesh, dim) or groups.group_info(dist, mesh.get_group(dim))
        try:
            _mesh_cache[(id(mesh), pair[1])] = (weakref.ref(mesh), info)
        except TypeError:  # not weak-referenceable: read each time
            pass
        return info
    if hasattr(group, "mesh_dim_names") and hasattr(group, "get_group"):
        return _read_group_info((group, 0)) if group.ndim == 1 else (0, groups.WORLD)
    if isinstance(group, str):
        # torch's own lookup of a group by its name (private: torch has no public one)
        resolve = dist.distributed_c10d._resolve_process_group  # pyright: ignore[reportPrivateImportUsage]
        group = resolve(cast("GroupName", group))
    elif isinstance(group, list):
        n = len(group)
        return n, groups.WORLD if n == dist.get_world_size() else groups.of_ranks(group)
    return groups.group_info(dist, group)


def _wrap(name: str, fn: Callable) -> Callable:
    op, nbytes_of, factor_of, group_pos = _SPECS[name]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rec = _current._active
        if rec is NULL or rec.current_collective is not None or _tracing():
            return fn(*args, **kwargs)  # telemetry off, nested in another collective, or Dynamo tracing
        try:
            garg = _group_of(args, kwargs, group_pos)
            gsize, gname = _group_info(garg)
            gid, seq = _call_of(garg, gname)
            nbytes = nbytes_of(args, kwargs, gsize)
        except Exception:  # noqa: BLE001 - odd arguments: let torch report them
            return fn(*args, **kwargs)
        t0 = rec.now()
        rec.current_collective = (op, t0, gid, seq)
        try:
            out = fn(*args, **kwargs)
        finally:
            rec.current_collective = None
        t1 = rec.now()
        if type(out) is not list:
            elem = getattr(out, "elem", None)  # an AsyncCollectiveTensor's: the op's output
            key = _storage_key(elem) if elem is not None else None
            if key is None:  # waited inside the call (a synchronous path): done
                rec.emit((ev.COLLECTIVE, t1, op, t0, nbytes, gsize, gname, t1 - t0, factor_of(gsize), gid, seq))
            else:
                _remember(key, elem, [op, t0, nbytes, gsize, gname, factor_of(gsize), t1 - t0, gid, seq])
            return out
        pending = Pending(op, t0, nbytes, gsize, gname, factor_of(gsize), len(out), gid, seq)  # coalesced: one op
        pending.blocked_ns = t1 - t0  # the issue call: the training thread was in it
        for o in out:
            elem = getattr(o, "elem", None)
            key = _storage_key(elem) if elem is not None else None
            if key is None:
                pending.finish(t1)
            else:
                _remember(key, elem, pending)
        return out

    wrapper.__telemetry_original__ = fn  # pyright: ignore[reportAttributeAccessIssue] - a function takes any attribute
    return wrapper


def _remember(key: int, elem: object, what: InFlight) -> None:
    _in_flight[key] = (weakref.ref(elem), what)
    if len(_in_flight) > MAX_IN_FLIGHT:
        _in_flight.pop(next(iter(_in_flight)))
        stats["unwaited"] += 1


def _wrap_wait(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def wait_tensor(tensor: torch.Tensor) -> torch.Tensor:
        if not _in_flight:
            return fn(tensor)
        key = _storage_key(tensor)
        entry = _in_flight.pop(key, None) if key is not None else None
        if entry is None or entry[0]() is None:
            return fn(tensor)  # not an op we issued (or its output is gone and the address reused)
        what = entry[1]
        rec = _current._active
        mark = rec.mark
        e0 = mark() if mark is not None else None
        if isinstance(what, list):
            op, t_issue, gid, seq = what[0], what[1], what[7], what[8]
        else:
            op, t_issue, gid, seq = what.op, what.t0, what.gid, what.seq
        prev = rec.current_collective
        rec.current_collective = (op, t_issue, gid, seq)
        t0 = time.perf_counter_ns()
        try:
            return fn(tensor)
        finally:
            rec.current_collective = prev
            t1 = time.perf_counter_ns()
            if not isinstance(what, list):
                if e0 is not None and mark is not None:  # (e0: mark was there)
                    what.events = (e0, mark())
                what.finish(t1, t1 - t0)
            else:
                _, _, nbytes, gsize, gname, factor, issue_ns, gid, seq = what
                blocked = min(issue_ns + t1 - t0, t1 - t_issue)
                call = (nbytes, gsize, gname, blocked, factor, gid, seq)
                if e0 is None or mark is None:  # (e0: mark was there)
                    rec.emit((ev.COLLECTIVE, t1, op, t_issue, *call))
                else:  # on CUDA the wait makes the stream wait for the op: time that on the GPU
                    rec.emit((ev.COLLECTIVE_DEV, t1, op, t_issue, *call, e0, mark()))

    wait_tensor.__telemetry_original__ = fn  # pyright: ignore[reportAttributeAccessIssue] - a function takes any attribute
    return wait_tensor


def _tracing() -> bool:
    """Dynamo is tracing: the wrappers must add nothing to a graph."""
    try:
        return _is_compiling()
    except Exception:  # noqa: BLE001 - a torch without it: not tracing as far as we can tell
        return False


def _is_compiling() -> bool:
    import torch

    global _is_compiling
    _is_compiling = torch.compiler.is_compiling  # found once
    return _is_compiling()


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
    _mesh_cache.clear()
    _mesh_calls.clear()

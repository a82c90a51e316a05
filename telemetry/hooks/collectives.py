"""Timing torch.distributed collectives called through the Python API.

``instrument_collectives()`` replaces the public functions in ``torch.distributed`` (and in
``torch.distributed.distributed_c10d``, where torch's own helpers find them) with thin wrappers
that read the clock around the call and append one event: op name, bytes moved (from the tensor
shapes and dtypes), group size, and the nccl-tests bus-bandwidth factor. A collective called from
inside another (torch helpers do this) is counted once, as the outer one. The wrappers add no
collective and no device synchronization; exceptions pass through unchanged.

With ``async_op=True`` the returned Work is wrapped: the time the caller spends in ``wait()`` is
the blocked time, and the op's duration runs from the call to the end of that wait.

Not covered (see README): code that bound a function before instrumentation
(``from torch.distributed import all_reduce``), DDP's gradient all-reduce (it runs in C++; see
:mod:`telemetry.hooks.ddp`), and collectives issued from C++ or compiled graphs.
"""

from __future__ import annotations

import functools
import logging
import sys
from typing import Any, Callable

from .. import events as ev
from .. import recorder as _recorder

log = logging.getLogger("telemetry")


def _nbytes(t: Any) -> int:
    try:
        return t.numel() * t.element_size()
    except AttributeError:
        return 0


def _sum_bytes(ts: Any) -> int:
    try:
        return sum(_nbytes(t) for t in ts)
    except TypeError:
        return 0


def _ring(n: int) -> float:
    return (n - 1) / n if n > 0 else 0.0


def _allreduce_factor(n: int) -> float:
    return 2.0 * (n - 1) / n if n > 0 else 0.0


def _one(n: int) -> float:
    return 1.0


def _arg(args: tuple, kwargs: dict, i: int, name: str) -> Any:
    if len(args) > i:
        return args[i]
    return kwargs.get(name)


# op -> (bytes(args, kwargs), factor(group_size), group argument position)
_SPECS: dict[str, tuple[Callable[[tuple, dict], int], Callable[[int], float], int]] = {
    "all_reduce": (lambda a, k: _nbytes(_arg(a, k, 0, "tensor")), _allreduce_factor, 2),
    "all_gather": (lambda a, k: _sum_bytes(_arg(a, k, 0, "tensor_list")), _ring, 2),
    "all_gather_into_tensor": (lambda a, k: _nbytes(_arg(a, k, 0, "output_tensor")), _ring, 2),
    "reduce_scatter": (lambda a, k: _sum_bytes(_arg(a, k, 1, "input_list")), _ring, 3),
    "reduce_scatter_tensor": (lambda a, k: _nbytes(_arg(a, k, 1, "input")), _ring, 3),
    "reduce": (lambda a, k: _nbytes(_arg(a, k, 0, "tensor")), _one, 3),
    "broadcast": (lambda a, k: _nbytes(_arg(a, k, 0, "tensor")), _one, 2),
    "all_to_all": (lambda a, k: _sum_bytes(_arg(a, k, 1, "input_tensor_list")), _ring, 2),
    "all_to_all_single": (lambda a, k: _nbytes(_arg(a, k, 1, "input")), _ring, 4),
    "barrier": (lambda a, k: 0, _one, 0),
    "send": (lambda a, k: _nbytes(_arg(a, k, 0, "tensor")), _one, 2),
    "recv": (lambda a, k: _nbytes(_arg(a, k, 0, "tensor")), _one, 2),
    "isend": (lambda a, k: _nbytes(_arg(a, k, 0, "tensor")), _one, 2),
    "irecv": (lambda a, k: _nbytes(_arg(a, k, 0, "tensor")), _one, 2),
}
_ALWAYS_ASYNC = frozenset({"isend", "irecv"})

_originals: dict[tuple[str, str], Callable] = {}
_group_cache: dict[Any, tuple[int, str]] = {}


def _group_info(dist: Any, group: Any) -> tuple[int, str]:
    key = id(group) if group is not None else None
    info = _group_cache.get(key)
    if info is None:
        try:
            size = dist.get_world_size(group)
        except Exception:  # noqa: BLE001 - not initialized, or not a member
            size = 0
        name = "default" if group is None else (getattr(group, "group_name", None) or f"pg{key}")
        info = (size, str(name))
        _group_cache[key] = info
    return info


class _TimedWork:
    """Wraps an async Work so that the wait is timed; everything else is delegated."""

    __slots__ = ("_work", "_op", "_t0", "_nbytes", "_gsize", "_gname", "_factor", "_done")

    def __init__(self, work: Any, op: str, t0: int, nbytes: int, gsize: int, gname: str,
                 factor: float) -> None:
        self._work = work
        self._op = op
        self._t0 = t0
        self._nbytes = nbytes
        self._gsize = gsize
        self._gname = gname
        self._factor = factor
        self._done = False

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        rec = _recorder._active
        t_w = rec.now()
        try:
            return self._work.wait(*args, **kwargs)
        finally:
            t1 = rec.now()
            if not self._done:
                self._done = True
                rec.emit((ev.COLLECTIVE, t1, self._op, self._t0, self._nbytes, self._gsize,
                          self._gname, t1 - t_w, self._factor))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


def _wrap(dist: Any, op: str, fn: Callable) -> Callable:
    nbytes_of, factor_of, group_pos = _SPECS[op]
    always_async = op in _ALWAYS_ASYNC

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rec = _recorder._active
        if rec.current_collective is not None or rec is _recorder.NULL:
            return fn(*args, **kwargs)
        try:
            nbytes = nbytes_of(args, kwargs)
            group = args[group_pos] if group_pos and len(args) > group_pos else kwargs.get("group")
            gsize, gname = _group_info(dist, group)
        except Exception:  # noqa: BLE001 - odd arguments: let torch report them
            return fn(*args, **kwargs)
        is_async = always_async or bool(kwargs.get("async_op"))
        t0 = rec.now()
        rec.current_collective = (op, t0)
        try:
            out = fn(*args, **kwargs)
        finally:
            rec.current_collective = None
        factor = factor_of(gsize)
        if is_async and out is not None:
            return _TimedWork(out, op, t0, nbytes, gsize, gname, factor)
        t1 = rec.now()
        rec.emit((ev.COLLECTIVE, t1, op, t0, nbytes, gsize, gname, t1 - t0, factor))
        return out

    wrapper.__telemetry_original__ = fn  # type: ignore[attr-defined]
    return wrapper


def instrument_collectives() -> bool:
    """Wrap the torch.distributed collectives; idempotent. Returns False if torch is absent."""
    try:
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d
    except ImportError:
        return False
    if not dist.is_available():
        return False
    for module in (dist, c10d):
        for op in _SPECS:
            fn = getattr(module, op, None)
            if fn is None or hasattr(fn, "__telemetry_original__"):
                continue
            _originals[(module.__name__, op)] = fn
            setattr(module, op, _wrap(dist, op, fn))
    return True


def uninstrument_collectives() -> None:
    """Put the original functions back."""
    for (mod_name, op), fn in list(_originals.items()):
        module = sys.modules.get(mod_name)
        if module is not None:
            setattr(module, op, fn)
    _originals.clear()
    _group_cache.clear()


def is_instrumented() -> bool:
    return bool(_originals)

"""What the collective hooks share (collectives.py: torch.distributed's functions; functional.py:
DTensor's functional collectives; ddp.py: DDP's communication hook): the bytes a collective moves and
its bus-bandwidth factor, as nccl-tests counts them, and an async collective in flight (Pending),
emitted once when its Work completes or is waited on."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ..recorder import current as _current
from ..recorder import events as ev

if TYPE_CHECKING:
    from ..recorder.cuda import TimingEvent


def tensor_bytes(t: Any) -> int:
    """A tensor's size in bytes (0 for what is no tensor)."""
    try:
        return t.numel() * t.element_size()
    except AttributeError:
        return 0


def tensors_bytes(ts: Any) -> int:
    """The bytes of a list of tensors (0 for what is no list)."""
    try:
        return sum(tensor_bytes(t) for t in ts)
    except TypeError:
        return 0


def ring_factor(n: int) -> float:
    """Bus bandwidth over algorithm bandwidth of all_gather, reduce_scatter, all_to_all among ``n`` ranks."""
    return (n - 1) / n if n > 0 else 0.0


def allreduce_factor(n: int) -> float:
    """Bus bandwidth over algorithm bandwidth of all_reduce among ``n`` ranks."""
    return 2.0 * (n - 1) / n if n > 0 else 0.0


def unit_factor(n: int) -> float:
    """Bus bandwidth over algorithm bandwidth of broadcast, reduce and point-to-point: 1."""
    return 1.0


class Pending:
    """One async op in flight: emitted once, when its Work completes or is waited on."""

    __slots__ = (
        "op", "t0", "nbytes", "gsize", "gname", "factor", "gid", "seq", "blocked_ns", "lock", "done", "waiters", "events"
    )  # fmt: skip

    def __init__(
        self,
        op: str,
        t0: int,
        nbytes: int,
        gsize: int,
        gname: str,
        factor: float,
        waiters: int,
        gid: str = "",
        seq: int = -1,
    ) -> None:
        self.op, self.t0, self.nbytes, self.gsize, self.gname, self.factor = op, t0, nbytes, gsize, gname, factor
        self.gid, self.seq = gid, seq
        self.blocked_ns = 0
        self.lock = threading.Lock()
        self.done = False
        self.waiters = waiters  # Works still to complete (batch_isend_irecv returns several)
        self.events: tuple[TimingEvent, TimingEvent] | None = (
            None  # CUDA events around the last wait(), on device timing
        )

    def finish(self, t_end: int, blocked_ns: int = 0) -> None:
        with self.lock:
            self.blocked_ns += blocked_ns
            self.waiters -= 1
            if self.done or self.waiters > 0:
                return
            self.done = True
        # A wait returns a little after the completion callback: blocked never exceeds the op.
        blocked = min(self.blocked_ns, t_end - self.t0)
        fields = (
            t_end,
            self.op,
            self.t0,
            self.nbytes,
            self.gsize,
            self.gname,
            blocked,
            self.factor,
            self.gid,
            self.seq,
        )
        if self.events:
            _current._active.emit((ev.COLLECTIVE_DEV, *fields, *self.events))
        else:
            _current._active.emit((ev.COLLECTIVE, *fields))

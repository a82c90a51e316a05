"""Bytes this rank read from storage: its own process and its children (a DataLoader's workers, and
anything they start), from the kernel's per-process I/O accounting, read on the sampler thread.

=====================  ====================================================================
reading                what it is
=====================  ====================================================================
storage_read_bytes     bytes the rank's process and its children read from storage since
                       telemetry started (a counter; the pipeline turns it into each step's
                       ``io.read_bytes``)
=====================  ====================================================================

Source: ``read_bytes`` of ``/proc/<pid>/io``: bytes the process caused to be fetched from the storage
layer. A read served from the page cache is not a storage read and is not counted (a dataset read twice
from a warm cache reads 0 bytes the second time); a network filesystem's reads count where the
filesystem accounts them (NFS does; a FUSE mount counts in its daemon, which is not the rank's child).
The children are found through ``/proc/<pid>/task/<tid>/children`` (the kernel's list, one file per
thread), and their children in turn; where the kernel lacks those files, through psutil (a walk of
every process).

The total only grows. Each process's count is followed from the reading it was first seen at (a child
started since the last reading counts from 0: it began there); a child that exits between two
readings loses what it read since the last one (at most one interval's bytes; the kernel gives a
parent its dead children's counts only through taskstats, which needs privileges). A pid that comes
back as another process with a smaller count counts from 0 again.
"""

from __future__ import annotations

import os

from .sched import Unavailable


def _read_bytes(proc: str, pid: int) -> int | None:
    try:
        with open(f"{proc}/{pid}/io", "rb") as f:
            for line in f:
                if line.startswith(b"read_bytes:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


class StorageSource:
    """``storage_read_bytes`` of a process and its descendants."""

    def __init__(self, pid: int | None = None, proc: str = "/proc") -> None:
        self.pid = pid if pid is not None else os.getpid()
        self.proc = proc
        own = _read_bytes(proc, self.pid)
        if own is None:
            raise Unavailable(f"{proc}/{self.pid}/io unreadable: storage bytes off")
        self._kernel_children = os.path.exists(f"{proc}/{self.pid}/task/{self.pid}/children")
        self._seen: dict[int, int] = {self.pid: own}
        for child in self._children():
            rb = _read_bytes(proc, child)
            if rb is not None:
                self._seen[child] = rb  # started before telemetry: counted from here
        self.total = 0

    def _children_of(self, pid: int) -> list[int]:
        out: list[int] = []
        try:
            tids = os.listdir(f"{self.proc}/{pid}/task")
        except OSError:
            return out
        for tid in tids:
            try:
                with open(f"{self.proc}/{pid}/task/{tid}/children", "rb") as f:
                    out += [int(x) for x in f.read().split()]
            except (OSError, ValueError):
                continue
        return out

    def _children(self) -> list[int]:
        if not self._kernel_children:
            import psutil

            try:
                return [p.pid for p in psutil.Process(self.pid).children(recursive=True)]
            except psutil.Error:
                return []
        out, todo = [], self._children_of(self.pid)
        while todo and len(out) < 4096:  # a bound: a fork bomb under a rank must not hang the sampler
            pid = todo.pop()
            out.append(pid)
            todo += self._children_of(pid)
        return out

    def read(self) -> dict[str, float]:
        seen, now = self._seen, {}
        for pid in [self.pid, *self._children()]:
            rb = _read_bytes(self.proc, pid)
            if rb is None:
                continue  # exited since it was listed
            before = seen.get(pid)
            if before is None or rb < before:
                before = 0  # new since the last reading (or a reused pid): all it read is new
            self.total += rb - before
            now[pid] = rb
        self._seen = now
        return {"storage_read_bytes": float(self.total)}

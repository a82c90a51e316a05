"""Bytes this rank read from storage (``storage_read_bytes``, a counter the pipeline turns into each
step's ``io.read_bytes``): its own process and its children (a DataLoader's workers, and anything they
start), from ``read_bytes`` of ``/proc/<pid>/io``, read on the sampler thread (:class:`StorageSource`).

A page-cache hit is not a storage read (a dataset read twice from a warm cache reads 0 bytes the
second time). Children are found through ``/proc/<pid>/task/<tid>/children``, else psutil. The total
only grows: a child is followed from the reading it was first seen at (one started since counts from
0), a child that exits between two readings loses what it read since the last one, and a pid that
comes back as another process with a smaller count counts from 0 again. More: docs/instrumenting.md,
"The input pipeline".
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

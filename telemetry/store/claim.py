"""One writer per rank: a live process holds its rank's lock (``RUN_DIR/ranks/rank-NNNNN.lock``, ``flock``)
while it runs; a second is refused with :class:`RankInUse` naming the first, and the kernel releases
the lock however its holder exits (:func:`claim_rank`). Limits: docs/integrations.md, "Launchers".

>>> import tempfile; run = tempfile.mkdtemp()
>>> first = claim_rank(run, 3)
>>> try:
...     claim_rank(run, 3)
... except RankInUse as exc:
...     print(str(exc).split(":")[0])
rank 3 of this run directory is being written by another live process
>>> first.release(); claim_rank(run, 3).release()
"""

from __future__ import annotations

import json
import os
import socket
import time

from . import layout


class RankInUse(RuntimeError):
    """Another live process writes this rank's files in this run directory."""


class Claim:
    """A held rank lock; :meth:`release` at shutdown (the kernel releases it at exit anyway)."""

    def __init__(self, fd: int, path: str) -> None:
        self.fd, self.path = fd, path

    def release(self) -> None:
        if self.fd >= 0:
            try:
                os.close(self.fd)  # closing the descriptor drops the flock
            finally:
                self.fd = -1


def lock_path(run_dir: str, rank: int) -> str:
    return layout.rank_stem(run_dir, rank) + ".lock"


def claim_rank(run_dir: str, rank: int) -> Claim | None:
    """Lock rank ``rank``'s files in ``run_dir`` for this process; None when no lock file can be made
    there (the run directory cannot be written: the sinks say so). Raises :class:`RankInUse`, naming
    the holder's pid and host, when another live process holds it."""
    import fcntl

    path = lock_path(run_dir, rank)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        # Held read-only: a file open for writing would keep its file system from being remounted
        # read-only (an flock needs no write access); the label is written through a short-lived one.
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read(fd)
        os.close(fd)
        since = time.strftime("%H:%M:%S", time.localtime(holder.get("start_time_s", 0))) if holder else "?"
        who = f"pid {holder.get('pid', '?')} on {holder.get('host', '?')} (since {since})" if holder else "unknown"
        raise RankInUse(
            f"rank {rank} of this run directory is being written by another live process: {who}; "
            f"{os.path.abspath(run_dir)}. This process records nothing: give each process its own rank "
            "(the launcher's RANK, or init_process_group's rank) or its own run_dir"
        ) from None
    except OSError:  # a file system without flock: no lock, as on one that cannot be written
        os.close(fd)
        return None
    label = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "start_time_s": time.time()})
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(label)
    except OSError:
        pass  # the lock holds; only its label is missing
    return Claim(fd, path)


def _read(fd: int) -> dict:
    try:
        return json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        return {}

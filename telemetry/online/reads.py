"""Rank 0's reads of the rendezvous store, batched, and the deletes of what it read.

At 10,000 ranks rank 0 asks the store in batches of :data:`CHUNK` keys: whether a block is complete
is one ``check`` per chunk (a chunk found complete is not asked again), its summaries one
``multi_get`` per chunk, and the phase names of ranks not seen before likewise; only the keys that
``check`` says exist are read, since ``multi_get`` of a missing key waits for it until the store's
timeout. Ranks missing from a block that is read incomplete are found by halving (``check`` of each
half): about 2 log2(CHUNK) checks per missing rank. The store has no batched delete: the read keys
are deleted one ``delete_key`` each by a background thread on its own connection (:class:`Deleter`),
off the analysis.
"""

from __future__ import annotations

import collections
import queue
import threading
from typing import TYPE_CHECKING, Sequence

from ..logonce import LogOnce
from .wire import phases_key, rank_of, summary_key

if TYPE_CHECKING:
    from torch._C._distributed_c10d import Store  # torch.distributed.Store

CHUNK = 1000  # keys per store request of rank 0 (check, multi_get): a bounded request, and few of them


class StoreReads:
    """Rank 0's batched requests to the store for a job of ``world`` ranks; failures to read are
    logged once through ``once``."""

    def __init__(self, store: Store, world: int, once: LogOnce) -> None:
        self.store = store
        self.world = world
        self._once = once
        self.deleter: Deleter | None = None
        self._late: collections.OrderedDict = collections.OrderedDict()  # block -> keys missing when read

    def n_chunks(self) -> int:
        return -(-self.world // CHUNK)

    def chunk_ranks(self, i: int) -> range:
        return range(i * CHUNK, min((i + 1) * CHUNK, self.world))

    def complete_chunks(self, block: int, known: int) -> int:
        """How many leading chunks of ``block``'s keys are all in the store: one ``check`` for each
        chunk not yet known complete, up to the first that is not (a key, once there, stays)."""
        while known < self.n_chunks():
            try:
                if not self.store.check([summary_key(block, r) for r in self.chunk_ranks(known)]):
                    break
            except Exception:  # noqa: BLE001 - a failed check: that chunk is asked again next time
                break
            known += 1
        return known

    def present(self, keys: list[str]) -> list[str]:
        """The keys of ``keys`` that are in the store: one ``check`` when all are, else halving."""
        try:
            if self.store.check(keys):
                return keys
        except Exception:  # noqa: BLE001 - a failed check: these keys count as not there (yet)
            return []
        if len(keys) == 1:
            return []
        half = len(keys) // 2
        return self.present(keys[:half]) + self.present(keys[half:])

    def read(self, keys: list[str]) -> list[bytes | None]:
        """The values of ``keys`` (all known present), one ``multi_get`` per chunk; a chunk that
        cannot be read gives None for each of its keys."""
        out: list[bytes | None] = []
        for i in range(0, len(keys), CHUNK):
            part = keys[i : i + CHUNK]
            try:
                multi_get = getattr(self.store, "multi_get", None)
                out.extend(multi_get(part) if multi_get is not None else [self.store.get(k) for k in part])
            except Exception as exc:  # noqa: BLE001 - a chunk not read is skipped (logged once): online detection only
                self._once(
                    "read", "telemetry: [online] summaries not read from the store (%s); further failures skipped", exc
                )
                out.extend([None] * len(part))
        return out

    def read_block(self, block: int, complete_chunks: int) -> list[tuple[int, str, bytes]]:
        """(rank, key, raw value) of every summary of ``block`` in the store, ranks ascending: the
        first ``complete_chunks`` chunks are known complete, the ranks of the others are found."""
        ranks: list[int] = []
        for i in range(self.n_chunks()):
            chunk = self.chunk_ranks(i)
            if i < complete_chunks:
                ranks.extend(chunk)
            else:
                present = self.present([summary_key(block, r) for r in chunk])
                ranks.extend(rank_of(k) for k in present)
        keys = [summary_key(block, r) for r in ranks]
        raws = self.read(keys)
        return [(r, k, raw) for r, k, raw in zip(ranks, keys, raws) if raw is not None]

    def done(self, block: int, got: list[tuple[int, str, bytes]], wait_blocks: int, keep_late: bool = False) -> None:
        """``block`` was read (``got``: as :meth:`read_block` gives): its keys are deleted. The keys
        of ranks missing from it are deleted, blind and once, ``2 * wait_blocks`` blocks later: a
        rank that posts after rank 0 read the block would leave its key behind (``keep_late``: the
        caller reads them later and deletes them itself)."""
        self.delete([k for _, k, _ in got])
        if len(got) < self.world and not keep_late:
            have = {r for r, _, _ in got}
            self._late[block] = [summary_key(block, r) for r in range(self.world) if r not in have]
        while self._late and next(iter(self._late)) <= block - 2 * wait_blocks:
            self.delete(self._late.popitem(last=False)[1])  # deleted blind, once: most are not there

    def read_phase_names(self, ranks: Sequence[int]) -> list[tuple[int, bytes]]:
        """(rank, raw value) of the phase names of those of ``ranks`` that posted them, batched."""
        present = []
        for i in range(0, len(ranks), CHUNK):
            present += self.present([phases_key(r) for r in ranks[i : i + CHUNK]])
        return [(rank_of(key), raw) for key, raw in zip(present, self.read(present)) if raw is not None]

    def delete(self, keys: list[str]) -> None:
        if not keys:
            return
        if self.deleter is None:
            self.deleter = Deleter(self.store)
        self.deleter.put(keys)

    def stop(self, timeout: float = 1.0) -> None:
        if self.deleter is not None:
            self.deleter.stop(timeout)


class Deleter:
    """Deletes rank 0's read keys in the background, one ``delete_key`` each (the store has no
    batched delete), on a connection of its own (``store.clone()``) so that the reads do not wait
    behind them. Keys still queued when the job stops are left: the store ends with the job."""

    def __init__(self, store: Store) -> None:
        self.store = store
        try:
            self.store = store.clone()  # pyright: ignore[reportAttributeAccessIssue] - torch's Store has clone() (its stub lacks it)
            self.store.set_timeout(store.timeout)  # pyright: ignore[reportAttributeAccessIssue] - and a timeout (its stub: only its subclasses')
        except Exception:  # noqa: BLE001 - a store without clone: share its connection
            pass
        self.deleted = 0
        self.failed = 0
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="telemetry-online-delete", daemon=True)
        self._thread.start()

    def put(self, keys: list[str]) -> None:
        self._queue.put(keys)

    def backlog(self) -> int:
        return self._queue.qsize()

    def _run(self) -> None:
        while True:
            keys = self._queue.get()
            if keys is None:
                return
            for key in keys:
                try:
                    self.store.delete_key(key)
                    self.deleted += 1
                except Exception:  # noqa: BLE001 - a key not deleted is counted; the store ends with the job
                    self.failed += 1

    def stop(self, timeout: float = 2.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

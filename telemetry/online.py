"""Online detection: every K steps each rank posts a small fixed-size summary; rank 0 runs the
same detectors as offline on the summaries and reports findings while the job runs.

No collective and no process group of its own (a gloo group is a full mesh, impossible at 10,000
ranks): each rank's pipeline thread writes its summary of a block of K steps to the job's
rendezvous store (torch.distributed's TCPStore, under the prefix ``telemetry/``) as one packed
array of float64 (block, steps, then medians of step time, compute, comm, data and each phase, in
a fixed order). Rank 0's online thread waits for a block to be complete (or ``online_wait_blocks``
blocks late: the missing ranks are named), builds a steps table with one row per rank and block,
runs :func:`telemetry.analysis.detectors.analyze` on the latest ``online_window`` blocks, and hands new
findings and straggler scores to the sinks as an :class:`~telemetry.pipeline.records.OnlineResult`
(run store: ``RUN_DIR/findings.jsonl``; Prometheus: ``train_straggler_score{scored_rank}``,
``train_findings{kind}``, with rank 0's own ``rank`` label). Store keys of analyzed blocks are deleted. The training thread never
waits for any of this.

At 10,000 ranks a rank still makes one ``set`` per block; rank 0 asks the store in batches of
``CHUNK`` keys (``check`` and ``multi_get``: about 2 requests per 1,000 ranks and block), builds the
table from numpy matrices, and deletes the read keys from a background thread (the store has no
batched delete: one ``delete_key`` per key, on a connection of its own). See :class:`OnlineDetector`.

``telemetry.init`` may run before ``init_process_group``: then :class:`OnlineStarter` looks for the
process group on every pipeline tick and starts detection when it appears.
"""

from __future__ import annotations

import collections
import logging
import queue
import sys
import threading
import time
from datetime import timedelta
from typing import Any, Callable, Sequence

import numpy as np

from .logonce import LogOnce
from .pipeline.records import OnlineResult, StepRecord

log = logging.getLogger("telemetry")
FIXED = ("block", "steps", "duration_s", "compute_s", "comm_s", "data_s")
CHUNK = 1000  # keys per store request of rank 0 (check, multi_get): a bounded request, and few of them


_store_once = LogOnce(level=logging.INFO)


def default_store() -> Any | None:
    """The rendezvous store of the initialized default process group, or None. Cheap when there
    is none (it is asked on every pipeline tick until there is): torch is not imported here."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None  # nobody imported torch.distributed: no process group can exist
    try:
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return None
        store = dist.distributed_c10d._get_default_store()
        prefixed = dist.PrefixStore("telemetry/", store)
        prefixed.set_timeout(timedelta(seconds=5))
        return prefixed
    except Exception as exc:  # noqa: BLE001 - a private API: never fatal
        _store_once("store", "telemetry: online detection off (no rendezvous store: %s)", exc)
        return None


class BlockSummarizer:
    """Per rank: step records -> one summary vector per block of K steps. The phases are those of
    the first block (posted once by name, so that rank 0 can read the vectors)."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.phases: tuple[str, ...] | None = None
        self._open: dict[int, list] = collections.defaultdict(list)

    def add(self, records: list) -> list[np.ndarray]:
        done = []
        if self.phases is None and records:
            self.phases = tuple(sorted({p for r in records for p in r.phases} - {"data"}))
        for r in records:
            block = r.step // self.every
            self._open[block].append(r)
            if len(self._open[block]) >= self.every:
                done.append(self._pack(block, self._open.pop(block)))
        for b in [b for b in self._open if b < (records[-1].step // self.every if records else 0) - 1]:
            done.append(self._pack(b, self._open.pop(b)))  # a block that will not fill (skipped steps)
        return done

    def _pack(self, block: int, recs: list) -> np.ndarray:
        def med(values: list[float]) -> float:
            v = [x for x in values if x is not None and np.isfinite(x)]
            return float(np.median(v)) if v else float("nan")

        duration = med([r.duration_s for r in recs])
        comm = med([r.comm_s for r in recs])
        row = [
            block,
            len(recs),
            duration,
            med([r.duration_s - r.comm_s for r in recs]),
            comm,
            med([r.phases.get("data", 0.0) for r in recs]),
        ]
        for p in self.phases:
            row.append(med([r.phases.get(p, 0.0) - r.phase_comm.get(p, 0.0) for r in recs]))
        return np.asarray(row, dtype=np.float64)


class _Block:
    """One block's summaries as rank 0 received them: the ranks that posted a valid vector (sorted)
    and their vectors, one matrix per vector length (ranks may post different phase counts)."""

    __slots__ = ("ranks", "parts")

    def __init__(self, parts: list[tuple[np.ndarray, np.ndarray]]) -> None:
        self.parts = [(r, m) for r, m in parts if len(r)]  # (ranks, matrix [ranks, fields]), ranks ascending
        ranks = [r for r, _ in self.parts]
        if len(ranks) == 1:
            self.ranks = ranks[0]
        else:
            self.ranks = np.sort(np.concatenate(ranks)) if ranks else np.zeros(0, dtype=np.int64)

    @classmethod
    def of(cls, vectors: dict[int, np.ndarray]) -> "_Block":
        """From rank -> vector (tests, and the odd vector of its own length)."""
        by_len: dict[int, list[int]] = collections.defaultdict(list)
        for r in sorted(vectors):
            by_len[len(vectors[r])].append(r)
        return cls(
            [
                (np.asarray(rs, dtype=np.int64), np.vstack([vectors[r] for r in rs]).astype(np.float64))
                for rs in by_len.values()
            ]
        )


class OnlineDetector:
    """A pipeline listener (see :class:`telemetry.pipeline.thread.Listener`): every rank posts its
    summaries; rank 0 also runs the analysis thread.

    Rank 0 reads the store in batches of :data:`CHUNK` keys: whether a block is complete is one
    ``check`` per chunk (a chunk found complete is not asked again), its summaries one ``multi_get``
    per chunk, and the phase names of ranks not seen before likewise; only the keys that ``check``
    says exist are read, since ``multi_get`` of a missing key waits for it until the store's timeout.
    Ranks missing from a block that is read incomplete are found by halving (``check`` of each half):
    about 2 log2(CHUNK) checks per missing rank. The store has no batched delete: the read keys are
    deleted one ``delete_key`` each by a background thread on its own connection, off the analysis.
    """

    def __init__(
        self,
        store: Any,
        rank: int,
        world: int,
        every: int,
        window: int,
        wait_blocks: int,
        min_interval_s: float = 5.0,
        busy_bound: float = 0.8,
    ) -> None:
        self.store = store
        self.busy_bound = busy_bound
        self.rank = rank
        self.world = world
        self.every = every
        self.window = window
        self.wait_blocks = wait_blocks
        self.min_interval_s = min_interval_s
        self.summarizer = BlockSummarizer(every)
        self._phases_posted = False
        self._phase_names: dict[int, list[str]] = {}
        self._name_lists: list[tuple[str, ...]] = []  # distinct phase lists; _name_id[rank] indexes it
        self._name_index: dict[tuple[str, ...], int] = {}
        self._name_id = np.full(max(world, 1), -1, dtype=np.int64)
        self._last_analysis = 0.0
        self._dirty = False
        self.posted = 0
        self.failures = 0
        self.bad_summaries = 0  # store values that were not a summary vector (skipped)
        self._once = LogOnce()
        self.analyses = 0
        self.analysis_s = 0.0  # rank 0: seconds spent building tables and analyzing, in all
        self.analysis_max_s = 0.0
        self._results: queue.Queue = queue.Queue()  # OnlineResult, for the pipeline to hand on
        self._inbox: queue.Queue = queue.Queue()
        self._seen: set[tuple] = set()
        self._rows: collections.OrderedDict = collections.OrderedDict()  # block -> _Block
        self._late: collections.OrderedDict = collections.OrderedDict()  # block -> keys missing when read
        self._deleter: _Deleter | None = None
        self._stop = threading.Event()
        self._thread = None
        if rank == 0:
            # Import the analyzer (pandas, the detectors: about 0.5 s here) now, inside init, rather
            # than in the online thread mid-run, where it would hold the GIL against rank 0's
            # training thread and make rank 0 a straggler of its own telemetry's making.
            from .analysis import detectors  # noqa: F401

            self._thread = threading.Thread(target=self._run, name="telemetry-online", daemon=True)
            self._thread.start()

    # ---- every rank, pipeline thread --------------------------------------------------
    def poll(self) -> list[OnlineResult]:
        out = []
        while True:
            try:
                out.append(self._results.get_nowait())
            except queue.Empty:
                return out

    def on_records(self, records: Sequence[StepRecord]) -> None:
        for vec in self.summarizer.add(records):
            try:
                if not self._phases_posted:
                    self.store.set(f"phases/{self.rank}", ",".join(self.summarizer.phases or ()))
                    self._phases_posted = True
                self.store.set(f"s/{int(vec[0])}/{self.rank}", vec.tobytes())
                self.posted += 1
                if self.rank == 0:
                    self._inbox.put(int(vec[0]))
            except Exception as exc:  # noqa: BLE001 - a dead store costs only online detection
                self.failures += 1
                self._once("post", "telemetry: online summary not posted (%s); further failures counted", exc)

    # ---- rank 0, online thread ----------------------------------------------------------
    def _run(self) -> None:
        pending: dict[int, int] = {}  # block -> how many of its chunks are known complete
        while not self._stop.is_set():
            try:
                block = self._inbox.get(timeout=0.5)
                pending.setdefault(block, 0)
            except queue.Empty:
                pass
            newest = max(pending) if pending else -1
            ready = []
            for block in sorted(pending):
                pending[block] = self._complete_chunks(block, pending[block])
                if pending[block] == self._n_chunks() or newest - block >= self.wait_blocks:
                    ready.append(block)
            for block in ready:
                self._collect(block, pending.pop(block))
                self._dirty = True
            if self._dirty and time.monotonic() - self._last_analysis >= self.min_interval_s:
                self._dirty = False
                if self._analyze():  # too few blocks yet: try again with the next, not in 5 s
                    self._last_analysis = time.monotonic()

    def _n_chunks(self) -> int:
        return -(-self.world // CHUNK)

    def _chunk_ranks(self, i: int) -> range:
        return range(i * CHUNK, min((i + 1) * CHUNK, self.world))

    def _complete_chunks(self, block: int, known: int) -> int:
        """How many leading chunks of ``block``'s keys are all in the store: one ``check`` for each
        chunk not yet known complete, up to the first that is not (a key, once there, stays)."""
        while known < self._n_chunks():
            try:
                if not self.store.check([f"s/{block}/{r}" for r in self._chunk_ranks(known)]):
                    break
            except Exception:  # noqa: BLE001
                break
            known += 1
        return known

    def _present(self, keys: list[str]) -> list[str]:
        """The keys of ``keys`` that are in the store: one ``check`` when all are, else halving."""
        try:
            if self.store.check(keys):
                return keys
        except Exception:  # noqa: BLE001
            return []
        if len(keys) == 1:
            return []
        half = len(keys) // 2
        return self._present(keys[:half]) + self._present(keys[half:])

    def _read(self, keys: list[str]) -> list:
        """The values of ``keys`` (all known present), one ``multi_get`` per chunk; a chunk that
        cannot be read gives None for each of its keys."""
        out: list = []
        for i in range(0, len(keys), CHUNK):
            part = keys[i : i + CHUNK]
            try:
                multi_get = getattr(self.store, "multi_get", None)
                out.extend(multi_get(part) if multi_get is not None else [self.store.get(k) for k in part])
            except Exception as exc:  # noqa: BLE001
                self._once(
                    "read", "telemetry: [online] summaries not read from the store (%s); further failures skipped", exc
                )
                out.extend([None] * len(part))
        return out

    def _collect(self, block: int, complete_chunks: int) -> None:
        ranks: list[int] = []
        for i in range(self._n_chunks()):
            chunk = self._chunk_ranks(i)
            if i < complete_chunks:
                ranks.extend(chunk)
            else:
                present = self._present([f"s/{block}/{r}" for r in chunk])
                ranks.extend(int(k.rsplit("/", 1)[1]) for k in present)
        keys = [f"s/{block}/{r}" for r in ranks]
        raws = self._read(keys)
        got = [(r, k, raw) for r, k, raw in zip(ranks, keys, raws) if raw is not None]
        self._delete([k for _, k, _ in got])
        if len(got) < self.world:  # a rank that posts later than this would leave its key behind
            have = {r for r, _, _ in got}
            self._late[block] = [f"s/{block}/{r}" for r in range(self.world) if r not in have]
        while self._late and next(iter(self._late)) <= block - 2 * self.wait_blocks:
            self._delete(self._late.popitem(last=False)[1])  # deleted blind, once: most are not there
        self._rows[block] = self._parse(block, got)
        while len(self._rows) > self.window:
            self._rows.popitem(last=False)

    def _parse(self, block: int, got: list[tuple[int, str, Any]]) -> _Block:
        """The valid summary vectors of ``got`` (rank, key, raw value) as a block; the others are
        skipped and counted. Vectors of one length are read as one matrix."""
        by_len: dict[int, list[int]] = collections.defaultdict(list)
        bad = []
        for i, (_, _, raw) in enumerate(got):
            n = len(raw) if isinstance(raw, (bytes, bytearray)) else -1
            if n < 8 * len(FIXED) or n % 8:
                bad.append(i)
            else:
                by_len[n].append(i)
        parts = []
        for n, idx in by_len.items():
            mat = np.frombuffer(b"".join(got[i][2] for i in idx), dtype=np.float64).reshape(len(idx), n // 8)
            ok = mat[:, 0] == block
            bad.extend(np.asarray(idx)[~ok].tolist())
            parts.append((np.asarray([got[i][0] for i in idx], dtype=np.int64)[ok], mat[ok]))
        for i in sorted(bad):
            r, _, raw = got[i]
            self.bad_summaries += 1
            self._once(
                "bad-summary",
                "telemetry: [online] rank %d's summary of block %d is not a "
                "summary vector (%d bytes); skipped, further cases counted",
                r,
                block,
                len(raw) if hasattr(raw, "__len__") else -1,
            )
        return _Block(parts)

    def _delete(self, keys: list[str]) -> None:
        if not keys:
            return
        if self._deleter is None:
            self._deleter = _Deleter(self.store)
        self._deleter.put(keys)

    def _fetch_names(self, ranks: Sequence[int]) -> None:
        """Read the phase names of ``ranks`` (posted once by each rank), batched; a rank whose
        names are not there yet is asked again at the next table."""
        present = []
        for i in range(0, len(ranks), CHUNK):
            present += self._present([f"phases/{r}" for r in ranks[i : i + CHUNK]])
        for key, raw in zip(present, self._read(present)):
            if raw is None:
                continue
            rank = int(key.split("/", 1)[1])
            try:
                text = raw.decode() if isinstance(raw, (bytes, bytearray)) else str(raw)
            except Exception:  # noqa: BLE001 - not text: no phase columns for this rank
                continue
            names = [p for p in text.split(",") if p]
            self._phase_names[rank] = names
            nid = self._name_index.setdefault(tuple(names), len(self._name_lists))
            if nid == len(self._name_lists):
                self._name_lists.append(tuple(names))
            if 0 <= rank < len(self._name_id):
                self._name_id[rank] = nid

    def _table(self):
        """The steps table of the window: a row per rank and block (blocks in the order read, ranks
        ascending), columns rank, step, start_s, duration_s, comm_s, data_s, then ``{phase}_s`` (the
        phase's compute) and ``comm.{phase}_s`` (0: the comm inside a phase is removed) in the order
        they first appear; a rank without a phase has NaN in both. Built from the blocks' matrices."""
        import pandas as pd

        blocks = [(b, blk) for b, blk in self._rows.items() if len(blk.ranks)]
        if not blocks:
            return pd.DataFrame()
        ids = self._name_id
        unnamed = np.unique(
            np.concatenate([blk.ranks[ids[np.clip(blk.ranks, 0, len(ids) - 1)] < 0] for _, blk in blocks])
        )
        if len(unnamed):
            self._fetch_names(unnamed.tolist())
        parts = [(seq, b, ranks, mat) for seq, (b, blk) in enumerate(blocks) for ranks, mat in blk.parts]
        sizes = [len(r) for _, _, r, _ in parts]
        n = sum(sizes)
        offsets = np.cumsum([0] + sizes[:-1])
        rank = np.concatenate([r for _, _, r, _ in parts])
        order = None
        if len(parts) > len(blocks):  # a block of several vector lengths: rows back to rank order
            seq = np.concatenate([np.full(len(r), s) for s, _, r, _ in parts])
            order = np.lexsort((rank, seq))
        cols: dict[str, np.ndarray] = {
            "rank": rank,
            "step": np.concatenate([np.full(len(r), b * self.every, dtype=np.int64) for _, b, r, _ in parts]),
            "start_s": np.concatenate([np.full(len(r), float(b)) for _, b, r, _ in parts]),
            "duration_s": np.concatenate([m[:, 2] for *_, m in parts]),
            "comm_s": np.concatenate([m[:, 4] for *_, m in parts]),
            "data_s": np.concatenate([m[:, 5] for *_, m in parts]),
        }
        fixed = list(cols)
        first: dict[str, tuple[int, int]] = {c: (0, i) for i, c in enumerate(fixed)}
        row_of = np.arange(n) if order is None else np.argsort(order)  # a built row's place in the table
        for (_, _, ranks, mat), off in zip(parts, offsets):
            nid = np.where((ranks >= 0) & (ranks < len(ids)), ids[np.clip(ranks, 0, len(ids) - 1)], -1)
            for name_id in np.unique(nid):
                sel = np.flatnonzero(nid == name_id)
                if len(sel) == len(ranks):  # the usual case: one phase list for every rank
                    sel = slice(0, len(ranks))
                    rows, top = slice(off, off + len(ranks)), int(row_of[off : off + len(ranks)].min())
                else:
                    rows = off + sel
                    top = int(row_of[rows].min())
                phases = self._name_lists[name_id] if name_id >= 0 else ()
                keys = list(
                    dict.fromkeys(
                        fixed + [c for p in phases[: mat.shape[1] - len(FIXED)] for c in (f"{p}_s", f"comm.{p}_s")]
                    )
                )
                for i, p in enumerate(phases[: mat.shape[1] - len(FIXED)]):
                    for c, values in ((f"{p}_s", mat[sel, len(FIXED) + i]), (f"comm.{p}_s", 0.0)):
                        if c not in cols:
                            cols[c] = np.full(n, np.nan)  # NaN in the rows of ranks without this phase
                        cols[c][rows] = values
                        first[c] = min(first.get(c, (n, 0)), (top, keys.index(c)))
        names = sorted(cols, key=lambda c: first[c])
        if order is not None:
            cols = {c: v[order] for c, v in cols.items()}
        return pd.DataFrame({c: cols[c] for c in names})

    def _analyze(self) -> bool:
        """One analysis of the window; False when there were too few blocks to analyze."""
        from .analysis.detectors import UtilizationParams, analyze

        t0 = time.perf_counter()
        try:
            table = self._table()
            if table.empty or table["step"].nunique() < 4:
                return False
            result = analyze(table, step_resolution=False, utilization=UtilizationParams(bound=self.busy_bound))
            self.analyses += 1
            took = time.perf_counter() - t0
            self.analysis_s += took
            self.analysis_max_s = max(self.analysis_max_s, took)
            latest = max(self._rows)
            missing = np.setdiff1d(np.arange(self.world), self._rows[latest].ranks).tolist()
            new = []
            for f in result.findings:
                key = (f.kind, tuple(f.ranks), f.phase)
                if key in self._seen or f.severity == "info":
                    continue
                self._seen.add(key)
                d = f.to_dict()
                # Each summary row is a block of K steps, numbered by its first step: first_step,
                # last_step and the evidence all use those numbers (one source), and block_steps
                # says that a step number stands for the K steps from it.
                d["block_steps"] = self.every
                d["online"] = True
                d["time_s"] = time.time()
                new.append(d)
                log.warning("telemetry: [online] %s %s: %s", f.severity, f.kind, f.evidence)
            if missing:
                log.warning(
                    "telemetry: [online] ranks %s did not report steps %d-%d",
                    missing,
                    latest * self.every,
                    (latest + 1) * self.every - 1,
                )
            streaks = missing_streaks({b: blk.ranks for b, blk in self._rows.items()}, self.world, self.wait_blocks)
            for rank, first in streaks.items():
                if ("rank_lost", (rank,), None) in self._seen:
                    continue
                self._seen.add(("rank_lost", (rank,), None))
                d = lost_rank_finding(rank, first, latest, self.every)
                new.append(d)
                log.warning("telemetry: [online] %s rank_lost: %s", d["severity"], d["evidence"])
            counts = dict(result.summary.get("by_kind", {}))
            if streaks:
                counts["rank_lost"] = len(streaks)
            self._results.put(OnlineResult(new, result.summary.get("straggler_score", {}), counts))
        except Exception:  # noqa: BLE001
            self.failures += 1
            self._once("analysis", "telemetry: online analysis failed (further failures counted)", exc_info=True)
        return True  # a failed analysis waits its interval too: no retry storm

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        if self._deleter is not None:
            self._deleter.stop(1.0)

    def stats(self) -> dict[str, Any]:
        return {
            "summaries_posted": self.posted,
            "analyses": self.analyses,
            "online_failures": self.failures,
            "online_bad_summaries": self.bad_summaries,
            "analysis_s": round(self.analysis_s, 4),
            "analysis_max_s": round(self.analysis_max_s, 4),
        }


class _Deleter:
    """Deletes rank 0's read keys in the background, one ``delete_key`` each (the store has no
    batched delete), on a connection of its own (``store.clone()``) so that the reads do not wait
    behind them. Keys still queued when the job stops are left: the store ends with the job."""

    def __init__(self, store: Any) -> None:
        self.store = store
        try:
            self.store = store.clone()
            self.store.set_timeout(store.timeout)
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
                except Exception:  # noqa: BLE001
                    self.failed += 1

    def stop(self, timeout: float = 2.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)


def missing_streaks(rows: dict[int, Any], world: int, at_least: int) -> dict[int, int]:
    """Ranks missing from each of the latest ``at_least`` (or more) blocks that other ranks reported:
    rank -> the first block of that run of missing blocks. ``rows``: block -> the ranks that
    reported it (a set or an array)."""
    blocks = sorted(b for b, seen in rows.items() if len(seen))
    if not blocks or world <= 0:
        return {}
    seen = np.zeros((len(blocks), world), dtype=bool)
    for i, b in enumerate(blocks):
        r = np.fromiter(rows[b], dtype=np.int64) if isinstance(rows[b], (set, frozenset)) else np.asarray(rows[b])
        r = r.astype(np.int64, copy=False)
        seen[i, r[(r >= 0) & (r < world)]] = True
    newest_first = seen[::-1]
    run = np.where(newest_first.any(axis=0), newest_first.argmax(axis=0), len(blocks))  # blocks missed since
    lost = np.flatnonzero((run >= at_least) & (run < len(blocks)))  # it reported before: not one never started
    return {int(r): blocks[len(blocks) - int(run[r])] for r in lost}


def lost_rank_finding(rank: int, first_block: int, latest_block: int, every: int) -> dict[str, Any]:
    """Online detection's ``rank_lost``: a rank that stopped posting while its peers went on."""
    from .analysis.findings import Finding

    first, last = first_block * every, (latest_block + 1) * every - 1
    d = Finding(
        kind="rank_lost",
        ranks=[rank],
        phase=None,
        first_step=first,
        last_step=last,
        severity="critical",
        slowdown=1.0,
        evidence=(
            f"rank {rank} posted no summary for steps {first}-{last} while its peers "
            "did (online detection on rank 0): its process died, stopped responding or "
            "left the job"
        ),
        details={"missing_blocks": latest_block - first_block + 1},
    ).to_dict()
    d.update(block_steps=every, online=True, time_s=time.time())
    return d


def _summary_vector(raw: Any, block: int) -> np.ndarray | None:
    """The float64 vector a rank posted for ``block``, or None when ``raw`` is not one: a length
    that is not whole float64s, fewer than the fixed fields, or another block's number."""
    if not isinstance(raw, (bytes, bytearray)) or len(raw) % 8 or len(raw) < 8 * len(FIXED):
        return None
    vec = np.frombuffer(raw, dtype=np.float64)
    return vec if vec[0] == block else None


class OnlineStarter:
    """A pipeline listener that starts online detection once the default process group exists.

    ``telemetry.init`` usually runs after ``init_process_group``, and detection starts at once; when
    it ran first, each pipeline tick checks (one cheap call) until the group appears. Starting on
    rank 0 imports the analyzer there (about 0.5 s, once). If the job ends with no group, that is
    said once at shutdown.
    """

    def __init__(
        self, make: Callable[[Any], OnlineDetector], find_store: Callable[[], Any | None] | None = None
    ) -> None:
        self._make = make
        self._find_store = find_store or default_store
        self.detector: OnlineDetector | None = None
        self._failed = False
        self.try_start()

    def try_start(self) -> bool:
        if self.detector is None and not self._failed:
            store = self._find_store()
            if store is not None:
                try:
                    self.detector = self._make(store)
                except Exception as exc:  # noqa: BLE001 - online detection is optional; training is not
                    self._failed = True
                    log.warning("telemetry: online detection off (%s)", exc)
        return self.detector is not None

    def on_records(self, records: Sequence[StepRecord]) -> None:
        if self.try_start():
            self.detector.on_records(records)

    def poll(self) -> list[OnlineResult]:
        return self.detector.poll() if self.detector is not None else []

    def stats(self) -> dict[str, Any]:
        return self.detector.stats() if self.detector is not None else {"online_started": False}

    def stop(self) -> None:
        if self.detector is not None:
            self.detector.stop()
        elif not self._failed:
            log.info(
                "telemetry: online detection never started: no torch.distributed process group "
                "appeared (init_process_group) while telemetry ran"
            )

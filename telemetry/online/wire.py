"""Online detection's wire format: what each rank posts to the rendezvous store, and how rank 0
reads it back.

Per block of K steps a rank posts one packed array of float64 under :func:`summary_key`
(``s/{block}/{rank}``): the :data:`FIXED` fields (block, steps, then medians of step time, compute,
comm, data, then ``traced``: how many trace extents end the vector, 0 or 2K), then the median compute
of each phase, in the order of the rank's phase names, which it posts once, comma-separated, under
:func:`phases_key` (``phases/{rank}``), then, when the rank exports traces, the extent of its span
(start, end: :func:`telemetry.pipeline.records.span_extent`) of each of the block's K steps that it
traced, NaN for the others: rank 0 builds each traced step's trace root from them (:func:`trace_roots`). Each key is written
here only; the store adds its prefix ``telemetry/`` (see :func:`.starter.default_store`).
"""

from __future__ import annotations

import collections
from typing import Callable, Sequence

import numpy as np

from ..pipeline.records import StepRecord, span_extent

FIXED = ("block", "steps", "duration_s", "compute_s", "comm_s", "data_s", "traced")
TRACED = FIXED.index("traced")


def summary_key(block: int, rank: int) -> str:
    """The store key of ``rank``'s summary vector of ``block``."""
    return f"s/{block}/{rank}"


def phases_key(rank: int) -> str:
    """The store key of ``rank``'s phase names (posted once)."""
    return f"phases/{rank}"


def rank_of(key: str) -> int:
    """The rank whose key ``key`` is (a summary key or a phase-names key)."""
    return int(key.rsplit("/", 1)[1])


def encode_phases(phases: tuple[str, ...] | None) -> str:
    return ",".join(phases or ())


def decode_phases(raw: object) -> list[str] | None:
    """The phase names in a ``phases/{rank}`` value, or None when it is not text."""
    try:
        text = raw.decode() if isinstance(raw, (bytes, bytearray)) else str(raw)
    except Exception:  # noqa: BLE001 - not text: no phase columns for this rank
        return None
    return [p for p in text.split(",") if p]


class BlockSummarizer:
    """Per rank: step records -> one summary vector per block of K steps. The phases are those of
    the first block (posted once by name, so that rank 0 can read the vectors). With ``sampler``
    (the OTLP sink's choice of traced steps, asked of every record in order), the vector ends with
    the extents of the traced steps."""

    def __init__(self, every: int, sampler: Callable[[StepRecord], bool] | None = None) -> None:
        self.every = every
        self.sampler = sampler
        self.phases: tuple[str, ...] | None = None
        self._open: dict[int, list[StepRecord]] = collections.defaultdict(list)
        self._traced: dict[int, dict[int, tuple[float, float]]] = collections.defaultdict(dict)

    def add(self, records: Sequence[StepRecord]) -> list[np.ndarray]:
        done = []
        if self.phases is None and records:
            self.phases = tuple(sorted({p for r in records for p in r.phases} - {"data"}))
        for r in records:
            block = r.step // self.every
            self._open[block].append(r)
            if self.sampler is not None and self.sampler(r):
                self._traced[block][r.step] = span_extent(r)
            if len(self._open[block]) >= self.every:
                done.append(self._pack(block, self._open.pop(block)))
        for b in [b for b in self._open if b < (records[-1].step // self.every if records else 0) - 1]:
            done.append(self._pack(b, self._open.pop(b)))  # a block that will not fill (skipped steps)
        return done

    def flush(self) -> list[np.ndarray]:
        """The vectors of the blocks still open (the job's last steps, at shutdown), fewer steps each."""
        return [self._pack(b, self._open.pop(b)) for b in sorted(self._open)]

    def _pack(self, block: int, recs: list[StepRecord]) -> np.ndarray:
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
            0.0 if self.sampler is None else 2.0 * self.every,
        ]
        assert self.phases is not None  # named by the first records added
        for p in self.phases:
            row.append(med([r.phases.get(p, 0.0) - r.phase_comm.get(p, 0.0) for r in recs]))
        if self.sampler is not None:
            extents = np.full((self.every, 2), np.nan)
            for step, (start, end) in self._traced.pop(block, {}).items():
                extents[step - block * self.every] = (start, end)
            row.extend(extents.ravel().tolist())
        return np.asarray(row, dtype=np.float64)


class Block:
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
    def of(cls, vectors: dict[int, np.ndarray]) -> "Block":
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


def parse_block(block: int, got: list[tuple[int, str, bytes]]) -> tuple[Block, list[tuple[int, int]]]:
    """The valid summary vectors of ``got`` (rank, key, raw value) as a :class:`Block`, and the
    others as (rank, length in bytes, -1 when it has none), in ``got``'s order. Vectors of one
    length are read as one matrix."""
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
    rejected = []
    for i in sorted(bad):
        r, _, raw = got[i]
        rejected.append((r, len(raw) if hasattr(raw, "__len__") else -1))
    return Block(parts), rejected


def summary_vector(raw: object, block: int) -> np.ndarray | None:
    """The float64 vector a rank posted for ``block``, or None when ``raw`` is not one: a length
    that is not whole float64s, fewer than the fixed fields, or another block's number."""
    if not isinstance(raw, (bytes, bytearray)) or len(raw) % 8 or len(raw) < 8 * len(FIXED):
        return None
    vec = np.frombuffer(raw, dtype=np.float64)
    return vec if vec[0] == block else None


def trace_roots(block: int, blk: Block, every: int) -> list[tuple[int, float, float, int]]:
    """The traced steps of ``block`` across the ranks that posted their extents: per step that any
    rank traced, ``(step, earliest start, latest end, how many ranks traced it)``."""
    starts, ends = [], []
    n = 2 * every
    for _, mat in blk.parts:
        rows = mat[mat[:, TRACED] == n]
        if len(rows) and mat.shape[1] >= len(FIXED) + n:
            ext = rows[:, -n:].reshape(len(rows), every, 2)
            starts.append(ext[:, :, 0])
            ends.append(ext[:, :, 1])
    if not starts:
        return []
    start, end = np.vstack(starts), np.vstack(ends)
    count = np.isfinite(start).sum(axis=0)
    out = []
    for i in np.flatnonzero(count):
        col_s, col_e = start[:, i], end[:, i]
        out.append((block * every + int(i), float(np.nanmin(col_s)), float(np.nanmax(col_e)), int(count[i])))
    return out

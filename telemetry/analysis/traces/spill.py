"""Bounded memory for a trace of any size: its events, reduced to a few typed numbers each, kept in
time buckets (:class:`Spill`: in memory while small, in a temporary file past
:data:`SPILL_RECORDS`), then read back a window of consecutive buckets at a time, in time order
(:func:`windows`), by reducers that carry what a window leaves open to the next: the reach of each
union (:class:`Union`), a stream's last activity, a thread's open operators. What is held at once is
one window (about :data:`WINDOW_RECORDS` records) and the buffers, not the trace.

A window ``[lo, hi)`` holds every record whose time key (its start) lies in it; a record may end
after ``hi``: reducers clip it there and carry the rest. The temporary file (a record's few typed
numbers per event: a fraction of the trace's size) is unlinked from the start and gone when the
reading ends.
"""

from __future__ import annotations

import math
import os
import tempfile
from typing import IO, Iterator, cast

import numpy as np

BUCKET_US = 100_000.0  # a time bucket: 100 ms of trace time
SPILL_RECORDS = 262_144  # records buffered (every spill together) before they go to the file
WINDOW_RECORDS = 262_144  # a window gathers consecutive buckets up to about this many records


class Spill:
    """Records of one structured ``dtype`` in time buckets of :data:`BUCKET_US`. Appended one at a
    time (:meth:`add`, with its time key); buffered as tuples, written to a temporary file in chunks
    when the buffers of every spill sharing ``budget`` pass :data:`SPILL_RECORDS`; read back a bucket
    at a time (:meth:`take`). A trace that never fills the buffers never touches the disk."""

    def __init__(self, dtype: np.dtype, budget: SpillBudget) -> None:
        self.dtype = np.dtype(dtype)
        self.budget = budget
        self.buf: dict[int, list[tuple]] = {}
        self.chunks: dict[int, list[tuple[int, int]]] = {}  # bucket -> [(offset, records)] in the file
        self.counts: dict[int, int] = {}
        self.file: IO[bytes] | None = None
        self.size = 0
        budget.spills.append(self)

    def add(self, t: float, rec: tuple) -> None:
        key = int(t // BUCKET_US) if math.isfinite(t) else 0
        b = self.buf.get(key)
        if b is None:
            b = self.buf[key] = []
        b.append(rec)
        self.counts[key] = self.counts.get(key, 0) + 1
        self.budget.held += 1
        if self.budget.held >= SPILL_RECORDS:
            self.budget.flush()

    def flush(self) -> None:
        if not self.buf:
            return
        if self.file is None:
            self.file = tempfile.TemporaryFile(dir=self.budget.dir)
        self.file.seek(0, os.SEEK_END)
        for key, recs in self.buf.items():
            data = np.array(recs, dtype=self.dtype).tobytes()
            self.chunks.setdefault(key, []).append((self.size, len(recs)))
            self.file.write(data)
            self.size += len(data)
        self.buf = {}

    def take(self, key: int) -> np.ndarray:
        """Bucket ``key``'s records (and frees its buffer)."""
        parts = []
        for off, n in self.chunks.pop(key, ()):
            file = cast(IO[bytes], self.file)  # its chunks were written to it
            file.seek(off)
            parts.append(np.frombuffer(file.read(n * self.dtype.itemsize), dtype=self.dtype))
        recs = self.buf.pop(key, None)
        if recs:
            parts.append(np.array(recs, dtype=self.dtype))
        if not parts:
            return np.zeros(0, dtype=self.dtype)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


class SpillBudget:
    """The buffers' bound, shared by the spills of one pass: past it, every spill writes out."""

    def __init__(self, folder: str | None = None) -> None:
        self.spills: list[Spill] = []
        self.held = 0
        self.dir = folder

    def flush(self) -> None:
        for s in self.spills:
            s.flush()
        self.held = 0

    def close(self) -> None:
        for s in self.spills:
            s.close()


def windows(
    spills: dict[str, Spill], target: int | None = None
) -> Iterator[tuple[float, float, dict[str, np.ndarray]]]:
    """``(lo, hi, {name: records})`` for consecutive windows of buckets, in time order: each window
    gathers buckets until it holds about ``target`` records (:data:`WINDOW_RECORDS`); ``lo`` is the
    previous window's ``hi`` (-inf for the first), so that every record's key lies in its window."""
    target = WINDOW_RECORDS if target is None else target
    keys = sorted(set().union(*(s.counts for s in spills.values())))
    lo = -math.inf
    group: list[int] = []
    held = 0
    for i, key in enumerate(keys):
        group.append(key)
        held += sum(s.counts.get(key, 0) for s in spills.values())
        if held >= target or i == len(keys) - 1:
            hi = math.inf if i == len(keys) - 1 else (group[-1] + 1) * BUCKET_US
            out = {}
            for name, s in spills.items():
                parts = [s.take(k) for k in group]
                out[name] = np.concatenate(parts) if len(parts) > 1 else parts[0]
            yield lo, hi, out
            lo, group, held = hi, [], 0


def merge(ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intervals merged where they overlap or touch, as HTA merges them (sorted by start)."""
    if len(ts) == 0:
        return ts, end
    order = np.argsort(ts, kind="stable")
    ts, end = ts[order], end[order]
    reach = np.maximum.accumulate(end)
    new = np.empty(len(ts), dtype=bool)
    new[0] = True
    new[1:] = ts[1:] > reach[:-1]
    starts = np.nonzero(new)[0]
    return ts[starts], np.maximum.reduceat(end, starts)


class Union:
    """The length of a union of intervals fed a window at a time: in each window ``[lo, hi)`` the
    window's intervals clipped to it, and the earlier ones' reach (they all start before ``lo``, so
    what they cover of it is ``[lo, reach)``)."""

    def __init__(self) -> None:
        self.total = 0.0
        self.reach = -math.inf
        self.first = math.inf  # the earliest start, the latest end: the span
        self.last = -math.inf

    def pieces(self, ts: np.ndarray, end: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
        """The union's merged pieces inside ``[lo, hi)``, and the reach carried on."""
        a, b = ts, np.minimum(end, hi)
        if self.reach > lo:
            a = np.concatenate([[lo], a])
            b = np.concatenate([[min(self.reach, hi)], b])
        if len(ts):
            self.reach = max(self.reach, float(end.max()))
            self.first = min(self.first, float(ts.min()))
            self.last = max(self.last, float(end.max()))
        return merge(a, b)

    def add(self, ts: np.ndarray, end: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
        m_ts, m_end = self.pieces(ts, end, lo, hi)
        self.total += float(np.clip(m_end - m_ts, 0, None).sum())
        return m_ts, m_end


def covered(a_ts: np.ndarray, a_end: np.ndarray, b_ts: np.ndarray, b_end: np.ndarray) -> float:
    """How much of the merged intervals ``a`` the merged intervals ``b`` cover (both sorted, disjoint)."""
    if len(a_ts) == 0 or len(b_ts) == 0:
        return 0.0
    cum = np.concatenate([[0.0], np.cumsum(b_end - b_ts)])

    def before(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(b_ts, t, side="right")  # intervals starting at or before t
        last = np.clip(i - 1, 0, None)
        return cum[i] - np.where(i > 0, np.clip(b_end[last] - t, 0, None), 0.0)

    return float((before(a_end) - before(a_ts)).sum())


class Quantiles:
    """Percentiles of non-negative values fed in batches, in bounded memory: zeros counted apart, the
    rest in logarithmic bins 0.01% wide from 1e-3 to 1e10 (values outside go to the end bins), the
    percentile interpolated between order statistics as ``numpy.percentile`` does, each read as its
    bin's value where the bin holds one value (whole µs mostly do), else as its middle (within 0.005%
    of the value)."""

    STEP = math.log(1.0001)
    LOW = math.log(1e-3)
    BINS = int((math.log(1e10) - math.log(1e-3)) / math.log(1.0001)) + 1

    def __init__(self) -> None:
        self.hist: np.ndarray | None = None
        self.lo: np.ndarray | None = None  # each bin's least and largest value: exact where they are one
        self.hi: np.ndarray | None = None
        self.zeros = 0
        self.n = 0

    def add(self, v: np.ndarray) -> None:
        if len(v) == 0:
            return
        self.n += len(v)
        pos = v[v > 0]
        self.zeros += len(v) - len(pos)
        if len(pos):
            if self.hist is None:
                self.hist = np.zeros(self.BINS, dtype=np.int64)
                self.lo, self.hi = np.full(self.BINS, np.inf), np.full(self.BINS, -np.inf)
            i = np.clip(((np.log(pos) - self.LOW) / self.STEP).astype(np.int64), 0, self.BINS - 1)
            self.hist += np.bincount(i, minlength=self.BINS)
            np.minimum.at(cast(np.ndarray, self.lo), i, pos)  # set with hist
            np.maximum.at(cast(np.ndarray, self.hi), i, pos)

    def _value(self, k: int) -> float:
        if k < self.zeros or self.hist is None:
            return 0.0
        i = int(np.searchsorted(np.cumsum(self.hist), k - self.zeros, side="right"))
        lo, hi = cast(np.ndarray, self.lo), cast(np.ndarray, self.hi)  # set with hist
        if lo[i] == hi[i]:
            return float(lo[i])
        return min(max(math.exp(self.LOW + (i + 0.5) * self.STEP), float(lo[i])), float(hi[i]))

    def percentile(self, p: float) -> float:
        pos = (self.n - 1) * p / 100.0
        k = int(math.floor(pos))
        a = self._value(k)
        b = self._value(min(k + 1, self.n - 1))
        return a + (b - a) * (pos - k)

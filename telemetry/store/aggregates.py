"""Per-rank aggregates over blocks of steps: the run store's coarse level.

When a segment is sealed (and when ``telemetry simulate`` writes one) its step columns are also
summarized per rank and block of ``BLOCK`` steps (:func:`block_aggregates`; the block of step s is
s // BLOCK): one row per (rank, block) with ``C|n``, ``C|sum``, ``C|min``, ``C|max`` and ``C|p50`` (the
exact median) of each numeric step column C, the derived ``compute_s`` and ``compute.<phase>_s``
included; written before the step columns (:func:`write_file`, checksummed) and merged by compaction.
Readers :func:`combine` the rows of a block two segments share (the median then approximate). The
columns and the rules: docs/runs.md, "The coarse level: blocks of 64 steps".
"""

from __future__ import annotations

import struct
import zlib
from typing import Callable, Iterable

import numpy as np
import pyarrow as pa

from ..steptable.names import zero_when_absent
from . import layout

BLOCK = 64  # steps per block
STATS = ("n", "sum", "min", "max", "p50")
_KEYS = ("rank", "step", "ok", "spans_dropped")


def _value_columns(names: Iterable[str]) -> list[str]:
    return [n for n in names if n not in _KEYS and n != "start_s" and not n.startswith("op.")]


def _phases(names: Iterable[str]) -> list[str]:
    return [n for n in names if n.endswith("_s") and "." not in n and n not in ("start_s", "duration_s", "comm_s")]


def _values(table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name)
    if pa.types.is_boolean(col.type):
        col = col.cast(pa.float64())
    v = col.to_numpy(zero_copy_only=False).astype(np.float64, copy=True)
    if zero_when_absent(name) and name not in ("start_s", "duration_s"):
        v[np.isnan(v)] = 0.0
    return v


def block_aggregates(table: pa.Table, block: int = BLOCK) -> pa.Table | None:
    """A table of step columns (one rank's segment, or any) -> its per-(rank, block) aggregates,
    sorted by rank and block; None when it has no rows or lacks rank and step."""
    names = table.column_names
    if not table.num_rows or "rank" not in names or "step" not in names:
        return None
    rank = table.column("rank").to_numpy(zero_copy_only=False).astype(np.int64)
    step = table.column("step").to_numpy(zero_copy_only=False).astype(np.int64)
    blk = step // block
    order = np.lexsort((step, blk, rank))
    rank, step, blk = rank[order], step[order], blk[order]
    cut = np.flatnonzero((np.diff(rank) != 0) | (np.diff(blk) != 0)) + 1
    starts = np.concatenate([[0], cut])
    sizes = np.diff(np.concatenate([starts, [len(rank)]]))
    out: dict[str, np.ndarray] = {
        "rank": rank[starts],
        "block": blk[starts],
        "n": sizes.astype(np.int64),
        "first_step": np.minimum.reduceat(step, starts),
        "last_step": np.maximum.reduceat(step, starts),
    }
    if "start_s" in names:
        start = _values(table, "start_s")[order]
        out["start_s|min"] = _reduce(np.fmin, start, starts, np.inf)
        out["start_s|max"] = _reduce(np.fmax, start, starts, -np.inf)
    columns = {c: _values(table, c)[order] for c in _value_columns(names)}
    if "duration_s" in columns:
        comm = columns.get("comm_s", np.zeros(len(rank)))
        columns["compute_s"] = columns["duration_s"] - np.nan_to_num(comm)
    for p in _phases(names):
        inside = columns.get(f"comm.{p}", None)
        columns[f"compute.{p}"] = columns[p] - (0.0 if inside is None else inside)
    equal = len(set(sizes.tolist())) == 1
    for c, v in columns.items():
        have = ~np.isnan(v)
        out[f"{c}|n"] = np.add.reduceat(have.astype(np.int64), starts)
        out[f"{c}|sum"] = np.add.reduceat(np.where(have, v, 0.0), starts)
        out[f"{c}|min"] = _reduce(np.fmin, v, starts, np.inf)
        out[f"{c}|max"] = _reduce(np.fmax, v, starts, -np.inf)
        out[f"{c}|p50"] = _medians(v, starts, sizes, equal)
    return pa.table(out)


def _reduce(fn: np.ufunc, v: np.ndarray, starts: np.ndarray, empty: float) -> np.ndarray:
    r = fn.reduceat(np.where(np.isnan(v), empty, v), starts)
    r[np.isinf(r) & (r == empty)] = np.nan  # a block with no value in this column
    return r


def _medians(v: np.ndarray, starts: np.ndarray, sizes: np.ndarray, equal: bool) -> np.ndarray:
    """The exact median of each group's values (NaN left out; NaN for a group without any): the
    groups padded with NaN into one matrix, sorted along rows (NaN last), the middle one or two taken."""
    width = int(sizes.max())
    if equal:
        grid = v.reshape(len(starts), width).copy()
    else:
        grid = np.full((len(starts), width), np.nan)
        col = np.arange(len(v)) - np.repeat(starts, sizes)
        grid[np.repeat(np.arange(len(starts)), sizes), col] = v
    grid.sort(axis=1)
    k = (~np.isnan(grid)).sum(axis=1)
    rows = np.arange(len(starts))
    lo = grid[rows, np.maximum((k - 1) // 2, 0)]
    hi = grid[rows, np.maximum(k // 2, 0)]
    out = (lo + hi) / 2.0
    out[k == 0] = np.nan
    return out


def combine(table: pa.Table) -> pa.Table:
    """Rows of the same (rank, block) (a block two segments share) -> one, sorted by rank and block.
    Nothing to do, and the table returned as it is, when no two rows share one."""
    if not table.num_rows:
        return table
    rank = table.column("rank").to_numpy()
    blk = table.column("block").to_numpy()
    order = np.lexsort((blk, rank))
    rank, blk = rank[order], blk[order]
    new = np.concatenate([[True], (np.diff(rank) != 0) | (np.diff(blk) != 0)])
    if new.all():
        return table.take(pa.array(order)) if (np.diff(order) < 0).any() else table
    starts = np.flatnonzero(new)
    out: dict[str, np.ndarray] = {"rank": rank[starts], "block": blk[starts]}
    rows = table.column("n").to_numpy(zero_copy_only=False)[order]
    for name in table.column_names:
        if name in ("rank", "block"):
            continue
        v = table.column(name).to_numpy(zero_copy_only=False).astype(np.float64)[order]
        stat = name.rsplit("|", 1)[-1]
        if name in ("n", "first_step", "last_step"):
            fn = {"n": np.add, "first_step": np.minimum, "last_step": np.maximum}[name]
            out[name] = fn.reduceat(v, starts).astype(np.int64)
        elif stat in ("n", "sum"):
            out[name] = np.add.reduceat(np.nan_to_num(v), starts)
            if stat == "n":
                out[name] = out[name].astype(np.int64)
        elif stat == "min":
            out[name] = _reduce(np.fmin, v, starts, np.inf)
        elif stat == "max":
            out[name] = _reduce(np.fmax, v, starts, -np.inf)
        elif stat == "p50":
            weight = np.where(np.isnan(v), 0.0, rows)
            total = np.add.reduceat(weight, starts)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[name] = np.add.reduceat(np.nan_to_num(v) * weight, starts) / total
    return pa.table(out)


# On disk: an Arrow IPC stream (uncompressed and small: read whole faster than a Parquet file of its ~90
# columns reads its footer alone) and a trailer: MAGIC and the stream's CRC-32, so that a flipped byte is
# an unreadable file, said and summarized from the segment instead.
MAGIC = b"TTAG"
_TRAILER = struct.Struct("<4sI")


def write_file(path: str, table: pa.Table, durable: bool, before_rename: Callable[[], None] | None = None) -> None:
    """``table`` to ``path`` (a temporary name, renamed; ``before_rename`` runs between)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    body = sink.getvalue().to_pybytes()
    layout.write_atomic(path, lambda f: f.write(body + _TRAILER.pack(MAGIC, zlib.crc32(body))), durable, before_rename)


def read_file(path: str) -> pa.Table:
    """An aggregates file; raises ValueError when its checksum or trailer is wrong (damaged, cut)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < _TRAILER.size:
        raise ValueError("too short to be an aggregates file")
    magic, crc = _TRAILER.unpack_from(data, len(data) - _TRAILER.size)
    body = memoryview(data)[: len(data) - _TRAILER.size]
    if magic != MAGIC or zlib.crc32(body) != crc:
        raise ValueError("checksum mismatch (damaged or cut short)")
    return pa.ipc.open_stream(pa.py_buffer(body)).read_all()

"""A long run's picture step by step, kept by ``telemetry compact`` beside its analysis (:mod:`.kept`):
what the dashboard draws when it zooms into some steps of every rank, read from one file instead of
every rank's files (slow at many ranks: bench/RESULTS.md, "Dashboard at 10^8 records").

``RUN/summary/picture.parquet`` (:func:`write`, :func:`read`) holds per step, for each band of
consecutive ranks (at most :data:`BANDS`), the band's highest of each series a rank x step chart draws
(:func:`series_of`), float32 seconds, and on each step's first band's row the p50 and p95 of the step
time over every rank. Kept only for a run of more than :data:`BANDS` ranks; used only while its
fingerprint is the run's. Written in windows of steps, so memory stays bounded whatever the run's
length. More: docs/runs.md, "A long run's analysis, kept".
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import BinaryIO, cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ...steptable.matrix import StepMatrix, from_table, nan_to_zero, nanmax_runs, nanpercentile
from ...steptable.table import TableError, columns_to_table
from ...store import layout
from . import kept

FILE = "picture.parquet"
BANDS = 256  # at most this many bands of consecutive ranks (a heatmap draws at most 256)
WINDOW_VALUES = 100_000_000  # step times held at once for the percentiles (float32: 400 MB)
READ_ROWS = 1_000_000  # rows read and made a matrix at once
P50, P95 = "p50_s", "p95_s"
_BANDS_KEY = b"telemetry.bands"
_ROW_GROUP_STEPS = 64  # a row group holds this many steps' rows, so a zoom reads a few
_PERCENTILE_STEPS = 500  # steps whose percentiles are taken at once


@dataclass
class Picture:
    """Some steps of a long run as :func:`read` gives them: ``matrix``'s rows are bands of ranks (its
    ``ranks`` each band's first rank, ``last`` its last), each value the band's highest; ``p50`` and
    ``p95`` per step over every rank (seconds)."""

    matrix: StepMatrix
    last: np.ndarray
    p50: np.ndarray
    p95: np.ndarray


def series_of(m: StepMatrix) -> dict[str, np.ndarray]:
    """The (R, S) series of ``m`` a picture keeps, by column name."""
    out = {"compute": m.compute, "data": m.data}
    if m.comm is not None:
        out["blocked"] = m.comm
    for p, a in m.phase_compute.items():
        if p != "data":
            out["phase." + p] = a
    for c in m.columns:
        if c.startswith("dev.") and not c.startswith("dev.throttle_"):
            out[c] = cast(np.ndarray, m.extra(c))  # a column it has
    return out


def bands_of(ranks: np.ndarray, height: int) -> list[tuple[int, int]]:
    """Sorted ``ranks`` in bands of ``height`` consecutive ranks (the last may hold fewer): each band's
    first and last rank."""
    return [(int(ranks[i]), int(ranks[min(i + height, len(ranks)) - 1])) for i in range(0, len(ranks), height)]


def write(path: str, where: str, fp: str, names: list[str], ranks: np.ndarray, steps: tuple[int, int]) -> str:
    """Keep the picture of run ``path`` (its fingerprint ``fp``) in ``where``: ``names`` (from
    :func:`series_of` of the run's blocks) for steps ``steps`` of ``ranks``. Returns what was done."""
    from ...store.segments import read_step_columns

    ranks = np.sort(np.asarray(ranks, dtype=np.int64))
    if len(ranks) <= BANDS:
        return f"no picture kept: {len(ranks)} ranks (a zoom reads {BANDS} ranks or fewer row by row)"
    height = -(-len(ranks) // BANDS)  # ranks a band holds (the last band fewer)
    bands = bands_of(ranks, height)
    firsts = np.array([b[0] for b in bands], dtype=np.int64)
    first, last = steps
    width = max(1, min(last - first + 1, WINDOW_VALUES // len(ranks)))
    per_read = max(height, (max(1, READ_ROWS // width) // height) * height)  # whole bands
    fields = [pa.field("step", pa.int64()), pa.field("band", pa.int32())]
    fields += [pa.field(n, pa.float32()) for n in names] + [pa.field(P50, pa.float32()), pa.field(P95, pa.float32())]
    meta = {kept.FP_KEY: fp.encode(), _BANDS_KEY: json.dumps(bands).encode()}
    schema = pa.schema(fields, metadata=meta)
    said: list[str] = []
    rows = 0

    def windows(f: BinaryIO) -> None:
        nonlocal rows
        with pq.ParquetWriter(f, schema, compression="zstd") as out:
            for a in range(first, last + 1, width):
                b = min(a + width - 1, last)
                highest = {n: np.full((len(bands), b - a + 1), np.nan, dtype=np.float32) for n in names}
                total = np.full((len(ranks), b - a + 1), np.nan, dtype=np.float32)
                for i in range(0, len(ranks), per_read):
                    got = read_step_columns(path, said, (a, b), ranks[i : i + per_read].tolist())
                    if got is None or not got.num_rows:
                        continue
                    try:
                        m = from_table(columns_to_table(got, warnings=said))
                    except TableError as exc:  # left out of the picture (empty there), and said
                        said.append(
                            f"steps {a}-{b} of ranks {ranks[i]}-{ranks[min(i + per_read, len(ranks)) - 1]}: {exc}"
                        )
                        continue
                    cols = m.steps.astype(np.int64) - a
                    keep = (cols >= 0) & (cols <= b - a)
                    at = np.searchsorted(ranks, m.ranks.astype(np.int64))
                    total[np.ix_(at, cols[keep])] = (m.duration + nan_to_zero(m.data))[:, keep]
                    band = np.searchsorted(firsts, m.ranks.astype(np.int64), side="right") - 1
                    starts = np.flatnonzero(np.r_[True, band[1:] != band[:-1]])
                    have = series_of(m)
                    for n in names:
                        if n not in have:
                            continue
                        highest[n][np.ix_(band[starts], cols[keep])] = nanmax_runs(have[n][:, keep], starts)
                rows += _emit(out, schema, a, highest, total)

    layout.write_atomic(os.path.join(where, FILE), windows)
    heard = f"; its read said {len(said)} thing(s), the first: {said[0]}" if said else ""
    return f"kept its picture ({rows:,} rows: {len(bands)} bands of up to {height} ranks, every step){heard}"


def _emit(out: pq.ParquetWriter, schema: pa.Schema, a: int, highest: dict[str, np.ndarray], total: np.ndarray) -> int:
    """Write a window's rows (steps from ``a``; a step no rank has is left out); returns how many."""
    present = ~np.isnan(total).all(axis=0)
    if not present.any():
        return 0
    idx = np.flatnonzero(present)
    p50, p95 = np.empty(len(idx)), np.empty(len(idx))
    for i in range(0, len(idx), _PERCENTILE_STEPS):  # a few steps at a time: a sort's copy of every rank's is GBs
        part = idx[i : i + _PERCENTILE_STEPS]
        with np.errstate(all="ignore"):
            p50[i : i + len(part)], p95[i : i + len(part)] = nanpercentile(total[:, part], [50, 95], axis=0)
    n_bands = next(iter(highest.values())).shape[0]
    cols: dict[str, np.ndarray] = {
        "step": np.repeat(a + idx, n_bands).astype(np.int64),
        "band": np.tile(np.arange(n_bands, dtype=np.int32), len(idx)),
    }
    for n, arr in highest.items():
        cols[n] = arr[:, idx].T.ravel()
    for name, p in ((P50, p50), (P95, p95)):
        col = np.full((len(idx), n_bands), np.nan, dtype=np.float32)
        col[:, 0] = p
        cols[name] = col.ravel()
    table = pa.table({f.name: pa.array(cols[f.name], type=f.type, from_pandas=True) for f in schema}, schema=schema)
    out.write_table(table, row_group_size=_ROW_GROUP_STEPS * n_bands)
    return table.num_rows


def current(where: str, fp: str) -> bool:
    """Whether the picture kept in ``where`` (the run's summary directory) is of the run as it is (its
    fingerprint ``fp``)."""
    try:
        return (pq.read_schema(os.path.join(where, FILE)).metadata or {}).get(kept.FP_KEY, b"").decode() == fp
    except (OSError, ValueError, pa.ArrowException):
        return False


def read(where: str, steps: tuple[int, int], fp: str) -> Picture | None:
    """Steps ``steps`` of the picture kept in ``where`` (the run's summary directory) while it is of the
    run as it is (its fingerprint ``fp``); None when there is none, it is stale or does not read, or it
    holds none of those steps."""
    where = os.path.join(where, FILE)
    try:  # a missing file too: None
        pf = pq.ParquetFile(where)
        meta = pf.schema_arrow.metadata or {}
        if meta.get(kept.FP_KEY, b"").decode() != fp:
            return None
        bands = json.loads(meta[_BANDS_KEY])
        t = pq.read_table(where, filters=[("step", ">=", steps[0]), ("step", "<=", steps[1])])
    except (OSError, ValueError, KeyError, pa.ArrowException):
        return None
    if not t.num_rows:
        return None
    step = t["step"].to_numpy()
    band = t["band"].to_numpy()
    step_ids = np.unique(step)
    si = np.searchsorted(step_ids, step)
    shape = (len(bands), len(step_ids))

    def grid(name: str) -> np.ndarray:
        out = np.full(shape, np.nan)
        out[band, si] = t[name].to_numpy(zero_copy_only=False)
        return out

    names = [n for n in t.column_names if n not in ("step", "band", P50, P95)]
    first_band = band == 0
    p = {n: np.full(len(step_ids), np.nan) for n in (P50, P95)}
    for n in p:
        p[n][si[first_band]] = t[n].to_numpy(zero_copy_only=False)[first_band]
    data = grid("data")
    r_idx, s_idx = np.indices(shape).reshape(2, -1)
    m = StepMatrix(
        ranks=np.array([b[0] for b in bands]),
        steps=step_ids,
        duration=np.full(shape, np.nan),  # not kept: a band's highest step time is not a picture's
        comm=grid("blocked") if "blocked" in names else None,
        phases={"data": data},
        phase_compute={n.split(".", 1)[1]: grid(n) for n in names if n.startswith("phase.")} | {"data": data},
        tokens=None,
        compute=grid("compute"),
        groups=np.zeros(len(bands), dtype=int),
        columns={n: grid(n).ravel() for n in names if n.startswith("dev.")},
        index=(r_idx, s_idx),
    )
    return Picture(m, np.array([b[1] for b in bands]), p[P50], p[P95])


def has_picture(path: str) -> bool:
    """Whether ``telemetry compact`` kept the run's picture (whether it is still the run's is checked
    when it is read: :func:`read_kept`)."""
    return os.path.exists(os.path.join(path, kept.DIR, FILE))


def read_kept(path: str, steps: tuple[int, int]) -> Picture | None:
    """Steps ``steps`` of the run's kept picture while it is the run's; None otherwise."""
    if not has_picture(path):
        return None  # none kept: the run's fingerprint (a walk of ranks/) not taken
    fp = kept.fingerprint(path)
    return None if fp is None else read(os.path.join(path, kept.DIR), steps, fp)

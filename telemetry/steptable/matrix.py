"""The steps table as dense (rank x step) arrays, the shape every detector works on.

Missing (rank, step) cells are NaN. ``compute`` is the time a rank was busy with its own work:
``duration_s - comm_s`` when the table says how much of each phase was spent blocked in
collectives (``comm.<phase>_s``, as this library writes), else the sum of its phases but the data
wait (tables whose phases are pure compute, such as converted per-operation traces), else
``duration_s - comm_s``. ``groups`` are the peer groups: the pipeline stage when the table has a
``stage`` (or ``pp_rank``) column, else one group.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Sequence, cast

import numpy as np
import pandas as pd

from .table import ROW_STEPS, phase_names


@dataclass(frozen=True)
class StepMatrix:
    ranks: np.ndarray  # (R,) rank ids
    steps: np.ndarray  # (S,) step ids
    duration: np.ndarray  # (R, S)
    comm: np.ndarray | None  # (R, S) or None when the table has no comm_s
    phases: dict[str, np.ndarray]  # name -> (R, S) seconds in the phase
    phase_compute: dict[str, np.ndarray]  # name -> (R, S) phase time not blocked in collectives
    tokens: np.ndarray | None  # (S,) tokens of all ranks per step
    compute: np.ndarray  # (R, S) busy time, see the module doc
    groups: np.ndarray  # (R,) peer group id (pipeline stage), 0 when unknown
    columns: dict[str, np.ndarray]  # other numeric columns (dev.*, comm_group.*, io.*, mfu), one value per row
    index: tuple[np.ndarray, np.ndarray]  # (rank index, step index) of each row
    nodes: np.ndarray | None = None  # (R,) the node (host) of each rank, from a node or host column
    step_start: np.ndarray | None = None  # (S,) the earliest start_s of each step over ranks (epoch s)
    # (S,) how many of the job's steps each column stands for: a window of a live job read from
    # Prometheus (the table's row_steps, median over ranks); None: one step each
    weight: np.ndarray | None = None
    cache: dict = field(default_factory=dict, compare=False, repr=False)  # derived arrays

    def extra(self, name: str) -> np.ndarray | None:
        """(R, S) grid of another numeric column (dev.*, mfu), built on first use."""
        if name not in self.columns:
            return None
        key = ("extra", name)
        if key not in self.cache:
            out = np.full((self.n_ranks, self.n_steps), np.nan)
            out[self.index] = self.columns[name]
            self.cache[key] = out
        return self.cache[key]

    @property
    def n_ranks(self) -> int:
        return len(self.ranks)

    @property
    def n_steps(self) -> int:
        return len(self.steps)

    @property
    def data(self) -> np.ndarray:
        cached = self.cache.get("data")
        if cached is None:
            d = self.phases.get("data")
            cached = self.cache["data"] = np.zeros_like(self.duration) if d is None else nan_to_zero(d)
        return cached

    @property
    def has_layout(self) -> bool:
        return len(np.unique(self.groups)) > 1

    def comm_own(self) -> np.ndarray | None:
        """(S,) the collectives' own time per step: the least any rank was blocked in them (the last
        rank to arrive does not wait); inf where no rank has a value; None without comm_s. Cached."""
        if self.comm is None:
            return None
        cached = self.cache.get("comm_own")
        if cached is None:
            cached = self.cache["comm_own"] = np.nanmin(np.where(np.isfinite(self.comm), self.comm, np.inf), axis=0)
        return cached

    def steps_per_column(self) -> np.ndarray:
        """(S,) :attr:`weight`, ones when the table has no ``row_steps``."""
        return self.weight if self.weight is not None else np.ones(self.n_steps)

    def step_time(self) -> np.ndarray:
        """The job's time per step, data wait included: the median over ranks of duration + data
        (a synchronous step ends together; the wait before it delays the next one). Cached."""
        cached = self.cache.get("step_time")
        if cached is None:
            cached = self.cache["step_time"] = rank_median(self.duration + self.data)
        return cached


def nanmedian(a: np.ndarray, axis: int | None = None) -> np.ndarray:
    """Median ignoring NaNs (an all-NaN slice gives NaN, silently), vectorized.

    numpy's nanmedian loops in Python over the slices once there is a NaN; this sorts once
    (NaNs sort last) and picks the middle of each slice's valid values.
    """
    a = np.asarray(a, dtype=float)
    if axis is None:
        a, axis = a.ravel(), 0
    nan = np.isnan(a)
    if not nan.any():
        return _median(a, axis)
    s = np.sort(a, axis=axis)
    n = (~nan).sum(axis=axis, keepdims=True)
    lo = np.clip((n - 1) // 2, 0, None)
    hi = np.clip(n // 2, 0, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        med = (np.take_along_axis(s, lo, axis) + np.take_along_axis(s, hi, axis)) / 2.0
    med = np.where(n == 0, np.nan, med)
    return np.squeeze(med, axis=axis) if med.ndim > 0 else med


def nanpercentile(a: np.ndarray, q: float | Sequence[float], axis: int) -> np.ndarray:
    """np.nanpercentile(a, q, axis=axis) (the linear method, the same numbers), vectorized: numpy's
    loops in Python over the slices (slow for many ranks, NaN or not); this sorts once, for one
    percentile or several (``q`` a sequence: stacked first, as numpy gives them)."""
    a = np.asarray(a, dtype=float)
    nan = np.isnan(a)
    if not nan.any():
        return np.percentile(a, q, axis=axis)
    s = np.sort(a, axis=axis)  # NaNs last
    n = (~nan).sum(axis=axis, keepdims=True)
    if np.ndim(q):
        return np.stack([_picked(s, n, float(one), axis) for one in cast(Sequence[float], q)])
    return _picked(s, n, float(cast(float, q)), axis)


def _picked(s: np.ndarray, n: np.ndarray, q: float, axis: int) -> np.ndarray:
    """The ``q`` percentile of sorted slices ``s`` (NaNs last) of ``n`` values each, numpy's linear way."""
    pos = np.maximum(n - 1, 0) * (q / 100.0)
    lo = np.floor(pos).astype(np.intp)
    hi = np.minimum(lo + 1, np.maximum(n - 1, 0))
    t = pos - lo
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        below, above = np.take_along_axis(s, lo, axis), np.take_along_axis(s, hi, axis)
        diff = above - below
        v = np.where(t >= 0.5, above - diff * (1 - t), below + diff * t)  # numpy's own interpolation
    v = np.where(n == 0, np.nan, v)
    return np.squeeze(v, axis=axis)


def nanmax_runs(a: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The highest of each run of rows of ``a`` (runs beginning at rows ``starts``, as
    ``np.maximum.reduceat``), NaNs left out; NaN where a run has no value in a column."""
    with np.errstate(all="ignore"):
        out = np.maximum.reduceat(np.where(np.isnan(a), -np.inf, a), starts, axis=0)
    out[np.isneginf(out)] = np.nan
    return out


def _codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted unique values, index of each value), by hashing rather than sorting every row."""
    codes, uniques = pd.factorize(values, sort=False)
    order = np.argsort(uniques)
    remap = np.empty_like(order)
    remap[order] = np.arange(len(order))
    return np.asarray(uniques)[order], remap[codes]


def _median(a: np.ndarray, axis: int) -> np.ndarray:
    """np.median without its copies and checks (no NaNs here): one partition, one or two picks."""
    n = a.shape[axis]
    if n == 0:
        return np.full(np.delete(a.shape, axis), np.nan)
    k = n // 2
    pick = (slice(None),) * (axis % a.ndim)
    if n % 2:
        return np.partition(a, k, axis=axis)[pick + (k,)]
    part = np.partition(a, (k - 1, k), axis=axis)
    return (part[pick + (k - 1,)] + part[pick + (k,)]) / 2.0


RANK_SAMPLE = 64
RESTART_GAP_S = 60.0  # a gap between steps this long (and 30 median steps) is a restart or an outage


def gaps_after(m: StepMatrix) -> tuple[np.ndarray, np.ndarray]:
    """(S,) seconds from each step's end (its earliest start plus the job's step time) to the next
    step's start, 0 where unknown and after the last; and (S,) which of them are long (over
    ``RESTART_GAP_S`` and 30 median steps: a restart or an outage, not the running job's time)."""
    t = nan_to_zero(m.step_time())
    g = np.zeros(m.n_steps)
    if m.step_start is not None and m.n_steps > 1:
        start = m.step_start
        ok = np.isfinite(start[1:]) & np.isfinite(start[:-1])
        end = start[:-1] + t[:-1] * m.steps_per_column()[:-1]  # a column of several steps: all of them
        g[:-1] = np.clip(np.nan_to_num(np.where(ok, start[1:] - end, 0.0)), 0.0, None)
    bound = max(RESTART_GAP_S, 30.0 * float(np.median(t)) if len(t) else 0.0)
    return g, g > bound


MIN_WINDOWS = 5  # a stretch of windows of several steps each (Prometheus) is at least this many


def columns_for(m: StepMatrix, idx: np.ndarray, steps: int) -> int:
    """How many of the columns ``idx`` a stretch of ``steps`` steps takes: ``steps`` where a column is
    one step; where a column is a window of several (:attr:`StepMatrix.weight`), the windows that hold
    that many steps, and at least :data:`MIN_WINDOWS` (a window's mean is one reading, not many)."""
    if m.weight is None or not len(idx):
        return steps
    per = max(float(np.median(m.weight[idx])), 1.0)
    return max(MIN_WINDOWS, int(np.ceil(steps / per)))


def even_sample(idx: np.ndarray, k: int = RANK_SAMPLE) -> np.ndarray:
    """``k`` evenly spaced entries of ``idx``, first and last included; all of them when there are
    no more than ``k``."""
    return idx[np.linspace(0, len(idx) - 1, k).astype(int)] if len(idx) > k else idx


STEP_SAMPLE = 1024


def every_kth_step(a: np.ndarray) -> np.ndarray:
    """``a`` (steps on the last axis) thinned to about ``STEP_SAMPLE`` evenly spaced steps when it has
    more than twice that; as it is otherwise. For statistics over steps that need no more: a noise
    level, a centre, a correlation, a score."""
    n = a.shape[-1]
    return a[..., :: n // STEP_SAMPLE] if n > 2 * STEP_SAMPLE else a


def rank_median(a: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """(S,) median over ranks (or over the given rows) at each step; over 64 evenly spaced ranks
    when there are more: ranks are exchangeable for a job-level centre, and its error (about 0.16
    noise units) is far below any effect a detector reports."""
    idx = even_sample(np.arange(a.shape[0]) if rows is None else np.asarray(rows))
    return nanmedian(a[idx] if len(idx) != a.shape[0] else a, axis=0)


COMM, DATA = "__comm__", "__data__"  # job_components' keys beside the phase names


def job_components(m: StepMatrix) -> dict[str, np.ndarray]:
    """(S,) job-level series of what a step is made of: each phase's compute (median over ranks),
    the collectives' own time (``COMM``, see ``StepMatrix.comm_own``) and the data wait (``DATA``,
    median over ranks), each where the table has it."""
    out = {name: rank_median(arr) for name, arr in m.phase_compute.items() if name != "data"}
    if m.comm is not None:
        out[COMM] = cast(np.ndarray, m.comm_own())  # not None: the matrix has comm
    if "data" in m.phases:
        out[DATA] = rank_median(m.data)
    return out


def nan_to_zero(a: np.ndarray) -> np.ndarray:
    """NaN -> 0, without copying an array that has none."""
    return np.where(np.isnan(a), 0.0, a) if np.isnan(a).any() else a


def from_table(table: pd.DataFrame) -> StepMatrix:
    ranks, r_idx = _codes(table["rank"].to_numpy())
    steps, s_idx = _codes(table["step"].to_numpy())
    shape = (len(ranks), len(steps))
    n_rows = len(table)
    layout = None  # a complete, regular table: each column is the grid, reshaped (no copy)
    if n_rows == shape[0] * shape[1] and n_rows:
        if (
            np.array_equal(r_idx[: shape[0]], np.arange(shape[0]))
            and np.array_equal(r_idx, np.tile(np.arange(shape[0]), shape[1]))
            and np.array_equal(s_idx, np.repeat(np.arange(shape[1]), shape[0]))
        ):
            layout = "step-major"
        elif np.array_equal(s_idx, np.tile(np.arange(shape[1]), shape[0])) and np.array_equal(
            r_idx, np.repeat(np.arange(shape[0]), shape[1])
        ):
            layout = "rank-major"

    def grid(col: str) -> np.ndarray:
        values = table[col].to_numpy(dtype=float, na_value=np.nan)
        if layout == "step-major":
            return values.reshape(shape[1], shape[0]).T
        if layout == "rank-major":
            return values.reshape(shape)
        out = np.full(shape, np.nan)
        out[r_idx, s_idx] = values
        return out

    comm = grid("comm_s") if "comm_s" in table.columns else None
    phases = {p: grid(f"{p}_s") for p in phase_names(table)}
    phase_compute = {}
    per_phase_comm = False
    for p, arr in phases.items():
        col = f"comm.{p}_s"
        if col in table.columns:
            per_phase_comm = True
            phase_compute[p] = arr - nan_to_zero(grid(col))
        else:
            phase_compute[p] = arr
    duration = grid("duration_s")
    busy = [v for k, v in phases.items() if k != "data"]
    if comm is not None and (per_phase_comm or not busy):
        compute = duration - nan_to_zero(comm)
    elif busy:
        compute = np.nansum(np.stack(busy), axis=0)
        compute[np.isnan(duration)] = np.nan
    else:
        compute = duration.copy()
    gcol = "stage" if "stage" in table.columns else ("pp_rank" if "pp_rank" in table.columns else None)
    if gcol is not None:
        per_rank = table.groupby("rank")[gcol].first().reindex(ranks)
        groups = cast(pd.Series, pd.to_numeric(per_rank, errors="coerce")).fillna(-1).to_numpy(dtype=int)
    else:
        groups = np.zeros(len(ranks), dtype=int)
    columns = {
        c: table[c].to_numpy(dtype=float, na_value=np.nan)
        for c in table.columns
        if isinstance(c, str)
        and (c.startswith(("dev.", "comm_group.", "io.")) or c == "mfu")
        and pd.api.types.is_numeric_dtype(table[c])
    }
    tokens = None
    if "tokens" in table.columns:
        tok = table["tokens"].to_numpy(dtype=float, na_value=np.nan)
        tokens = np.bincount(s_idx, weights=np.where(np.isnan(tok), 0.0, tok), minlength=len(steps))
    ncol = "node" if "node" in table.columns else ("host" if "host" in table.columns else None)
    nodes = None
    if ncol is not None:
        nodes = table.groupby("rank")[ncol].first().reindex(ranks).astype(str).to_numpy()
    step_start = None
    if "start_s" in table.columns:
        st = table["start_s"].to_numpy(dtype=float, na_value=np.nan)
        step_start = np.full(len(steps), np.inf)
        np.fmin.at(step_start, s_idx, st)
        step_start[~np.isfinite(step_start)] = np.nan
    weight = None
    if ROW_STEPS in table.columns:
        weight = np.nan_to_num(nanmedian(grid(ROW_STEPS), axis=0), nan=1.0)
    return StepMatrix(
        ranks=ranks,
        steps=steps,
        duration=duration,
        comm=comm,
        phases=phases,
        phase_compute=phase_compute,
        tokens=tokens,
        compute=compute,
        groups=groups,
        columns=columns,
        index=(r_idx, s_idx),
        nodes=nodes,
        step_start=step_start,
        weight=weight,
    )

"""The arrays of one load -> what the loader returns: the steps table (one row per rank and window
in which the rank completed steps), the per-step records, and each rank's progress heartbeat in
the run store's format (what each column is made of: :func:`build`)."""

from __future__ import annotations

import warnings
from typing import Any, cast

import numpy as np
import pandas as pd

from ....steptable.table import ROW_STEPS
from .queries import PROGRESS
from .window import Grid

COLLECTIVE = "a collective"  # train_blocked_in_collective names no op
_NOT_PHASES = frozenset({"start", "duration", "comm", "data"})  # columns of their own
_USUAL_ORDER = ("forward", "backward", "optimizer")  # phase columns in this order, then the others by name


# ---- progress: each rank's heartbeat ------------------------------------------------------------
def _last(a: np.ndarray | None) -> float | None:
    if a is None:
        return None
    idx = np.flatnonzero(np.isfinite(a))
    return float(a[idx[-1]]) if len(idx) else None


def progress(
    ranks: dict[int, dict[str, Any]],
    seen: dict[tuple, np.ndarray],
    gauges: dict[tuple, np.ndarray],
    device: dict[int, dict[str, np.ndarray]],
    range_start_s: float,
) -> dict[int, dict[str, Any]]:
    """Each rank's heartbeat. Its time is when the rank was last scraped (so a rank that is no
    longer scraped goes silent, and a finished job is not live); a rank with no sample at any
    window's end was last seen before the range started."""
    out = {}
    for r in ranks:
        latest = {k: _last(gauges.get((r, k))) for k in PROGRESS.values()}
        dev = {k: v for k, v in ((k, _last(a)) for k, a in device.get(r, {}).items()) if v is not None}
        seen_s = _last(seen.get((r,)))
        out[r] = heartbeat(r, seen_s if seen_s is not None else float(range_start_s), latest, dev)
    return out


def heartbeat(rank: int, time_s: float, g: dict[str, float | None], device: dict[str, float]) -> dict[str, Any]:
    """One rank's progress in the run store's format, from its latest samples: ``last_step`` and
    ``last_step_end_s`` from ``train_last_step`` and its timestamp; an open step (``last_step + 1``)
    since ``time_s - train_step_in_progress_seconds`` when that is above 0; ``collective`` while
    ``train_blocked_in_collective`` is 1 (the metric names no op); no ``phase`` (not exported)."""
    last = g.get("last_step")
    last = int(last) if last is not None else None
    open_s = g.get("in_progress")
    is_open = open_s is not None and open_s > 0
    blocked = g.get("blocked")
    return {
        "rank": rank,
        "time_s": time_s,
        "last_step": last,
        "last_step_end_s": g.get("last_step_end_s"),
        "open_step": (last + 1 if last is not None else 0) if is_open else None,
        "open_step_since_s": time_s - cast(float, open_s) if is_open else None,  # is_open: not None
        "phase": None,
        "collective": COLLECTIVE if blocked is not None and blocked >= 0.5 else None,
        "collective_since_s": None,
        "finished": False,
        "device": device or None,
    }


# ---- the steps table and the records ------------------------------------------------------------


def job_steps(grid: Grid, active: np.ndarray, last_step: list[np.ndarray]) -> tuple[np.ndarray, bool]:
    """(n,) each window's step: the job's last completed step at the window's end (the highest
    ``train_last_step`` over ranks), so findings name real steps; and whether every active window had
    that reading. Strictly increasing over the ``active`` windows (those in which a rank made steps):
    a window whose reading is missing, or no higher than the previous window's (a rank catching up
    within a hang), takes the previous step + 1."""
    with warnings.catch_warnings():  # a window no rank has a reading in: NaN, said below
        warnings.simplefilter("ignore", RuntimeWarning)
        high = np.nanmax(np.vstack(last_step), axis=0) if last_step else np.full(grid.n, np.nan)
    out = np.full(grid.n, -1, dtype=np.int64)
    prev, known = -1, True
    for k in np.flatnonzero(active).tolist():
        v = high[k]
        if not np.isfinite(v):
            known = False
        step = max(int(v), prev + 1) if np.isfinite(v) else prev + 1
        out[k] = prev = step
    return out, known


def _per_step(a: np.ndarray | None, idx: np.ndarray, count: np.ndarray, missing: float = np.nan) -> np.ndarray:
    if a is None:
        return np.full(len(idx), missing)
    v = a[idx] / count
    return np.where(np.isfinite(v), v, missing)


def build(
    grid: Grid,
    g: dict[str, dict[tuple, np.ndarray]],
    device: dict[int, dict[str, np.ndarray]],
    ranks: dict[int, dict[str, Any]],
    warnings: list[str] | None = None,
) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """The steps table and the records of the answers' arrays ``g`` (by query name) and the device
    readings. What the table cannot know is said in ``warnings``.

    Window ``k`` of ``n`` is ``(now - (n-k) W, now - (n-1-k) W]``. One row per (rank, window) in which
    the rank made steps (a window without steps has no row: never a false zero):

    - ``step``: :func:`job_steps`; ``row_steps``: the increase of the rank's step counter;
    - ``start_s``: the rank's last step end in the window (``train_last_step_timestamp_seconds``,
      clipped into it) less ``row_steps`` x (duration + data wait): its steps packed back to back;
    - ``duration_s``: increase of ``train_step_duration_seconds_sum`` / increase of its ``_count``;
      ``<phase>_s`` and ``data_s``: their sums' increase / the step count's (0 where it did not run);
    - ``comm_s``: increase of ``train_collective_blocked_seconds_total`` per step; ``comm.<phase>_s``:
      of ``train_phase_blocked_seconds_total{phase}`` (NaN from an exporter older than that counter);
    - ``tokens``, ``samples``, ``comm_bytes`` per step; ``mfu`` the gauge's mean; ``dev.<signal>``
      the latest reading at the window's end.

    Records, one per row, shaped like the run store's: ``rank``, ``step``, ``start_s``, ``duration_s``,
    ``comm_s``, ``device`` (run-store names; a rank's GPU readings from label ``gpu`` = its local rank)
    and ``ops`` (``{op: [count, duration_s, blocked_s, bytes, bus_bytes]}`` per step: counters'
    increase, the histogram's sum, ``blocked_s = duration_s``, bytes x the op's bus factor, else
    busbw x duration; NaN when not known)."""
    everyone = sorted(set(ranks) | {k[0] for k in g["n"]})
    with np.errstate(all="ignore"):
        made = [(a > 0) & np.isfinite(g["dur"].get(k, np.full(grid.n, np.nan))) for k, a in g["n"].items()]
    active = np.any(np.vstack(made), axis=0) if made else np.zeros(grid.n, dtype=bool)
    last = [a for (r,), a in g.get("last_step", {}).items()]
    step_of, known = job_steps(grid, active, last)
    if active.any() and not known and warnings is not None:
        warnings.append(
            "train_last_step is missing in some windows: their steps are counted on from the window before "
            "(a step number there is not the job's own)"
        )
    window_end = grid.start_s(np.arange(grid.n)) + grid.w_ms / 1000.0
    phases = sorted(
        {k[1] for k in g["phase"] if k[1] and k[1] not in _NOT_PHASES},
        key=lambda p: (_USUAL_ORDER.index(p) if p in _USUAL_ORDER else len(_USUAL_ORDER), p),
    )
    ops = sorted({k[1] for name in ("calls", "bytes", "op_s") for k in g[name] if k[1]})
    has = {name: bool(g[name]) for name in ("comm", "tokens", "samples", "mfu")}
    has_data = any(np.nansum(a) > 0 for a in g["data"].values())
    signals = sorted({s for d in device.values() for s in d})
    cols: dict[str, list[np.ndarray]] = {}
    records: list[dict[str, Any]] = []

    def add(name: str, values: np.ndarray) -> None:
        cols.setdefault(name, []).append(values)

    has_phase_comm = bool(g.get("phase_comm"))
    for r in everyone:
        cnt, dur = g["n"].get((r,)), g["dur"].get((r,))
        if cnt is None or dur is None:
            continue
        idx = np.flatnonzero(np.isfinite(cnt) & (cnt > 0) & np.isfinite(dur) & (dur >= 0))
        if not len(idx):
            continue
        c = cnt[idx]
        add("rank", np.full(len(idx), r, dtype=np.int64))
        add("step", step_of[idx])
        duration = dur[idx] / c
        data = _per_step(g["data"].get((r,)), idx, c, 0.0)
        # The window's steps back to back, ending when its last one ended (train_last_step_timestamp at
        # the window's end, else the window's end): the time between windows' steps is then the time
        # the job spent outside steps, not the windows' spacing.
        lo, hi = window_end[idx] - grid.w_ms / 1000.0, window_end[idx]
        ended = g.get("last_end", {}).get((r,))
        ended = hi if ended is None else np.where(np.isfinite(ended[idx]), np.clip(ended[idx], lo, hi), hi)
        start = ended - c * (duration + data)
        add("start_s", start)
        add("duration_s", duration)
        add(ROW_STEPS, c)
        if has_data:
            add("data_s", data)
        for p in phases:
            # A phase this rank never ran: 0. A window before its series was scraped twice (the series
            # appears with the phase's first step): not known, NaN, never a false 0.
            a = g["phase"].get((r, p))
            add(f"{p}_s", np.zeros(len(idx)) if a is None else _per_step(a, idx, c))
            if has_phase_comm:
                b = g["phase_comm"].get((r, p))
                add(f"comm.{p}_s", np.zeros(len(idx)) if a is None else _per_step(b, idx, c))
        comm = _per_step(g["comm"].get((r,)), idx, c)
        if has["comm"]:
            add("comm_s", comm)
        for name in ("tokens", "samples"):
            if has[name]:
                add(name, _per_step(g[name].get((r,)), idx, c))
        op_rows = {}
        for op in ops:
            calls = _per_step(g["calls"].get((r, op)), idx, c, 0.0)
            nbytes = _per_step(g["bytes"].get((r, op)), idx, c, 0.0)
            secs = _per_step(g["op_s"].get((r, op)), idx, c, 0.0)
            busbw, factor = g["busbw"].get((r, op)), g["factor"].get((r, op))
            bus = secs * (busbw[idx] if busbw is not None else np.nan)
            if factor is not None:
                f = factor[idx]
                bus = np.where(np.isfinite(f) & (f > 0), nbytes * f, bus)
            op_rows[op] = (calls, secs, nbytes, bus)
        if ops:
            add("comm_bytes", cast(np.ndarray, sum(v[2] for v in op_rows.values())))  # arrays, at least one
        if g.get("input_steps"):  # a window's readiness: the share of its steps whose batch was waiting
            took, ready = g["input_steps"].get((r,)), g["input_ready"].get((r,))
            with np.errstate(all="ignore"):
                share = ready[idx] / took[idx] if took is not None and ready is not None else np.full(len(idx), np.nan)
            add("io.input_ready", np.where(np.isfinite(share), share, np.nan))
        if g.get("read_bytes"):
            add("io.read_bytes", _per_step(g["read_bytes"].get((r,)), idx, c))
        if has["mfu"]:
            mfu = g["mfu"].get((r,))
            add("mfu", mfu[idx] if mfu is not None else np.full(len(idx), np.nan))
        dev = device.get(r, {})
        for s in signals:
            a = dev.get(s)
            add(f"dev.{s}", a[idx] if a is not None else np.full(len(idx), np.nan))
        for j, k in enumerate(idx.tolist()):
            rec_ops = {}
            for op, (calls, secs, nbytes, bus) in op_rows.items():
                if calls[j] > 0 or nbytes[j] > 0 or secs[j] > 0:
                    # [count, duration_s, blocked_s, bytes, bus_bytes] per step, as OpStats
                    rec_ops[op] = [float(calls[j]), float(secs[j]), float(secs[j]), float(nbytes[j]), float(bus[j])]
            rec_dev = {s: float(a[k]) for s, a in dev.items() if np.isfinite(a[k])}
            rec: dict[str, Any] = {
                "rank": r,
                "step": int(step_of[k]),
                "start_s": float(start[j]),
                "duration_s": float(duration[j]),
                "device": rec_dev or None,
                "ops": rec_ops,
            }
            if has["comm"] and np.isfinite(comm[j]):
                rec["comm_s"] = float(comm[j])
            records.append(rec)
    if not cols:
        return pd.DataFrame(
            {
                "rank": pd.Series([], dtype="int64"),
                "step": pd.Series([], dtype="int64"),
                "start_s": pd.Series([], dtype="float64"),
                "duration_s": pd.Series([], dtype="float64"),
            }
        ), records
    table = pd.DataFrame({name: np.concatenate(parts) for name, parts in cols.items()})
    if has["comm"] and not has_phase_comm:
        # Not known: an exporter without train_phase_blocked_seconds does not say in which phase
        # collectives ran (see the package doc).
        for p in phases:
            table[f"comm.{p}_s"] = np.nan
    return table, records

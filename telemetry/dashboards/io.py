"""The I/O view's tables: checkpoints save by save (:func:`checkpoint_saves`, :func:`checkpoint_lines`,
:func:`checkpoint_per_rank`), the input per rank (:func:`input_per_rank`) and the network per node
(:func:`network`), from the steps table's ``io.*`` and ``dev.*`` columns (each an (R, S) grid of the
StepMatrix, NaN where a row lacks it). Each part is empty when the run has none of its columns. No
Streamlit here.

Two rules: a checkpoint's bandwidth is its bytes over the rank's own storage seconds (a DCP save ends
with every rank waiting for the slowest), else over the time blocked plus the async upload, as the
slow_checkpoint detector does; a counter's growth counts from the reading at the end of the step
before the chosen ones (:func:`growth`). More: docs/dashboard.md, "The I/O view".
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pandas as pd

from telemetry.steptable.matrix import StepMatrix, nan_to_zero, nanmedian

from .grid import step_columns

BLOCKED, ASYNC, BYTES, STORAGE, SAVES = (
    "io.checkpoint_s",
    "io.checkpoint_async_s",
    "io.checkpoint_bytes",
    "io.checkpoint_io_s",
    "io.checkpoint_saves",
)
READY, READ = "io.input_ready", "io.read_bytes"
FETCH, WORKERS = "dev.input_fetch_seconds", "dev.input_workers"
NIC_TX, NIC_RX = "dev.nic_bytes_tx", "dev.nic_bytes_rx"
NIC_ERRORS, NVLINK_ERRORS = "dev.nic_errors_", "dev.gpu_nvlink_errors_"
MB, GB = 1e6, 1e9
MAX_RANK_LINES = 16  # beyond this many ranks, the bandwidth chart draws the median and the lowest rank

SAVE_COLUMNS = [
    "rank",
    "step",
    "what",
    "blocking s",
    "async s",
    "MB",
    "storage s",
    "MB/s",
    "bandwidth from",
]


def _rows(m: StepMatrix, ranks: list[int] | None) -> np.ndarray:
    return np.ones(m.n_ranks, dtype=bool) if not ranks else np.isin(m.ranks, ranks)


def _zeros(m: StepMatrix, name: str) -> np.ndarray:
    g = m.extra(name)
    return np.zeros((m.n_ranks, m.n_steps)) if g is None else nan_to_zero(g)


def has_checkpoints(m: StepMatrix) -> bool:
    """Whether the run timed any checkpoint (it has ``io.checkpoint_s`` or ``io.checkpoint_saves``)."""
    return BLOCKED in m.columns or SAVES in m.columns


def checkpoint_saves(
    m: StepMatrix, steps: tuple[int, int] | None = None, ranks: list[int] | None = None
) -> pd.DataFrame:
    """One row per (rank, step) with a checkpoint in the chosen steps and ranks: ``what`` (save, load,
    upload: an async save's upload completing), seconds blocked, async seconds, MB (1e6 bytes), the
    rank's own storage seconds, bandwidth (MB/s) and ``bandwidth from`` ("storage time" or "time
    blocked": see the module doc; NaN and "" without bytes). Empty when there is none."""
    if not has_checkpoints(m):
        return pd.DataFrame(columns=SAVE_COLUMNS)
    blocked, upload, nbytes, storage, saves = (_zeros(m, c) for c in (BLOCKED, ASYNC, BYTES, STORAGE, SAVES))
    hit = (saves > 0) | (blocked > 0) | (upload > 0)
    hit &= _rows(m, ranks)[:, None] & step_columns(m, steps)[None, :]
    r, s = np.nonzero(hit)
    b, a, n, io, k = blocked[r, s], upload[r, s], nbytes[r, s], storage[r, s], saves[r, s]
    own = io > 0
    secs = np.where(own, io, b + a)
    with np.errstate(all="ignore"):
        bw = np.where((n > 0) & (secs > 0), n / secs / MB, np.nan)
    what = [
        " + ".join(filter(None, ["save" if ki > 0 else ("load" if bi > 0 else ""), "upload" if ai > 0 else ""]))
        for ki, bi, ai in zip(k, b, a)
    ]
    out = pd.DataFrame(
        {
            "rank": m.ranks[r].astype(int),
            "step": m.steps[s].astype(int),
            "what": what,
            "blocking s": b,
            "async s": a,
            "MB": n / MB,
            "storage s": io,
            "MB/s": bw,
            "bandwidth from": np.where(np.isnan(bw), "", np.where(own, "storage time", "time blocked")),
        },
        columns=SAVE_COLUMNS,
    )
    out["saves"] = k
    return out.sort_values(["step", "rank"]).reset_index(drop=True)


def checkpoint_lines(
    saves: pd.DataFrame, marked: dict[int, str] | None = None, max_ranks: int = MAX_RANK_LINES
) -> tuple[pd.DataFrame, bool]:
    """The bandwidth over the saves, long format (``step``, ``rank``, ``value`` MB/s): a line per rank
    (labelled with a finding's kinds for the ranks one names), or beyond ``max_ranks`` ranks the median
    over ranks and the lowest rank at each step; and whether it is per rank."""
    marked = marked or {}
    d = saves.dropna(subset=["MB/s"])
    if d["rank"].nunique() <= max_ranks:
        label = [f"{r} <- {marked[r]}" if r in marked else str(r) for r in d["rank"]]
        return pd.DataFrame({"step": d["step"], "rank": label, "value": d["MB/s"]}).reset_index(drop=True), True
    g = d.groupby("step")["MB/s"]
    lines = pd.concat(
        [
            pd.DataFrame({"step": g.median().index, "rank": "median over ranks", "value": g.median().to_numpy()}),
            pd.DataFrame(
                {
                    "step": cast(pd.Series, g.min()).index,
                    "rank": "lowest rank",
                    "value": cast(pd.Series, g.min()).to_numpy(),
                }
            ),
        ],
        ignore_index=True,
    )
    return lines, False


def checkpoint_per_rank(saves: pd.DataFrame) -> pd.DataFrame:
    """Per rank: saves, total seconds blocked, total async seconds, total MB, the median bandwidth
    (MB/s) over its checkpoints with bytes, and where that bandwidth came from (storage time, time
    blocked, or both: "mixed")."""
    cols = ["rank", "saves", "blocking s (total)", "async s (total)", "MB (total)", "median MB/s", "bandwidth from"]
    if saves.empty:
        return pd.DataFrame(columns=cols)
    g = saves.groupby("rank")

    def source(v: pd.Series) -> str:
        kinds = sorted(set(v) - {""})
        return kinds[0] if len(kinds) == 1 else ("mixed" if kinds else "")

    return cast(
        pd.DataFrame,
        pd.DataFrame(
            {
                "saves": cast(pd.Series, g["saves"].sum()).astype(int),
                "blocking s (total)": g["blocking s"].sum(),
                "async s (total)": g["async s"].sum(),
                "MB (total)": g["MB"].sum(),
                "median MB/s": g["MB/s"].median(),
                "bandwidth from": g["bandwidth from"].agg(source),
            }
        ).reset_index()[cols],
    )


def _step_time(m: StepMatrix) -> np.ndarray:
    """(R, S) a rank's time in each column, data wait included, times the steps the column holds. Cached."""
    key = ("io", "step_time")
    if key not in m.cache:
        m.cache[key] = nan_to_zero(m.duration + m.data) * m.steps_per_column()[None, :]
    return m.cache[key]


def _ffill(a: np.ndarray) -> np.ndarray:
    """``a`` with each NaN replaced by the last finite value before it in its row (NaN before the first)."""
    ok = np.isfinite(a)
    if ok.all():
        return a
    last = np.maximum.accumulate(np.where(ok, np.arange(a.shape[1])[None, :], 0), axis=1)
    out = np.take_along_axis(a, last, axis=1)
    out[~np.maximum.accumulate(ok, axis=1)] = np.nan
    return out


def growth(m: StepMatrix, name: str, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(R,) growth of the counter ``name`` over the chosen columns, NaN for a rank with no reading to
    count from; and (R, S) the columns that growth spans (see the module doc). None when the run has
    no such column."""
    g = m.extra(name)
    if g is None:
        return None
    span = np.zeros((m.n_ranks, m.n_steps), dtype=bool)
    idx = np.flatnonzero(cols)
    if not len(idx):
        return np.full(m.n_ranks, np.nan), span
    lo, hi = max(idx[0] - 1, 0), idx[-1] + 1
    filled = _ffill(g[:, lo:hi])
    d = np.diff(filled, axis=1)
    inc = np.where(d < 0, filled[:, 1:], d)  # went back: counts from 0 again
    counted = np.isfinite(filled[:, :-1])  # a reading before it: the column's growth is known
    grown = np.where(counted, nan_to_zero(inc), 0.0).sum(axis=1)
    grown[~counted.any(axis=1)] = np.nan
    span[:, lo + 1 : hi] = counted
    return grown, span


def span_time(m: StepMatrix, span: np.ndarray) -> np.ndarray:
    """(R,) each rank's time in the columns of ``span`` (data wait included, all the steps a column holds)."""
    return np.where(span, _step_time(m), 0.0).sum(axis=1)


def has_input(m: StepMatrix) -> bool:
    return any(c in m.columns for c in (READY, READ, FETCH))


def input_per_rank(m: StepMatrix, steps: tuple[int, int] | None = None, ranks: list[int] | None = None) -> pd.DataFrame:
    """Per rank, over the chosen steps, the columns its sources allow:

    - ``steps watched`` and ``% ready`` (io.input_ready: steps with a watched batch, and the share of
      them whose batch was already waiting: the NaN-ignoring mean);
    - ``read MB/s``: io.read_bytes over the rank's time in the steps that have it (data wait included);
    - ``MB/s fetching``: the bytes read over the workers' fetch time (growth of
      dev.input_fetch_seconds, and the bytes of the steps it grew over), else over the data wait;
      ``fetch time from`` says which;
    - ``workers`` (dev.input_workers, median), ``worker fetch s`` (the growth) and ``% workers busy``:
      fetch time grown over the time it spans x the workers (at least 1: with no workers, or none
      read, the rank fetches itself).
    """
    cols = step_columns(m, steps)
    w = m.steps_per_column()[cols][None, :]
    out = pd.DataFrame({"rank": m.ranks.astype(int)})
    ready = m.extra(READY)
    if ready is not None:
        r = ready[:, cols]
        seen = np.isfinite(r)
        out["steps watched"] = (seen * w).sum(axis=1).round().astype(int)
        with np.errstate(all="ignore"):
            out["% ready"] = 100 * (nan_to_zero(r) * w).sum(axis=1) / (seen * w).sum(axis=1)
    read = m.extra(READ)
    fetch = growth(m, FETCH, cols)
    workers = m.extra(WORKERS)
    n = nanmedian(workers[:, cols], axis=1) if workers is not None else np.full(m.n_ranks, np.nan)
    if read is not None:
        b = nan_to_zero(read) * m.steps_per_column()[None, :]
        have = np.isfinite(read) & cols[None, :]
        with np.errstate(all="ignore"):
            out["read MB/s"] = np.where(have.any(axis=1), (b * have).sum(axis=1) / span_time(m, have) / MB, np.nan)
            if fetch is not None:  # the bytes of the steps the fetch time grew over
                by_fetch = np.isfinite(fetch[0]) & (fetch[0] > 0) & (have & fetch[1]).any(axis=1)
                per_fetch = (b * (have & fetch[1])).sum(axis=1) / fetch[0]
            else:
                by_fetch, per_fetch = np.zeros(m.n_ranks, dtype=bool), np.full(m.n_ranks, np.nan)
            wait = (nan_to_zero(m.data) * m.steps_per_column()[None, :] * have).sum(axis=1)
            per_wait = np.where(wait > 0, (b * have).sum(axis=1) / wait, np.nan)
            out["MB/s fetching"] = np.where(by_fetch, per_fetch, per_wait) / MB
        out["fetch time from"] = np.where(
            np.isnan(out["MB/s fetching"]), "", np.where(by_fetch, "worker fetch time", "data wait")
        )
    if fetch is not None:
        if workers is not None:
            out["workers"] = n
        with np.errstate(all="ignore"):
            out["worker fetch s"] = fetch[0]
            busy = fetch[0] / (span_time(m, fetch[1]) * np.maximum(np.nan_to_num(n, nan=1.0), 1.0))
            out["% workers busy"] = 100 * busy
    return cast(pd.DataFrame, out[_rows(m, ranks)]).reset_index(drop=True)


def network_signals(m: StepMatrix) -> list[str]:
    """The network columns the run has (``dev.`` names): NIC bytes, then NIC and NVLink error counters."""
    have = [c for c in (NIC_TX, NIC_RX) if c in m.columns]
    return (
        have
        + sorted(c for c in m.columns if c.startswith(NIC_ERRORS))
        + sorted(c for c in m.columns if c.startswith(NVLINK_ERRORS))
    )


def _label(c: str) -> str:
    if c.startswith(NIC_ERRORS):
        return f"NIC {c[len(NIC_ERRORS) :]}"
    return f"NVLink {c[len(NVLINK_ERRORS) :]}"


def rank_list(ranks: list[int]) -> str:
    """``[0, 1, 2, 3, 8]`` -> ``"0-3, 8"``."""
    out: list[str] = []
    for r in sorted(ranks):
        if out and out[-1].split("-")[-1] == str(r - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{r}"
        else:
            out.append(str(r))
    return ", ".join(out)


def network(
    m: StepMatrix, steps: tuple[int, int] | None = None, ranks: list[int] | None = None
) -> tuple[pd.DataFrame, list[str], bool]:
    """Per node (per rank when the table names no nodes), over the chosen steps and ranks: NIC GB/s
    sent and received (growth of the node's counters over the rank's time; the median of its ranks,
    who all read the same counters) and each error counter's growth (NIC counters: the most any of
    its ranks saw, node totals read by every rank; NVLink: summed over its ranks, one GPU each). The
    table, its error columns, and whether it is per node."""
    cols = step_columns(m, steps)
    names = network_signals(m)
    per = pd.DataFrame({"rank": m.ranks.astype(int)})
    per["node"] = m.nodes if m.nodes is not None else per["rank"].astype(str)
    for c, title in ((NIC_TX, "NIC sent GB/s"), (NIC_RX, "NIC received GB/s")):
        if c in names:
            g, span = cast("tuple[np.ndarray, np.ndarray]", growth(m, c, cols))  # a network signal it has
            t = span_time(m, span)
            with np.errstate(all="ignore"):
                per[title] = np.where(t > 0, g / t / GB, np.nan)
    errors = [c for c in names if c.startswith((NIC_ERRORS, NVLINK_ERRORS))]
    for c in errors:
        per[_label(c)] = cast("tuple[np.ndarray, np.ndarray]", growth(m, c, cols))[0]
    per = cast(pd.DataFrame, per[_rows(m, ranks)])
    err = [_label(c) for c in errors]
    if m.nodes is None:
        return per.drop(columns="node").reset_index(drop=True), err, False
    g = per.groupby("node", sort=True)
    agg: dict[str, str] = {c: "median" for c in ("NIC sent GB/s", "NIC received GB/s") if c in per}
    agg.update({e: "max" if e.startswith("NIC") else "sum" for e in err})
    table = g.agg(agg) if agg else pd.DataFrame(index=g.size().index)
    if any(e.startswith("NVLink") for e in err):  # a sum of NaN is 0: keep NaN where no rank read one
        for e in err:
            if e.startswith("NVLink"):
                table[e] = cast(pd.Series, table[e]).where(g[e].count() > 0)
    table.insert(0, "ranks", g["rank"].agg(lambda r: rank_list(list(r))))
    return table.reset_index(), err, True

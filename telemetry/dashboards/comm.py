"""The Collectives view's tables: latency and bus bandwidth by op and by message size, over steps
and per rank, from the run's step records (a run directory's ``ops`` and collective spans; the
Prometheus source's windows). A steps table holds only ``comm_s``: then there is nothing here and
the page says so. No Streamlit here.

Latency is a call's time from issue to completion (mean over the op's calls in a step); bus
bandwidth is bytes x the nccl-tests bus factor of the op / that time, as the exporter computes it.
"""

from __future__ import annotations

import math
from typing import Iterator, cast

import numpy as np
import pandas as pd

from telemetry.analysis.inputs.load import RunInput

from .grid import MAX_LINE_POINTS, _blocks

COLUMNS = ["rank", "step", "op", "calls", "seconds", "blocked_s", "bytes", "bus_bytes"]


def _chosen(run: RunInput, steps: tuple[int, int] | None, ranks: list[int] | None) -> Iterator[dict]:
    """The run's step records within the chosen steps (inclusive) and ranks (all when empty)."""
    lo, hi = steps if steps is not None else (-math.inf, math.inf)
    want = set(ranks) if ranks else None
    for r in run.records:
        if lo <= r["step"] <= hi and (want is None or r["rank"] in want):
            yield r


def per_step(run: RunInput, steps: tuple[int, int] | None = None, ranks: list[int] | None = None) -> pd.DataFrame:
    """One row per (rank, step, op) with ``calls``, ``seconds`` (issue to completion, all calls),
    ``blocked_s``, ``bytes``, ``bus_bytes``, and derived ``latency_ms`` (mean per call) and
    ``busbw_gbps`` (GB/s, 1e9 bytes). Empty when the input has no per-op records."""
    rows = []
    for r in _chosen(run, steps, ranks):
        ops = r.get("ops")
        if not ops:
            continue
        for op, v in ops.items():
            if len(v) >= 5:
                rows.append((r["rank"], r["step"], op, *v[:5]))
    df = pd.DataFrame(rows, columns=COLUMNS)
    ok = (df["calls"] > 0) & (df["seconds"] > 0)
    df["latency_ms"] = (df["seconds"] / df["calls"] * 1e3).where(ok)
    df["busbw_gbps"] = (df["bus_bytes"] / df["seconds"] / 1e9).where(ok)
    return df


def over_steps(df: pd.DataFrame, max_points: int = MAX_LINE_POINTS) -> pd.DataFrame:
    """Per (step, op), over ranks: median latency (ms) and median bus bandwidth (GB/s), long format
    (``step``, ``op``, ``measure``, ``value``). Beyond ``max_points`` steps a point is a block of
    consecutive steps (labelled by its first)."""
    if df.empty:
        return pd.DataFrame(columns=["step", "op", "measure", "value"])
    steps = np.sort(cast(np.ndarray, df["step"].unique()))  # a column of ints
    if len(steps) > max_points:
        width, nb = _blocks(len(steps), max_points)
        pos = np.searchsorted(steps, df["step"].to_numpy())
        keep = pos < nb * width  # the last steps that do not fill a block are left out
        df = df[keep].assign(step=steps[(pos[keep] // width) * width])
    g = df.groupby(["step", "op"])[["latency_ms", "busbw_gbps"]].median().reset_index()
    return g.melt(["step", "op"], var_name="measure", value_name="value").dropna()


def dimensions(table: pd.DataFrame) -> list[str]:
    """The process groups' labels (parallel dimensions) the steps table has columns for."""
    return [c[len("comm_group.") : -2] for c in table.columns if c.startswith("comm_group.") and c.endswith("_s")]


def by_dimension(
    table: pd.DataFrame, steps: tuple[int, int] | None = None, ranks: list[int] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per parallel dimension (``comm_group.<label>_s`` and ``_bytes``): per rank, the median ms
    blocked per step and MB per step (``rank``, ``dimension``, ``blocked ms/step``, ``MB/step``);
    and over steps, the median over ranks of ms blocked (``step``, ``dimension``, ``value``)."""
    dims = dimensions(table)
    if not dims:
        empty = pd.DataFrame(columns=["rank", "dimension", "blocked ms/step", "MB/step"])
        return empty, pd.DataFrame(columns=["step", "dimension", "value"])
    t = table
    if steps is not None:
        t = cast(pd.DataFrame, t[(t["step"] >= steps[0]) & (t["step"] <= steps[1])])
    if ranks:
        t = cast(pd.DataFrame, t[t["rank"].isin(ranks)])
    rows, lines = [], []
    for d in dims:
        sec, nbytes = f"comm_group.{d}_s", f"comm_group.{d}_bytes"
        g = t.groupby("rank")
        per = pd.DataFrame({"blocked ms/step": g[sec].median() * 1e3})
        per["MB/step"] = g[nbytes].median() / 1e6 if nbytes in t.columns else np.nan
        rows.append(per.reset_index().assign(dimension=d))
        over = t.groupby("step")[sec].median() * 1e3
        lines.append(pd.DataFrame({"step": over.index, "dimension": d, "value": over.to_numpy()}))
    per_rank_dim = cast(
        pd.DataFrame, pd.concat(rows, ignore_index=True)[["rank", "dimension", "blocked ms/step", "MB/step"]]
    )
    series = pd.concat(lines, ignore_index=True).dropna()
    steps_all = np.sort(cast(np.ndarray, series["step"].unique()))
    if len(steps_all) > MAX_LINE_POINTS:  # a point per block of steps, labelled by its first
        width, _ = _blocks(len(steps_all), MAX_LINE_POINTS)
        series = series.assign(step=(series["step"] - steps_all[0]) // width * width + steps_all[0])
        series = series.groupby(["step", "dimension"])["value"].median().reset_index()
    return per_rank_dim, series


def per_rank(df: pd.DataFrame) -> pd.DataFrame:
    """Per (rank, op): calls per step, median latency (ms), median bus bandwidth (GB/s) and median
    time blocked per step (ms)."""
    if df.empty:
        return pd.DataFrame(columns=["rank", "op", "calls per step", "latency ms", "busbw GB/s", "blocked ms/step"])
    g = df.groupby(["rank", "op"])
    return pd.DataFrame(
        {
            "calls per step": g["calls"].mean(),
            "latency ms": g["latency_ms"].median(),
            "busbw GB/s": g["busbw_gbps"].median(),
            "blocked ms/step": g["blocked_s"].median() * 1e3,
        }
    ).reset_index()


def by_size(run: RunInput, steps: tuple[int, int] | None = None, ranks: list[int] | None = None) -> pd.DataFrame:
    """Per (op, message size bucket: powers of two), from each call's span: calls, median latency
    (ms) and median bus bandwidth (GB/s; the op's bus factor from its step's totals). Empty when the
    records hold no collective spans."""
    rows = []
    for r in _chosen(run, steps, ranks):
        ops = r.get("ops") or {}
        for sp in r.get("spans") or ():
            if sp[0] != "collective" or len(sp) < 6 or sp[5] <= 0 or sp[3] <= sp[2]:
                continue
            o = ops.get(sp[1])
            factor = o[4] / o[3] if o is not None and len(o) >= 5 and o[3] > 0 else 1.0
            rows.append((sp[1], sp[5], sp[3] - sp[2], factor))
    if not rows:
        return pd.DataFrame(columns=["op", "size", "bucket_bytes", "calls", "latency ms", "busbw GB/s"])
    d = pd.DataFrame(rows, columns=["op", "nbytes", "seconds", "factor"])
    d["bucket_bytes"] = 2.0 ** np.floor(np.log2(d["nbytes"]))
    d["busbw"] = d["nbytes"] * d["factor"] / d["seconds"] / 1e9
    g = d.groupby(["op", "bucket_bytes"])
    out = pd.DataFrame(
        {"calls": g.size(), "latency ms": g["seconds"].median() * 1e3, "busbw GB/s": g["busbw"].median()}
    ).reset_index()
    out.insert(1, "size", [f"{size_label(b)}-{size_label(2 * b)}" for b in out["bucket_bytes"]])
    return out.sort_values(["op", "bucket_bytes"]).reset_index(drop=True)


def size_label(n: float) -> str:
    """``262144`` -> ``"256 KiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}"
        n /= 1024
    return f"{n:.0f} TiB"

"""The steps table: the interchange format between the store, analysis and everyone else (:func:`validate`).

One row per (rank, step): ``rank``, ``step``, ``start_s`` (epoch seconds), ``duration_s``; every other
``<identifier>_s`` column is seconds in that phase, ``comm_s`` seconds blocked in collectives, a column
with a dot never a phase (docs/runs.md, "The steps table"). :data:`ROW_STEPS`: how many steps a row
stands for, its times per-step means (a live job's window; 1 when absent).

>>> import pandas as pd
>>> t = validate(pd.DataFrame({"rank": [0], "step": [0], "start_s": [0.0], "duration_s": [0.1],
...                            "forward_s": [0.05]}))
>>> phase_columns(t)
['forward_s']
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Iterable, cast

import numpy as np
import pandas as pd

from .names import zero_when_absent

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("telemetry")

REQUIRED = ("rank", "step", "start_s", "duration_s")
ROW_STEPS = "row_steps"
NOT_PHASES = frozenset({"start_s", "duration_s", "comm_s"})
TABLE_OUTPUTS = (".csv", ".parquet", ".pq")  # what write_table writes
_NONFINITE = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf}


class TableError(ValueError):
    """The input is not a steps table; the message names what is wrong and what is accepted."""


def phase_columns(table: pd.DataFrame) -> list[str]:
    return [
        c
        for c in table.columns
        if isinstance(c, str) and c.endswith("_s") and c[:-2].isidentifier() and c not in NOT_PHASES
    ]


def phase_names(table: pd.DataFrame) -> list[str]:
    return [c[:-2] for c in phase_columns(table)]


def records_to_table(rows: Iterable[dict[str, Any]], warnings: list[str] | None = None) -> pd.DataFrame:
    """The run store's step lines (dicts, as :mod:`telemetry.store.writer` writes them) -> steps table.
    What :func:`validate` skips is said in ``warnings``."""
    cols: dict[str, list] = {
        k: [] for k in ("rank", "step", "start_s", "duration_s", "ok", "tokens", "samples", "comm_s", "comm_bytes")
    }
    extra: dict[str, dict[int, Any]] = {}
    n = 0
    for r in rows:
        cols["rank"].append(r["rank"])
        cols["step"].append(r["step"])
        cols["start_s"].append(r["start_s"])
        cols["duration_s"].append(r["duration_s"])
        cols["ok"].append(bool(r.get("ok", True)))
        cols["tokens"].append(r.get("tokens"))
        cols["samples"].append(r.get("samples"))
        cols["comm_s"].append(r.get("comm_s", 0.0))
        cols["comm_bytes"].append(sum(int(v[3]) for v in (r.get("ops") or {}).values()))
        for name, sec in (r.get("phases") or {}).items():
            extra.setdefault(f"{name}_s", {})[n] = sec
        for name, sec in (r.get("phase_comm") or {}).items():
            extra.setdefault(f"comm.{name}_s", {})[n] = sec
        for name, val in (r.get("scalars") or {}).items():
            extra.setdefault(f"log.{name}", {})[n] = val
        for name, text in (r.get("nonfinite") or {}).items():  # NaN / inf, written as null
            extra.setdefault(f"log.{name}", {})[n] = _NONFINITE.get(text, np.nan)
        for name, val in (r.get("device") or {}).items():
            extra.setdefault(f"dev.{name}", {})[n] = val
        if r.get("mfu") is not None:
            extra.setdefault("mfu", {})[n] = r["mfu"]
        if r.get("host_duration_s") is not None:
            extra.setdefault("host.duration_s", {})[n] = r["host_duration_s"]
        for name, (sec, nbytes) in (r.get("comm_groups") or {}).items():
            extra.setdefault(f"comm_group.{name}_s", {})[n] = sec
            extra.setdefault(f"comm_group.{name}_bytes", {})[n] = nbytes
        for name, val in (r.get("io") or {}).items():
            extra.setdefault(f"io.{name}", {})[n] = val
        n += 1
    table = pd.DataFrame(cols)
    # Phases in the order a step first ran them, then per-phase comm, then logged values.
    ordered = sorted(
        extra,
        key=lambda k: (k.startswith(("comm_group.", "log.", "dev.", "io.", "mfu", "host.")), k.startswith("comm.")),
    )
    for name in ordered:
        values = extra[name]
        if zero_when_absent(name):
            # A phase that did not run in a step took no time in it (unlike a missing value).
            arr = np.zeros(n)
        else:
            arr = np.full(n, np.nan)
        for i, v in values.items():
            arr[i] = np.nan if v is None else v
        table[name] = arr
    for c in ("tokens", "samples"):
        table[c] = pd.array(table[c], dtype="Int64")
    if n == 0:
        return _empty()
    return validate(table, source="run store", owned=True, warnings=warnings)


def columns_to_table(
    columns: pa.Table, before: pd.DataFrame | None = None, warnings: list[str] | None = None
) -> pd.DataFrame:
    """The run store's step columns (format 2, an Arrow table already named as the steps table
    names them) -> steps table, after ``before`` (format 1's rows of the same run, which later rows
    replace). A phase column missing from some segments took no time in their steps. ``columns``
    is consumed: its buffers are released as they are converted (peak memory about one copy)."""
    table = columns.to_pandas(self_destruct=True, split_blocks=True)
    del columns
    if before is not None and len(before):
        table = pd.concat([before, table], ignore_index=True)
    for name in table.columns:
        if isinstance(name, str) and zero_when_absent(name) and name not in ("start_s", "duration_s"):
            table[name] = table[name].fillna(0.0)
    for c in ("tokens", "samples"):
        if c in table.columns:
            table[c] = pd.array(table[c], dtype="Int64")
    if "ok" in table.columns:
        table["ok"] = table["ok"].fillna(True).astype(bool)
    return validate(table, source="run store", owned=True, warnings=warnings)


def _empty() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "rank": pd.Series([], dtype="int64"),
            "step": pd.Series([], dtype="int64"),
            "start_s": pd.Series([], dtype="float64"),
            "duration_s": pd.Series([], dtype="float64"),
        }
    )


def validate(
    table: pd.DataFrame, source: str = "table", owned: bool = False, warnings: list[str] | None = None
) -> pd.DataFrame:
    """Check and normalize a steps table: types, missing or bad rows (reported and dropped), and
    duplicate (rank, step) rows (the last kept). ``owned``: the frame may be changed in place.
    Row order is kept; rows are sorted by (rank, step) only when they had to be de-duplicated.
    What was skipped or changed is logged and, when given, appended to ``warnings`` (one line
    each, naming ``source``, how many rows and why)."""

    def said(text: str) -> None:
        log.warning("telemetry: %s: %s", source, text)
        if warnings is not None:
            warnings.append(f"{source}: {text}")

    missing = [c for c in REQUIRED if c not in table.columns]
    if missing:
        raise TableError(
            f"{source}: missing column(s) {', '.join(missing)}; a steps table needs "
            f"{', '.join(REQUIRED)} (found: {', '.join(map(str, table.columns[:20]))})"
        )
    t = table if owned else table.copy(deep=False)
    for c in REQUIRED + tuple(phase_columns(t)) + (("comm_s",) if "comm_s" in t.columns else ()):
        if isinstance(t[c], pd.DataFrame):
            raise TableError(f"{source}: column {c} appears more than once; accepted: each column once")
        if not pd.api.types.is_numeric_dtype(t[c]) or pd.api.types.is_bool_dtype(t[c]):
            before = t[c].notna().to_numpy()
            try:
                t[c] = pd.to_numeric(t[c], errors="coerce")
            except (TypeError, ValueError):
                raise TableError(f"{source}: column {c} is not numeric") from None
            unread = int((before & t[c].isna().to_numpy()).sum())
            if unread:
                said(f"{unread} value(s) in {c} are not numbers; read as missing")
    if len(t) and not cast(pd.DataFrame, t[list(REQUIRED)]).notna().any(axis=0).all():
        empty = [c for c in REQUIRED if not t[c].notna().any()]
        raise TableError(
            f"{source}: column(s) {', '.join(empty)} hold no number in any of its {len(t)} row(s); "
            "accepted: numbers (rank and step integers, start_s and duration_s seconds)"
        )
    bad = np.zeros(len(t), dtype=bool)
    odd = np.zeros(len(t), dtype=bool)
    for c in REQUIRED:
        v = t[c].to_numpy(dtype=float, na_value=np.nan)
        bad |= ~np.isfinite(v)
        if c in ("rank", "duration_s"):
            bad |= v < 0
        if c in ("rank", "step"):
            odd |= np.isfinite(v) & ((v != np.floor(v)) | (np.abs(v) >= 2.0**63))  # int64 holds it
    odd &= ~bad
    if bad.any():
        said(
            f"{int(bad.sum())} row(s) with missing, non-finite or negative "
            f"rank/step/start_s/duration_s skipped{_where(t, bad)}"
        )
    if odd.any():
        said(f"{int(odd.sum())} row(s) whose rank or step is not an integer skipped{_where(t, odd)}")
    if bad.any() or odd.any():
        t = cast(pd.DataFrame, t[~(bad | odd)])
    for c in phase_columns(t) + ["comm_s"]:
        if c in t.columns:
            neg = (t[c] < 0).to_numpy()
            if neg.any():
                said(f"{int(neg.sum())} negative value(s) in {c} treated as missing")
                t[c] = t[c].mask(neg)
    if t["rank"].dtype != np.int64:
        t["rank"] = t["rank"].astype("int64")
    if t["step"].dtype != np.int64:
        t["step"] = t["step"].astype("int64")
    n_dup = _duplicates(t["rank"].to_numpy(), t["step"].to_numpy())
    if n_dup:
        said(f"{n_dup} duplicate (rank, step) row(s); the last of each kept (a restarted job re-ran those steps)")
        t = cast(pd.DataFrame, t[~t.duplicated(["rank", "step"], keep="last")]).sort_values(
            ["rank", "step"], kind="stable"
        )
    return t.reset_index(drop=True)


def _where(t: pd.DataFrame, rows: np.ndarray) -> str:
    """Where some rows are, to find them in the input: " (rank 2, steps 200-290)"; "" when unknown."""
    rank = t["rank"].to_numpy(dtype=float, na_value=np.nan)[rows]
    step = t["step"].to_numpy(dtype=float, na_value=np.nan)[rows]
    ranks = np.unique(rank[np.isfinite(rank)])
    steps = step[np.isfinite(step)]
    parts = []
    if len(ranks):
        shown = ", ".join(f"{r:g}" for r in ranks[:5]) + (f" and {len(ranks) - 5} more" if len(ranks) > 5 else "")
        parts.append(f"rank{'s' if len(ranks) > 1 else ''} {shown}")
    if len(steps):
        lo, hi = steps.min(), steps.max()
        parts.append(f"step {lo:g}" if lo == hi else f"steps {lo:g}-{hi:g}")
    return f" ({', '.join(parts)})" if parts else ""


def _duplicates(rank: np.ndarray, step: np.ndarray) -> int:
    """How many rows repeat an earlier (rank, step), counted without sorting when it can be."""
    if len(rank) == 0:
        return 0
    r0, s0 = int(rank.min()), int(step.min())
    nr, ns = int(rank.max()) - r0 + 1, int(step.max()) - s0 + 1
    if nr * ns <= 4 * max(len(rank), 1 << 20):
        counts = np.bincount((rank - r0) * ns + (step - s0), minlength=nr * ns)
        return int((counts[counts > 1] - 1).sum())
    return int(pd.Series(rank).to_frame("r").assign(s=step).duplicated().sum())


def write_table(table: pd.DataFrame, path: str) -> None:
    """Write a steps table as CSV or Parquet, by the suffix of ``path``."""
    low = path.lower()
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    if low.endswith(".csv"):
        table.to_csv(path, index=False)
    elif low.endswith(TABLE_OUTPUTS):
        table.to_parquet(path, index=False)
    else:
        raise TableError(f"{path!r}: unknown output type; accepted: .csv or .parquet")

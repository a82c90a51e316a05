"""Other people's trace formats, turned into steps tables.

Per-operation traces (one row per recorded operation), as published with "Understanding
Stragglers in Large Model Training Using What-if Analysis" (OSDI 2025, ByteDance-Seed/
StragglerAnalysis): columns ``rank``, ``step``, ``optype``, ``start_ts``, ``duration`` (seconds) and
the layout, ``dp_rank`` and ``stage`` (pipeline rank). Per (rank, step): compute optypes become
phases (``forward-compute`` -> ``forward_s``, ``backward-compute`` -> ``backward_s``,
``optimizer*`` -> ``optimizer_s``, ``gc`` -> ``gc_s``), communication optypes (sends, receives,
all-gathers, reduce-scatters, all-reduces) add up to ``comm_s``, ``duration_s`` runs from the first
operation's start to the last one's end, and ``stage`` / ``dp_rank`` are kept so that detectors
compare ranks with their own pipeline stage.
"""

from __future__ import annotations

import logging
from typing import cast

import numpy as np
import pandas as pd

log = logging.getLogger("telemetry")

PER_OP_COLUMNS = {"rank", "step", "optype", "start_ts", "duration"}
_COMM_WORDS = (
    "send",
    "recv",
    "all-gather",
    "reduce-scatter",
    "all-reduce",
    "allreduce",
    "allgather",
    "broadcast",
    "all-to-all",
    "comm",
    "all_gather",
    "reduce_scatter",
    "all_reduce",
    "all_to_all",
    "barrier",
)  # torch's own op names


def phase_of(optype: str) -> str | None:
    """The phase a compute optype belongs to; None for communication and markers."""
    op = optype.lower()
    if any(w in op for w in _COMM_WORDS):
        return None
    if op.startswith("forward"):
        return "forward"
    if op.startswith("backward"):
        return "backward"
    if op.startswith("optimizer"):
        return "optimizer"
    if op == "gc":
        return "gc"
    if op in ("first-op",):
        return None
    return op.replace("-", "_") if op.replace("-", "_").isidentifier() else None


def is_comm(optype: str) -> bool:
    return any(w in optype.lower() for w in _COMM_WORDS)


def per_op_to_steps(ops: pd.DataFrame, source: str = "trace", warnings: list[str] | None = None) -> pd.DataFrame:
    """Per-operation trace -> steps table (one row per rank and step). Operations with a start,
    duration, rank or step that is not a number (or a negative duration) are skipped and counted
    in ``warnings``."""
    nums = {
        c: cast(pd.Series, pd.to_numeric(ops[c], errors="coerce")).to_numpy(dtype=float, na_value=np.nan)
        for c in ("rank", "step", "start_ts", "duration")
    }
    good = (
        np.isfinite(nums["start_ts"])
        & np.isfinite(nums["duration"])
        & (nums["duration"] >= 0)
        & np.isfinite(nums["rank"])
        & np.isfinite(nums["step"])
    )
    if not good.all():
        text = (
            f"{int((~good).sum())} operation(s) with a missing, non-numeric or negative "
            "rank/step/start_ts/duration skipped"
        )
        log.warning("telemetry: %s: %s", source, text)
        if warnings is not None:
            warnings.append(f"{source}: {text}")
    ops = cast(pd.DataFrame, ops.assign(**{c: nums[c] for c in nums})[good])
    for c in ("rank", "step"):  # integers again where they are (a non-integer one is skipped by validate)
        if np.all(ops[c].to_numpy() == np.floor(ops[c].to_numpy())):
            ops[c] = ops[c].astype("int64")
    keys = ["rank", "step"]
    end = ops["start_ts"] + ops["duration"]
    span = ops.assign(_end=end).groupby(keys).agg(start_s=("start_ts", "min"), _end=("_end", "max"))
    table = span.assign(duration_s=span["_end"] - span["start_s"]).drop(columns="_end")
    optypes = ops["optype"].astype(str)
    phase = optypes.map({o: phase_of(o) for o in optypes.unique()})
    comp = ops.assign(_phase=phase).dropna(subset=["_phase"])
    per_phase = comp.pivot_table(index=keys, columns="_phase", values="duration", aggfunc="sum", fill_value=0.0)
    per_phase.columns = [f"{c}_s" for c in per_phase.columns]
    comm = ops[optypes.map({o: is_comm(o) for o in optypes.unique()})].groupby(keys)["duration"].sum().rename("comm_s")
    table = table.join(per_phase, how="left").join(comm, how="left")
    table["comm_s"] = table["comm_s"].fillna(0.0)
    for c in ("stage", "dp_rank"):
        if c in ops.columns:
            table[c] = ops.groupby(keys)[c].first()
    return table.reset_index()


def is_per_op_trace(raw: pd.DataFrame) -> bool:
    """A table of operations (not already a steps table)."""
    return PER_OP_COLUMNS <= set(raw.columns) and "duration_s" not in raw.columns

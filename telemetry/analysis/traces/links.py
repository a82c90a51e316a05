"""From a finding to its traces: the trace ids of the finding's worst traced steps.

A run whose ranks exported traces says so in its meta (``traces``: ``{"job", "every"}``). Which steps a
rank traced is a function of its own steps (:class:`telemetry.traceids.StepSampler`), so it is replayed
here from the steps table, and a step's trace id is a function of (job, step): no trace backend is
asked. A finding's worst steps are those where its culprit ranks (every rank for a job-wide finding)
spent the most in what it is about (its phase, the collectives for ``slow_comm``, else the step); the
first :data:`LIMIT` traced ones give ``trace_ids``. More: docs/exporters.md, "OpenTelemetry".
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np
import pandas as pd

from ...traceids import StepSampler, trace_id_hex
from ..findings import Finding

LIMIT = 5  # trace ids per finding
TAIL_STEPS = 256  # a finding of a run read in windows: its worst steps among its last this many


class _Row:
    __slots__ = ("step", "duration_s", "ok")

    def __init__(self, step: int, duration_s: float, ok: bool) -> None:
        self.step, self.duration_s, self.ok = step, duration_s, ok


def traced(table: pd.DataFrame, every: int) -> pd.Series:
    """Per row of ``table``: whether its rank traced that step (replayed per rank, in step order)."""
    out = pd.Series(False, index=table.index)
    if table.empty:
        return out
    ok = table["ok"] if "ok" in table.columns else pd.Series(True, index=table.index)
    for _, rows in table.sort_values(["rank", "step"]).groupby("rank", sort=False):
        sample = StepSampler(every)
        dur = rows["duration_s"].to_numpy(dtype=float)
        flags = [
            bool(np.isfinite(d)) and sample(_Row(int(s), float(d), bool(o)))
            for s, d, o in zip(rows["step"].to_numpy(), dur, ok.loc[rows.index].to_numpy())
        ]
        out.loc[rows.index] = flags
    return out


def _cost_column(f: Finding, table: pd.DataFrame) -> str:
    if f.kind == "slow_comm" and "comm_s" in table.columns:
        return "comm_s"
    if f.phase and f"{f.phase}_s" in table.columns:
        return f"{f.phase}_s"
    return "duration_s"


def worst_traced_steps(f: Finding, table: pd.DataFrame, sampled: pd.Series, limit: int = LIMIT) -> list[int]:
    """The steps of ``f`` that a culprit rank traced, worst first (at most ``limit``)."""
    sel = sampled.copy()
    if f.ranks:
        sel &= table["rank"].isin(f.ranks)
    if f.first_step is not None:
        sel &= table["step"] >= f.first_step
    if f.last_step is not None:
        sel &= table["step"] <= f.last_step
    rows = table.loc[sel, ["step", _cost_column(f, table)]]
    if rows.empty:
        return []
    cost = rows.groupby("step")[rows.columns[1]].max().fillna(-np.inf)
    order = sorted(cost.index, key=lambda s: (-cost[s], s))
    return [int(s) for s in order[:limit]]


def trace_settings(meta: dict[str, Any]) -> tuple[str, int] | None:
    """(job, every) when the run exported traces, else None."""
    t = meta.get("traces") if isinstance(meta, dict) else None
    if not isinstance(t, dict) or not isinstance(t.get("job"), str):
        return None
    every = t.get("every")
    if not isinstance(every, int) or every < 1:
        return None
    return t["job"], every


def with_trace_ids(
    findings: list[Finding],
    meta: dict[str, Any],
    table: pd.DataFrame,
    rows_for: Callable[[int, int], pd.DataFrame] | None = None,
) -> list[Finding]:
    """``findings`` with ``trace_ids`` (hex, worst first) when the run exported traces. ``table`` holds
    the steps analyzed; a finding outside it (a run read in windows) is looked up in ``rows_for(first,
    last)``, its last :data:`TAIL_STEPS` steps."""
    settings = trace_settings(meta)
    if settings is None or not findings:
        return findings
    job, every = settings
    sampled = traced(table, every)
    lo, hi = (int(table["step"].min()), int(table["step"].max())) if len(table) else (0, -1)
    out = []
    for f in findings:
        t, s = table, sampled
        inside = f.first_step is None or (lo <= f.first_step and (f.last_step or hi) <= hi)
        if not inside and rows_for is not None and f.last_step is not None:
            first = max(f.first_step or 0, f.last_step - TAIL_STEPS + 1)
            t = rows_for(first, f.last_step)
            s = traced(t, every)  # replayed over the rows read (its first 10 steps are not judged slow)
        steps = worst_traced_steps(f, t, s)
        out.append(dataclasses.replace(f, trace_ids=[trace_id_hex(job, step) for step in steps]))
    return out

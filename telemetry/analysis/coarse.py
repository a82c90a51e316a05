"""A long run analyzed from the run store's coarse level: blocks of steps first, raw rows only where
a block shows something.

A run directory of more than ``COARSE_ROWS`` rows (ranks x steps), analyzed whole (no ``--steps`` or
``--last``, no ``--raw``), is read from its aggregates (:mod:`telemetry.store.aggregates`: per rank
and block of 64 steps, written when each segment is sealed) rather than its rows: a row per rank
and block, its values the block's medians, the same table online detection builds from its blocks,
and the detectors run on it as online detection runs them
(:func:`~.detectors.blocks.analyze_blocks`). 10,000 ranks x 10,000 steps are 1.6 million such rows
instead of 100 million.

Then, where a block shows something: each finding that names ranks (at warning or above, the first
``REFINE_MAX``) is measured again on the raw rows of a stretch of its steps (at most
``REFINE_ROWS`` rows: every rank, the middle of the finding's steps), since a block's median hides
the step-to-step noise that decides how much of a rank's excess the job waits for: the finding
takes that stretch's what-if and severity, or, when the raw rows do not show it at warning, is said
at info. Job-wide findings (a regression, slow communication) keep the blocks' what-if, which the
noise does not move. A finding's steps are those of its blocks (``details.block_steps``: a step
number stands for the 64 steps from it).

Limits: checkpoint findings need the steps (a block's median of a rare checkpoint is 0): run with
``--raw`` or ``--steps``; the moving imbalance and the gaps between steps are not looked for (as
online); a restarted job's re-run steps count twice in their blocks.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import numpy as np
import pandas as pd

COARSE_ROWS = 4_000_000  # runs of more rows (ranks x steps) are read from their blocks
REFINE_ROWS = 2_000_000  # raw rows read to measure one finding again
REFINE_MIN_STEPS = 128  # ... at least this many steps of it
REFINE_MAX = 8  # findings measured again on raw rows (the costliest first)
BLOCK_NOTE = "medians over blocks of 64 steps"


def block_table(agg: Any) -> pd.DataFrame:
    """The aggregates (an Arrow table, a row per rank and block) -> a steps table of blocks: ``step``
    the block's first step (block x 64), ``start_s`` its first start, and the block's medians:
    ``duration_s``, ``comm_s``, ``data_s``, each other phase's compute (the phase less the collectives
    inside it; ``comm.<phase>_s`` 0), ``tokens``, ``mfu``, device and process-group readings."""
    from ..store.aggregates import BLOCK

    names = agg.column_names
    col = {n: agg.column(n).to_numpy(zero_copy_only=False) for n in ("rank", "block")}
    out: dict[str, np.ndarray] = {
        "rank": col["rank"].astype(np.int64),
        "step": col["block"].astype(np.int64) * BLOCK,
        "start_s": _med(agg, "start_s|min"),
        "duration_s": _med(agg, "duration_s|p50"),
        "comm_s": _med(agg, "comm_s|p50") if "comm_s|p50" in names else np.zeros(agg.num_rows),
    }
    if "data_s|p50" in names:
        out["data_s"] = _med(agg, "data_s|p50")
    phases = [n[len("compute.") : -len("|p50")] for n in names if n.startswith("compute.") and n.endswith("|p50")]
    for p in phases:
        if p == "data_s":
            continue
        out[p] = _med(agg, f"compute.{p}|p50")
        out[f"comm.{p}"] = np.zeros(agg.num_rows)
    for n in names:
        base = n[: -len("|p50")] if n.endswith("|p50") else None
        if base and (base in ("tokens", "mfu") or base.startswith(("dev.", "comm_group."))):
            out[base] = _med(agg, n)
    table = pd.DataFrame(out)
    table = table[np.isfinite(table["duration_s"].to_numpy()) & np.isfinite(table["start_s"].to_numpy())]
    return table.sort_values(["step", "rank"], kind="stable").reset_index(drop=True)


def _med(agg: Any, name: str) -> np.ndarray:
    return agg.column(name).to_numpy(zero_copy_only=False).astype(np.float64)


def analyze_coarse(
    agg: Any,
    ranks: int,
    read_raw: Callable[[tuple[int, int]], pd.DataFrame],
    progress: Any = None,
    world_size: int | None = None,
    **params: Any,
) -> Any:
    """Findings of the blocks (``agg``), the ranked ones measured again on raw rows (``read_raw((a,
    b))`` -> the steps table of steps a..b). ``params``: :func:`~.detectors.analyze`'s (utilization,
    checkpoint, hang_bound_s, base, base_name). Returns the Analysis, ``summary["coarse"]`` saying so."""
    from ..store.aggregates import BLOCK
    from .detectors import analyze
    from .detectors.blocks import analyze_blocks
    from .detectors.straggler import StragglerParams

    table = block_table(agg)
    first, last = int(agg.column("first_step").to_numpy().min()), int(agg.column("last_step").to_numpy().max())
    hang = params.pop("hang_bound_s", None)
    # the run's warm-up (in steps, as a whole run's analysis skips it) in blocks: the blocks it touches
    warm = StragglerParams(warmup_steps=-(-StragglerParams().warmup(last - first + 1) // BLOCK))
    result = analyze_blocks(
        table,
        params.pop("utilization", None),
        progress=progress,
        world_size=world_size,
        hang_bound_s=hang,
        straggler=warm,
        **params,
    )
    refined, findings = [], []
    order = sorted(range(len(result.findings)), key=lambda i: -result.findings[i].slowdown)
    chosen = {i for i in order if result.findings[i].ranks and result.findings[i].severity != "info"}
    chosen = set(sorted(chosen, key=order.index)[:REFINE_MAX])
    edges = {i for i in order if result.findings[i].severity != "info"}
    edges = set(sorted(edges, key=order.index)[:REFINE_MAX])
    warm_at = (first + warm.warmup_steps * BLOCK, first + StragglerParams().warmup(last - first + 1))
    for i, f in enumerate(result.findings):
        f = replace(f, details={**f.details, "block_steps": BLOCK})
        if f.last_step is not None and f.last_step + BLOCK - 1 >= last:
            f = replace(f, last_step=last)  # its last block ends with the run
        if i in edges and f.first_step is not None:
            f = _edges(f, table, read_raw, warm_at)
        if i in chosen and f.first_step is not None:
            window = _stretch(f, ranks, last)
            raw = read_raw(window)
            again = (
                analyze(raw, straggler=StragglerParams(warmup_steps=0), utilization=None, **params)
                if len(raw)
                else None
            )
            f = _measured(f, again, window)
            refined.append({"kind": f.kind, "ranks": f.ranks[:8], "phase": f.phase, "steps": list(window)})
        findings.append(f)
    result.findings = findings
    s = result.summary
    if s.get("steps"):
        s["steps"] = last - first + 1
        s["first_step"], s["last_step"] = first, last
    s["coarse"] = {
        "block_steps": BLOCK,
        "blocks": int(table["step"].nunique()),
        "rows": len(table),
        "measured_again": refined,
    }
    return result


def _series(f: Any, table: pd.DataFrame) -> str | None:
    """The column of the block table a finding is measured in."""
    if f.kind == "slow_comm":
        name = "comm_s"
    else:
        name = "data_s" if f.phase == "data" else f"{f.phase}_s" if f.phase else "duration_s"
    return name if name in table.columns else None


def _split(e: np.ndarray) -> int | None:
    """Where the series ``e`` changes level most (binary segmentation's one split), or None."""
    n = len(e)
    if n < 4 or not np.isfinite(e).all():
        return None
    c = np.cumsum(e)
    k = np.arange(1, n)
    before, after = c[:-1] / k, (c[-1] - c[:-1]) / (n - k)
    stat = np.abs(before - after) * np.sqrt(k * (n - k) / n)
    return int(k[np.argmax(stat)])


def _excess(x: pd.DataFrame, f: Any, col: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, the series whose level says where ``f`` is) of table ``x``: the finding's ranks'
    excess over the median of all ranks, or for a job-wide finding the median of all ranks."""
    if f"comm.{col}" in x.columns:  # the phase's compute (the blocks' comm.* are 0: the same there)
        x = x.assign(**{col: x[col] - x[f"comm.{col}"].fillna(0.0)})
    wide = x.pivot_table(index="step", columns="rank", values=col, aggfunc="median")
    peers = wide.median(axis=1)
    if not f.ranks:
        return wide.index.to_numpy(), peers.to_numpy()
    mine = wide[[r for r in f.ranks if r in wide.columns]].mean(axis=1)
    return wide.index.to_numpy(), (mine - peers).to_numpy()


def _edges(
    f: Any, table: pd.DataFrame, read_raw: Callable[[tuple[int, int]], pd.DataFrame], warm: tuple[int, int]
) -> Any:
    """``f``'s first or last step moved to where its series changes level: found in the blocks, then
    to the step in the raw rows of the blocks either side. A block's median smooths an onset that a
    rolling window over blocks then blurs further; the rows keep it. A finding from the run's first
    block after warm-up (``warm``: that block's first step, the steps' own warm-up end) whose excess
    is in the raw rows before it begins where the steps' warm-up ends, as a reading of the rows does."""
    from ..store.aggregates import BLOCK

    col = _series(f, table)
    if col is None:
        return f
    part = table[(table["step"] >= f.first_step - BLOCK) & (table["step"] <= f.last_step)]  # and the block before
    steps, e = _excess(part, f, col)
    k = _split(e)
    lo, hi = (float(np.mean(e[:k])), float(np.mean(e[k:]))) if k is not None else (0.0, 0.0)
    if k is not None and (f.ranks and lo < 0.5 * hi or not f.ranks and hi != lo):
        edge, begins = int(steps[k]), True  # it began at block k (a job-wide level moved there)
    elif k is not None and f.ranks and hi < 0.5 * lo:
        edge, begins = int(steps[k]), False  # cool after: it ended before block k
    elif f.first_step == warm[0] and f.ranks and warm[1] < warm[0]:
        level = float(np.nanmean(e[steps >= f.first_step]))  # its excess, in the blocks
        raw = read_raw((warm[1], warm[0] - 1))
        if level > 0 and len(raw) and col in raw.columns and np.nanmean(_excess(raw, f, col)[1]) >= 0.5 * level:
            return replace(f, first_step=warm[1])
        return f
    else:
        return f
    if not f.ranks and not (f.first_step - BLOCK <= edge <= f.first_step + BLOCK):
        return f  # the job's largest move is elsewhere: leave the detector's edge
    raw = read_raw((max(0, edge - BLOCK), edge + BLOCK - 1))
    if len(raw) and col in raw.columns:
        rs, re = _excess(raw, f, col)
        j = _split(re)
        if j is not None:
            edge = int(rs[j])
    return replace(f, first_step=edge) if begins else replace(f, last_step=edge - 1)


def _stretch(f: Any, ranks: int, run_last: int) -> tuple[int, int]:
    """The steps of ``f`` read raw: its middle, at most REFINE_ROWS rows of every rank."""
    a, b = int(f.first_step), min(int(f.last_step), run_last)
    n = min(b - a + 1, max(REFINE_MIN_STEPS, REFINE_ROWS // max(ranks, 1)))
    mid = (a + b) // 2
    lo = max(a, mid - n // 2)
    return lo, min(b, lo + n - 1)


def _measured(f: Any, again: Any, window: tuple[int, int]) -> Any:
    """``f`` with the what-if and severity of the same finding in the raw rows of ``window``; said at
    info when they do not show it at warning or above."""
    same = [
        g
        for g in (again.findings if again is not None else [])
        if _kin(g.kind, f.kind) and g.phase == f.phase and set(g.ranks) & set(f.ranks)
    ]
    where = f"steps {window[0]}-{window[1]}"
    if not same or max(g.slowdown for g in same) <= 0:
        return replace(
            f,
            severity="info",
            details={**f.details, "blocks_slowdown": f.slowdown, "measured_on": list(window)},
            evidence=f"{f.evidence} (seen in the medians of 64-step blocks; the raw rows of {where} do not show it)",
        )
    g = max(same, key=lambda g: g.slowdown)
    found = f"found in the medians of 64-step blocks, steps {f.first_step}-{f.last_step}"
    evidence = (
        f"{g.evidence} ({found}; what-if measured on the raw rows of {where})"
        if g.kind == f.kind
        else f"{f.evidence.split(' would make ')[0]} ({found}; in the raw rows of {where}, a stretch without "
        f"its onset, it reads as {g.kind}: removing it would make those steps {g.slowdown:.1%} faster)"
    )
    return replace(
        f,
        severity=g.severity,
        slowdown=g.slowdown,
        details={**f.details, "blocks_slowdown": f.slowdown, "measured_on": list(window)},
        evidence=evidence,
    )


# kinds that are one finding seen over different stretches: a rank's slow input is a data stall where
# its onset is in view, input-bound where it is not
_KIN = ({"data_stall", "input_bound"},)


def _kin(a: str, b: str) -> bool:
    return a == b or any(a in k and b in k for k in _KIN)

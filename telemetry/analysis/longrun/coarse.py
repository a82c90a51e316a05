"""A long run analyzed from the run store's coarse level: blocks of steps first, raw rows only where
a block shows something.

A run directory of more than ``COARSE_ROWS`` rows, analyzed whole, is read from its aggregates
(:mod:`telemetry.store.aggregates`: a row per rank and block of 64 steps, its values the block's
medians) and run through the detectors as online detection runs them
(:func:`~..detectors.blocks.analyze_blocks`). Then, for the ``REFINE_MAX`` costliest findings, raw rows
are read to place each edge to the step and to measure a finding that names ranks again on a stretch
of at most ``REFINE_ROWS`` rows (:func:`_measured`); a finding's evidence figures stay its blocks'. The
rules and the limits: docs/runs.md, "Analyzing a long run from its blocks".
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, cast

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    import pyarrow as pa

    from ..detectors import Analysis
    from ..detectors.utilization import UtilizationParams
    from ..findings import Finding

COARSE_ROWS = 4_000_000  # runs of more rows (ranks x steps) are read from their blocks
REFINE_ROWS = 500_000  # raw rows read to measure one finding again
REFINE_MIN_STEPS = 128  # ... at least this many steps of it
REFINE_MAX = 8  # findings measured again on raw rows (the costliest first)
BLOCK_NOTE = "medians over blocks of 64 steps"


def block_table(agg: pa.Table) -> pd.DataFrame:
    """The aggregates (an Arrow table, a row per rank and block) -> a steps table of blocks: ``step``
    the block's first step (block x 64), ``start_s`` its first start, and the block's medians:
    ``duration_s``, ``comm_s``, ``data_s``, each other phase's compute (the phase less the collectives
    inside it; ``comm.<phase>_s`` 0), ``tokens``, ``mfu``, device and process-group readings."""
    from ...store.aggregates import BLOCK

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
    ok = np.isfinite(out["duration_s"]) & np.isfinite(out["start_s"])
    if not ok.all():
        out = {k: v[ok] for k, v in out.items()}
    if not _in_order(out["step"], out["rank"]):  # the kept blocks are (keep.write): no copy
        order = np.lexsort((out["rank"], out["step"]))  # stable, as a sort by (step, rank) is
        out = {k: v[order] for k, v in out.items()}
    return pd.DataFrame(out, copy=False)  # the columns are this table's own: no second copy into one block


def _in_order(step: np.ndarray, rank: np.ndarray) -> bool:
    """Whether rows are sorted by (step, rank) already (equal pairs in any order: a stable sort keeps it)."""
    ds, dr = np.diff(step), np.diff(rank)
    return bool(np.all((ds > 0) | ((ds == 0) & (dr >= 0))))


def wanted(name: str) -> bool:
    """The aggregates' columns :func:`block_table` reads (the rest is not held)."""
    if name == "start_s|min":
        return True
    base, _, stat = name.rpartition("|")
    return stat == "p50" and (
        base in ("duration_s", "comm_s", "data_s", "tokens", "mfu")
        or base.startswith(("compute.", "dev.", "comm_group."))
    )


def _med(agg: pa.Table, name: str) -> np.ndarray:
    return agg.column(name).to_numpy(zero_copy_only=False).astype(np.float64)


def analyze_coarse(
    agg: pa.Table,
    ranks: int,
    read_raw: Callable[[tuple[int, int]], pd.DataFrame],
    progress: Mapping[int, Mapping[str, Any]] | None = None,
    world_size: int | None = None,
    table: pd.DataFrame | None = None,
    **params: Any,
) -> Analysis:
    """Findings of the blocks (``agg``; ``table``: its :func:`block_table` when already made), the
    ranked ones measured again on raw rows (``read_raw((a, b))`` -> the steps table of steps a..b).
    ``params``: :func:`~.detectors.analyze`'s (utilization, checkpoint, hang_bound_s, base,
    base_name). Returns the Analysis, ``summary["coarse"]`` saying so."""
    from ...store.aggregates import BLOCK
    from ..detectors import analyze
    from ..detectors.blocks import analyze_blocks
    from ..detectors.stretch import StragglerParams

    table = block_table(agg) if table is None else table
    first, last = int(agg.column("first_step").to_numpy().min()), int(agg.column("last_step").to_numpy().max())
    hang = params.pop("hang_bound_s", None)
    utilization = params.get("utilization")
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
    refined, findings, remeasured = [], [], []
    order = sorted(range(len(result.findings)), key=lambda i: -result.findings[i].slowdown)  # costliest first
    edges = set([i for i in order if result.findings[i].severity != "info"][:REFINE_MAX])
    chosen = set([i for i in order if result.findings[i].severity != "info" and result.findings[i].ranks][:REFINE_MAX])
    warm_at = (first + cast(int, warm.warmup_steps) * BLOCK, first + StragglerParams().warmup(last - first + 1))
    for i, f in enumerate(result.findings):
        f = replace(f, details={**f.details, "block_steps": BLOCK})
        if f.last_step is not None and f.last_step + BLOCK - 1 >= last:
            f = replace(f, last_step=last)  # its last block ends with the run
        if f.first_step is None or i not in edges:
            findings.append(f)
            continue
        onset = _onset(f, table, warm_at)
        measure = _stretch(f, ranks, last, onset) if i in chosen else None
        want = [w for w in (_area(onset), measure) if w is not None]
        if not want:
            findings.append(f)
            continue
        raw = read_raw((min(w[0] for w in want), max(w[1] for w in want)))  # one read of the rows
        f = _pinned(f, onset, raw, table)
        if measure is not None:
            part = (
                cast(pd.DataFrame, raw[(raw["step"] >= measure[0]) & (raw["step"] <= measure[1])]) if len(raw) else raw
            )
            again = (
                analyze(part, straggler=StragglerParams(warmup_steps=0), utilization=None, **params)
                if len(part)
                else None
            )
            before = f
            f = _measured(f, again, measure)
            remeasured.append((before, f))
            refined.append({"kind": f.kind, "ranks": f.ranks[:8], "phase": f.phase, "steps": list(measure)})
        findings.append(f)
    result.findings = findings
    s = result.summary
    _settle_summary(result, agg, remeasured, utilization)
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


def _settle_summary(
    result: Analysis,
    agg: pa.Table,
    remeasured: list[tuple[Finding, Finding]],
    utilization: UtilizationParams | None = None,
) -> None:
    """The summary of a blocks' analysis, made to agree with its findings once some were measured again
    on raw rows (``remeasured``: (as the blocks had it, as the rows have it)): the count and highest
    severity anew; the estimated slowdown less what the rows took off each one's what-if (a finding the
    rows do not show: all of it), in proportion to the steps it covers; and the run's time (``uptime``,
    ``goodput``) with each block column standing for the steps it holds (not one step), its waits and
    collectives one part as for windows of steps (a block's medians cannot say which rank came last).
    What the rows took off the findings' what-ifs is moved, in the busy split (``utilization``) and a
    low_utilization finding, from waiting for the findings' culprits to waiting for slower ranks."""
    from ...store.aggregates import BLOCK
    from ..detectors import covered_seconds, goodput_split, uptime
    from ..detectors.utilization import retold, to_slower_ranks
    from ..findings import SEVERITIES, tally

    s, m = result.summary, result.matrix
    if m is None or not m.n_steps:
        return
    total_s = float(np.nansum(m.step_time()))
    back = 0.0
    for was, now in remeasured if total_s > 0 else []:
        shown = now.severity != "info" or now.slowdown != was.slowdown
        back += (was.slowdown - (now.slowdown if shown else 0.0)) * covered_seconds(m, was) / total_s
    if back > 0:
        if "hang" not in s.get("by_kind", {}):
            s["slowdown"] = round(min(1.0, max(0.0, s["slowdown"] - back)), 6)
        idle = (s.get("utilization") or {}).get("idle")
        if idle:
            idle, _ = to_slower_ranks(idle, back)
            s["utilization"]["idle"] = {
                k: round(v, 4) for k, v in sorted(idle.items(), key=lambda kv: -kv[1]) if round(v, 4) > 0
            }
        result.findings = [
            retold(f, m, back, utilization) if f.kind == "low_utilization" else f for f in result.findings
        ]
    # worst first, as analyze orders them, now that the rows have said their severities and what-ifs
    result.findings.sort(key=lambda f: (-SEVERITIES.index(f.severity), -f.slowdown))
    s.update(tally(result.findings))
    # each block column: the median over ranks of the steps its rows hold (the run's last block may be short)
    blocks = agg.column("block").to_numpy().astype(np.int64) * BLOCK
    held = pd.Series(agg.column("n").to_numpy(zero_copy_only=False).astype(np.float64)).groupby(blocks).median()
    weighted = replace(m, weight=held.reindex(m.steps).fillna(BLOCK).to_numpy(dtype=np.float64))
    up = uptime(weighted)
    s["uptime"] = up
    s["goodput"] = goodput_split(weighted, result.shift, up)


def _series(f: Finding, table: pd.DataFrame) -> str | None:
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


def _excess(x: pd.DataFrame, f: Finding, col: str) -> tuple[np.ndarray, np.ndarray]:
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


def _onset(f: Finding, table: pd.DataFrame, warm: tuple[int, int]) -> tuple[str, int, str] | None:
    """Where, in the blocks, ``f``'s series changes level: ("begins" or "ends", the block's first step,
    the column), or ("warm", the steps' warm-up end, the column) for a finding from the run's first
    block after warm-up (``warm``: that block's first step, the steps' warm-up end), whose raw rows
    before it may already hold its excess; None when no edge is to be moved. A block's median smooths
    an onset that a rolling window over blocks then blurs further; the rows keep it."""
    from ...store.aggregates import BLOCK

    col = _series(f, table)
    if col is None:
        return None
    part = cast(
        pd.DataFrame, table[(table["step"] >= cast(int, f.first_step) - BLOCK) & (table["step"] <= f.last_step)]
    )  # and the block before
    steps, e = _excess(part, f, col)
    k = _split(e)
    lo, hi = (float(np.mean(e[:k])), float(np.mean(e[k:]))) if k is not None else (0.0, 0.0)
    if k is not None and (f.ranks and lo < 0.5 * hi or not f.ranks and hi != lo):
        first = cast(int, f.first_step)  # analyze_coarse's edges: findings with steps
        if not f.ranks and not (first - BLOCK <= steps[k] <= first + BLOCK):
            return None  # the job's largest move is elsewhere: the detector's edge stays
        return "begins", int(steps[k]), col  # it began at block k (a job-wide level moved there)
    if k is not None and f.ranks and hi < 0.5 * lo:
        return "ends", int(steps[k]), col  # cool after: it ended before block k
    if f.first_step == warm[0] and f.ranks and warm[1] < warm[0]:
        return "warm", warm[1], col
    return None


def _area(onset: tuple[str, int, str] | None) -> tuple[int, int] | None:
    """The raw steps that pin an onset to the step: the blocks either side, or the warm-up's rest."""
    from ...store.aggregates import BLOCK

    if onset is None:
        return None
    how, at, _ = onset
    if how == "warm":
        return at, at + (-at % BLOCK or BLOCK) - 1
    return max(0, at - BLOCK), at + BLOCK - 1


def _pinned(f: Finding, onset: tuple[str, int, str] | None, raw: pd.DataFrame, table: pd.DataFrame) -> Finding:
    """``f`` with its edge moved to the step where, in ``raw``, its series changes level."""
    if onset is None or not len(raw):
        return f
    how, at, col = onset
    if col not in raw.columns:
        return f
    lo, hi = cast("tuple[int, int]", _area(onset))  # an onset's area
    rows = cast(pd.DataFrame, raw[(raw["step"] >= lo) & (raw["step"] <= hi)])
    if not len(rows):
        return f
    steps, e = _excess(rows, f, col)
    if how == "warm":  # its excess already in the warm-up's last rows, as in its blocks: it began there
        blocks = cast(pd.DataFrame, table[(table["step"] >= f.first_step) & (table["step"] <= f.last_step)])
        level = float(np.nanmean(_excess(blocks, f, col)[1]))
        return replace(f, first_step=at) if level > 0 and np.nanmean(e) >= 0.5 * level else f
    j = _split(e)
    edge = int(steps[j]) if j is not None else at
    return replace(f, first_step=edge) if how == "begins" else replace(f, last_step=edge - 1)


def _stretch(f: Finding, ranks: int, run_last: int, onset: tuple[str, int, str] | None = None) -> tuple[int, int]:
    """The steps of ``f`` measured again on raw rows, at most REFINE_ROWS rows of every rank: those
    right after its onset (or before its end) when it has one in the blocks, read with the onset's
    rows in one read; else its middle."""
    a, b = int(cast(int, f.first_step)), min(int(cast(int, f.last_step)), run_last)  # a finding with steps
    n = min(b - a + 1, max(REFINE_MIN_STEPS, REFINE_ROWS // max(ranks, 1)))
    area = _area(onset)
    if onset is not None and onset[0] in ("begins", "warm"):
        lo = max(a, cast("tuple[int, int]", area)[1] + 1)  # an onset's area
        return (lo, min(b, lo + n - 1)) if lo + REFINE_MIN_STEPS // 2 <= b else (max(a, b - n + 1), b)
    if onset is not None and onset[0] == "ends":
        hi = min(b, cast("tuple[int, int]", area)[0] - 1)
        return (max(a, hi - n + 1), hi) if hi - REFINE_MIN_STEPS // 2 >= a else (a, min(b, a + n - 1))
    mid = (a + b) // 2
    lo = max(a, mid - n // 2)
    return lo, min(b, lo + n - 1)


def _measured(f: Finding, again: Analysis | None, window: tuple[int, int]) -> Finding:
    """``f`` with the what-if and severity of the same finding in the raw rows of ``window``; said at
    info when they do not show it at warning or above."""
    same = [
        g
        for g in (again.findings if again is not None else [])
        if _same_finding(g.kind, f.kind) and g.phase == f.phase and set(g.ranks) & set(f.ranks)
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
_SAME_FINDING = ({"data_stall", "input_bound"},)


def _same_finding(a: str, b: str) -> bool:
    return a == b or any(a in k and b in k for k in _SAME_FINDING)

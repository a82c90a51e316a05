"""Utilization regressions: the job's busy share, MFU, GPU utilization or SM activity falls, at a
change point within the run or against a baseline run (``telemetry analyze RUN --base BASE``).

Each job-level series (:func:`series`) is searched with regression.py's change points for its largest
lasting fall (:func:`detect_utilization_regression`), or compared with the base run's on block medians
(:func:`_against_base`); a fall counts only when the idle time per step grew (:func:`_a_loss`), so a
share that falls because compute got faster is no regression. Other findings may account for it
(:func:`_accounted`: then ``info``). The rules: docs/finding-kinds.md, "utilization_regression".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...steptable.matrix import StepMatrix, even_sample, nanmedian, rank_median
from ..findings import Finding
from .context import Context, Found
from .ranktest import mann_whitney_p
from .regression import Change, RegressionParams, find_change, for_columns
from .utilization import PARTS, SIGNALS, UtilizationParams, parts_per_step

LABELS = {"busy_fraction": "busy", **{name: label for name, _, label in SIGNALS}}
BLOCK = 10  # steps per block against a baseline


@dataclass
class Series:
    """A run's job-level series over its steps after warm-up (``idx``: their step indices)."""

    idx: np.ndarray
    wall: np.ndarray  # the job's time per step (the step, its data wait and the gap after it)
    parts: dict[str, np.ndarray]  # busy and each idle part per step, seconds
    shares: dict[str, np.ndarray]  # busy_fraction, mfu, gpu_utilization, sm_activity per step (those there)
    hold: dict[str, int]  # steps per device sample (1 for busy_fraction)


def series(m: StepMatrix, live: np.ndarray, shift: np.ndarray | None, gaps: bool) -> Series:
    idx = np.flatnonzero(live)
    wall, parts = parts_per_step(m, shift, gaps)
    wall, parts = wall[idx], {k: v[idx] for k, v in parts.items()}
    shares: dict[str, np.ndarray] = {}
    hold: dict[str, int] = {}
    with np.errstate(all="ignore"):
        busy = np.where(wall > 0, parts["busy"] / wall, np.nan)
    if np.isfinite(busy).any():
        shares["busy_fraction"], hold["busy_fraction"] = busy, 1
    for name, col, _ in SIGNALS:
        g = m.extra(col)
        if g is None:
            continue
        v = rank_median(g)[idx]
        if np.isfinite(v).sum() >= 2:
            shares[name] = v
            hold[name] = int(
                np.median([_steps_per_sample(row) for row in g[even_sample(np.arange(m.n_ranks), 8)][:, idx]])
            )
    return Series(idx, wall, parts, shares, hold)


def _steps_per_sample(v: np.ndarray) -> int:
    """How many steps one device sample spans on one rank: the median run of equal consecutive values."""
    v = v[np.isfinite(v)]
    if len(v) < 2:
        return 1
    edges = np.flatnonzero(np.diff(v) != 0)
    runs = np.diff(np.concatenate(([-1], edges, [len(v) - 1])))
    return max(1, int(np.median(runs)))


def _idle_s(s: Series, name: str, sel: np.ndarray | slice) -> float:
    """The median idle time per step over ``sel`` as series ``name`` has it: (1 - share) x job time."""
    x, w = s.shares[name][sel], s.wall[sel]
    ok = np.isfinite(x) & np.isfinite(w)
    return float(np.median((1.0 - x[ok]) * w[ok])) if ok.any() else float("nan")


def _a_loss(s: Series, name: str, before: np.ndarray | slice, after: np.ndarray | slice, p: UtilizationParams) -> bool:
    """The idle time per step grew by at least half of ``min_drop`` of the job's time before."""
    grew = _idle_s(s, name, after) - _idle_s(s, name, before)
    return bool(np.isfinite(grew) and grew >= 0.5 * p.min_drop * float(np.nanmedian(s.wall[before])))


def _split(s: Series, sel: np.ndarray | slice) -> tuple[float, dict[str, float]]:
    """The busy share and each idle part's share of the job's time over ``sel``."""
    total = float(np.nansum(s.wall[sel]))
    if total <= 0:
        return float("nan"), {}
    shares = {k: float(np.nansum(v[sel])) / total for k, v in s.parts.items()}
    busy = shares.pop("busy")
    return busy, {k: round(v, 4) for k, v in shares.items()}


def _levels(s: Series, before: np.ndarray | slice, after: np.ndarray | slice) -> dict[str, list[float]]:
    """Each series before -> after: the busy share as time over time (as low_utilization has it), the
    device signals as medians."""
    out = {}
    for name, x in s.shares.items():
        if name == "busy_fraction":
            pair = [_split(s, before)[0], _split(s, after)[0]]
        else:
            pair = [float(nanmedian(x[before])), float(nanmedian(x[after]))]
        if all(np.isfinite(pair)):
            out[name] = [round(pair[0], 4), round(pair[1], 4)]
    return out


def detect_utilization_regression(
    m: StepMatrix,
    live: np.ndarray,
    shift: np.ndarray | None,
    others: list[Finding],
    params: UtilizationParams | None = None,
    gaps: bool = True,
    base: StepMatrix | None = None,
    base_live: np.ndarray | None = None,
    base_name: str = "the base run",
) -> list[Finding]:
    """Utilization drops within the run, and against ``base`` (its steps ``base_live``) when given.
    ``others``: the findings so far (those that account for a drop make it ``info``)."""
    p = params or UtilizationParams()
    rp = for_columns(m, np.flatnonzero(live), RegressionParams(z_min=p.z_min, min_effect=p.min_drop))
    if live.sum() < 2 * rp.min_segment or not np.isfinite(m.compute).any():
        return []
    s = series(m, live, shift, gaps)
    out = []
    found = _within(s, rp, p)
    if found is not None:
        out.append(_finding_within(m, s, *found, others, p))
    if base is not None and base.n_steps:
        b_live = base_live if base_live is not None else np.ones(base.n_steps, dtype=bool)
        if b_live.sum() >= 2 * BLOCK:
            f = _against_base(m, s, series(base, b_live, None, gaps), p, base_name)
            if f is not None:
                out.append(f)
    return out


def _within(s: Series, rp: RegressionParams, p: UtilizationParams) -> tuple[str, Change] | None:
    changes = {}
    for name, x in s.shares.items():
        c = find_change(x, rp, direction=-1)
        if c is not None and _a_loss(s, name, slice(0, c.start), slice(c.start, c.end + 1), p):
            changes[name] = c
    if not changes:
        return None
    if "busy_fraction" in changes:
        return "busy_fraction", changes["busy_fraction"]
    name = max(changes, key=lambda n: (1 - changes[n].after / changes[n].before) * (changes[n].end - changes[n].start))
    return name, changes[name]


# A lasting change of the step time accounts for a drop whose grown part is its own: a job-wide data
# stall for the data wait, slower collectives for their own time, a step-time regression no phase
# explains for time in the step outside any phase (None: the device idles in time telemetry counts as
# compute). A regression of a phase's compute raises the busy share: it never accounts for a drop.
OWN_PART = {"data_stall": ("data_wait",), "slow_comm": ("exposed_comm",), "regression": (None, "host_overhead")}


def _accounted(grew: str | None, first: int, tolerance: int, others: list[Finding]) -> str | None:
    """What other finding accounts for a drop from step ``first``, in words (None: nothing)."""
    if grew == "findings":
        return "the growth is the wait for the other findings' culprits (see those; their what-if counts it)"
    for f in others:
        if f.kind not in OWN_PART or f.ranks or f.first_step is None or grew not in OWN_PART[f.kind]:
            continue
        if f.kind == "regression" and f.phase is not None:
            continue
        if f.first_step <= first + tolerance and (f.last_step is None or f.last_step >= first):
            return f"{f.kind} from step {f.first_step} accounts for it (see that finding; its what-if counts this time)"
    return None


def _fell_text(levels: dict[str, list[float]], lead: str) -> str:
    order = [lead] + [n for n in levels if n != lead]
    parts = []
    for n in order:
        if n not in levels:
            continue
        a, b = levels[n]
        if n == lead or b <= a * 0.98:
            parts.append(f"{LABELS[n]} {a:.0%} -> {b:.0%}" + (" of the job's time" if n == "busy_fraction" else ""))
    return ", ".join(parts)


def _idle_text(before: dict[str, float], after: dict[str, float]) -> tuple[str | None, str]:
    """(the part that grew most, None when none grew by half a point; 'part a% (was b%); ...' for the
    parts that grew, largest growth first)."""
    grown = sorted(PARTS, key=lambda k: -(after.get(k, 0.0) - before.get(k, 0.0)))
    shown = [k for k in grown if after.get(k, 0.0) - before.get(k, 0.0) >= 0.005][:3]
    if not shown:
        return None, (
            "none of telemetry's idle parts: the device idles in time telemetry counts as the step's compute "
            "(host work in the step outside any phase: Python, kernel launches, synchronization)"
        )
    return shown[0], "; ".join(f"{PARTS[k]} {after.get(k, 0.0):.0%} (was {before.get(k, 0.0):.0%})" for k in shown)


def _cost(s: Series, name: str, before: np.ndarray | slice, after: np.ndarray | slice) -> float:
    """1 - ideal / actual over the steps after: the idle time per step back at its level before."""
    grew = _idle_s(s, name, after) - _idle_s(s, name, before)
    wall = float(np.nanmedian(s.wall[after]))
    return float(np.clip(grew / wall, 0.0, 1.0)) if wall > 0 and np.isfinite(grew) else 0.0


def _finding_within(
    m: StepMatrix, s: Series, name: str, c: Change, others: list[Finding], p: UtilizationParams
) -> Finding:
    before, after = slice(0, c.start), slice(c.start, c.end + 1)
    first, last = int(m.steps[s.idx[c.start]]), int(m.steps[s.idx[c.end]])
    levels = _levels(s, before, after)
    _, idle_b = _split(s, before)
    _, idle_a = _split(s, after)
    grew, idle_text = _idle_text(idle_b, idle_a)
    hold = s.hold[name]
    tolerance = max(10, 2 * hold)
    why = _accounted(grew, first, tolerance, others)
    cost = _cost(s, name, before, after)
    tail = "" if c.end == len(s.idx) - 1 else f" until step {last}"
    evidence = (
        f"from step {first}{tail} the job's utilization fell: {_fell_text(levels, name)} (rank test z = "
        f"{c.z:.1f}); the idle time became {idle_text}; with the idle time per step as before, those steps "
        f"would be {cost:.1%} faster"
    )
    if name != "busy_fraction":
        evidence += (
            f". The onset is {LABELS[name]}'s, sampled about every {hold} step{'s' if hold > 1 else ''}: known to "
            "within that; telemetry's own busy share did not fall"
            + (
                f" ({levels['busy_fraction'][0]:.0%} -> {levels['busy_fraction'][1]:.0%})"
                if "busy_fraction" in levels
                else ""
            )
        )
    if why:
        evidence += f"; {why}"
    details = {
        "series": name,
        "levels": levels,
        "idle_before": idle_b,
        "idle_after": idle_a,
        "grew": grew,
        "z": round(c.z, 2),
        "steps_per_sample": hold,
    }
    return Finding(
        kind="utilization_regression",
        ranks=[],
        phase=None,
        first_step=first,
        last_step=last,
        severity="info" if why else "warning",
        slowdown=round(cost, 6),
        evidence=evidence,
        details=details,
    )


def _blocks(x: np.ndarray) -> np.ndarray:
    x = x[np.isfinite(x)]
    n = len(x) // BLOCK
    return nanmedian(x[: n * BLOCK].reshape(n, BLOCK), axis=1) if n else x


def _against_base(m: StepMatrix, s: Series, b: Series, p: UtilizationParams, base_name: str) -> Finding | None:
    """This run (all its steps after warm-up) against the base run's."""
    fell: dict[str, tuple[float, float]] = {}
    for name in [n for n in s.shares if n in b.shares]:
        xb, xs = b.shares[name], s.shares[name]
        lb, ls = float(nanmedian(xb)), float(nanmedian(xs))
        if not (np.isfinite(lb) and np.isfinite(ls)) or lb <= 0 or ls > lb * (1 - p.min_drop):
            continue
        pval = mann_whitney_p(_blocks(xb), _blocks(xs))
        grew = _idle_s(s, name, slice(None)) - _idle_s(b, name, slice(None))
        if pval < p.alpha and np.isfinite(grew) and grew >= 0.5 * p.min_drop * float(np.nanmedian(b.wall)):
            fell[name] = (1 - ls / lb, pval)
    if not fell:
        return None
    name = "busy_fraction" if "busy_fraction" in fell else max(fell, key=lambda n: fell[n][0])
    levels: dict[str, list[float]] = {}
    for n in [n for n in s.shares if n in b.shares]:
        pair = (
            [_split(b, slice(None))[0], _split(s, slice(None))[0]]
            if n == "busy_fraction"
            else [float(nanmedian(b.shares[n])), float(nanmedian(s.shares[n]))]
        )
        if all(np.isfinite(pair)):
            levels[n] = [round(pair[0], 4), round(pair[1], 4)]
    _, idle_b = _split(b, slice(None))
    _, idle_a = _split(s, slice(None))
    grew, idle_text = _idle_text(idle_b, idle_a)
    grew_s = _idle_s(s, name, slice(None)) - _idle_s(b, name, slice(None))
    wall = float(np.nanmedian(s.wall))
    cost = float(np.clip(grew_s / wall, 0.0, 1.0)) if wall > 0 else 0.0
    first, last = int(m.steps[s.idx[0]]), int(m.steps[s.idx[-1]])
    pval = fell[name][1]
    why = "the growth is the wait for the other findings' culprits (see those)" if grew == "findings" else None
    evidence = (
        f"against {base_name}, this run's utilization is lower: {_fell_text(levels, name)} (Mann-Whitney on "
        f"blocks of {BLOCK} steps, p = {pval:.1e}); the idle time became {idle_text}; with the base run's idle "
        f"time per step, this run's steps would be {cost:.1%} faster" + (f"; {why}" if why else "")
    )
    return Finding(
        kind="utilization_regression",
        ranks=[],
        phase=None,
        first_step=first,
        last_step=last,
        severity="info" if why else "warning",
        slowdown=round(cost, 6),
        evidence=evidence,
        details={
            "series": name,
            "base": base_name,
            "levels": levels,
            "idle_before": idle_b,
            "idle_after": idle_a,
            "grew": grew,
            "p": pval,
        },
    )


__all__ = ["UtilizationParams", "detect_utilization_regression", "series"]


def detect(m: StepMatrix | None, ctx: Context) -> Found:
    """A utilization drop within the run or against the base run; the findings so far may explain it."""
    if m is None or ctx.live is None:
        return Found()
    return Found(
        detect_utilization_regression(
            m,
            ctx.live,
            ctx.shift,
            ctx.findings,
            ctx.params.utilization,
            gaps=ctx.gaps,
            base=ctx.base,
            base_live=ctx.base_live,
            base_name=ctx.base_name,
        )
    )

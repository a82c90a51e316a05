"""Utilization gaps: the job's accelerators (or CPUs) busy for less than a bound of its time, sustained
(``low_utilization``, :func:`detect`).

Busy is the median rank's compute over the job's time per step (the step with its data wait, plus the
gap before the next; :func:`parts_per_step`), over a running window at most half as long as the
shortest stretch, so one long step cannot make a stretch alone. The idle rest is split into
:data:`PARTS` and the largest is named; device signals are reported beside, never decided on
(:func:`how_they_differ`). The rules (the bounds, the parts, severity): docs/finding-kinds.md,
"low_utilization".
"""

from __future__ import annotations

from dataclasses import replace
from typing import cast

import numpy as np

from ...steptable.matrix import StepMatrix, columns_for, gaps_after, nan_to_zero, rank_median
from ..findings import Finding
from .context import Context, Found
from .params import UtilizationParams
from .stretch import hot_mask
from .whatif import step_savings

PARTS = {
    "data_wait": "waiting for input",
    "exposed_comm": "exposed communication (the collectives' own time)",
    "waiting_for_ranks": "waiting in collectives for slower ranks",
    "findings": "waiting for the other findings' culprits",
    "checkpoint": "checkpoint or evaluation steps",
    "between_steps": "between steps (host work outside telemetry.step)",
    "host_overhead": "other time in the step (host overhead, pipeline bubbles: not in a phase)",
}


def running_sum(x: np.ndarray, w: int) -> np.ndarray:
    """Centered running sum over ``w`` steps (fewer at the ends)."""
    c = np.concatenate(([0.0], np.cumsum(x)))
    n, half = len(x), w // 2
    lo = np.clip(np.arange(n) - half, 0, n)
    hi = np.clip(np.arange(n) - half + w, 0, n)
    return c[hi] - c[lo]


def parts_per_step(m: StepMatrix, shift: np.ndarray | None, gaps: bool) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(S,) the job's time per step and (S,) each part of it: ``busy`` and the idle parts above.
    Cached for the same ``shift`` (low_utilization, utilization_regression and the summary ask alike)."""
    cached = m.cache.get(("parts", gaps))
    if cached is not None and cached[0] is shift:
        return cached[1]
    out = _parts_per_step(m, shift, gaps)
    m.cache[("parts", gaps)] = (shift, out)
    return out


def _parts_per_step(m: StepMatrix, shift: np.ndarray | None, gaps: bool) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    t = nan_to_zero(m.step_time())
    med = float(np.median(t[t > 0])) if (t > 0).any() else 0.0
    spike = t > 3 * med
    busy = nan_to_zero(rank_median(m.compute))
    data = nan_to_zero(rank_median(m.data))
    zero = np.zeros(m.n_steps)
    own = wait = found = zero
    if m.comm is not None:
        own = cast(np.ndarray, m.comm_own())  # not None: the matrix has comm
        own = np.where(np.isfinite(own), own, 0.0)
        comm = nan_to_zero(rank_median(m.comm))
        found = np.clip(step_savings(m, shift), 0.0, None) if shift is not None else zero
        wait = np.clip(comm - own, 0.0, None)
        found = np.minimum(found, wait)
        wait = wait - found
    between = zero
    if gaps:
        g, long = gaps_after(m)
        # lost time (a restart, an outage) is not the running job's; a column of several steps (a
        # window read from Prometheus) shares its gap among them
        between = np.where(long, 0.0, g) / m.steps_per_column()
    busy = np.minimum(busy, t)
    parts = {"data_wait": data, "exposed_comm": own, "waiting_for_ranks": wait, "findings": found}
    # medians over ranks of parts that overlap (a pipeline's transfers run beside compute) can add
    # up to more than the idle time: they share it in proportion, never exceeding it
    idle, known = t - busy, sum(parts.values())
    with np.errstate(all="ignore"):
        fit = np.where(known > idle, idle / np.where(known > 0, known, 1.0), 1.0)
    parts = {"busy": busy, **{k: v * fit for k, v in parts.items()}}
    parts["host_overhead"] = np.clip(idle - known * fit, 0.0, None)
    # a step over 3x the median hits every rank at once (checkpoint, evaluation): its excess is
    # that, whatever phase it ran in; the rest of the step keeps its parts' proportions
    ckpt = np.where(spike, np.clip(t - med, 0.0, None), 0.0)
    inside = sum(parts.values())
    with np.errstate(all="ignore"):
        keep = np.where(spike & (inside > 0), (t - ckpt) / inside, 1.0)
    parts = {k: v * keep for k, v in parts.items()}
    parts["checkpoint"] = ckpt
    parts["between_steps"] = between
    return t + between, parts


def detect_low_utilization(
    m: StepMatrix,
    live: np.ndarray,
    shift: np.ndarray | None,
    params: UtilizationParams | None = None,
    gaps: bool = True,
) -> list[Finding]:
    p = params or UtilizationParams()
    idx = np.flatnonzero(live)
    least = columns_for(m, idx, p.min_steps)
    if len(idx) < least or not np.isfinite(m.compute).any():
        return []
    wall, parts = parts_per_step(m, shift, gaps)
    need = max(least, int(np.ceil(p.min_fraction * len(idx))))
    w = max(5, min(p.window, need // 2)) if m.weight is None else min(least, need)
    with np.errstate(all="ignore"):
        busy, time = running_sum(parts["busy"][idx], w), running_sum(wall[idx], w)
        low = hot_mask(busy < (p.bound - p.margin) * time, need)
        warn = hot_mask(busy < (p.warn_bound - p.margin) * time, need) if p.warn_bound < p.bound else low
    # under the warning bound: warning stretches; the rest of a stretch under the bound, long enough
    # on its own: info stretches
    runs = [(a, b) for a, b in _edges(warn)] + [(a, b) for a, b in _edges(hot_mask(low & ~warn, need))]
    return [_finding(m, idx[a:b], wall, parts, p) for a, b in sorted(runs)]


def _edges(mask: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of each run of True, end exclusive."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.astype(np.int8), [0]))))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])]


def severity_of(busy: float, largest: str, p: UtilizationParams) -> str:
    """The severity rule of a busy share (docs/detectors.md, low_utilization)."""
    if largest == "findings" or busy >= p.warn_bound:
        return "info"
    return "critical" if busy < p.warn_bound / 2 else "warning"


SIGNALS = (
    ("gpu_utilization", "dev.gpu_utilization_ratio", "GPU utilization"),
    ("sm_activity", "dev.gpu_sm_activity_ratio", "SM activity"),
    ("mfu", "mfu", "MFU"),
)


def device_levels(m: StepMatrix, steps: np.ndarray) -> dict[str, float]:
    """The median over ranks and ``steps`` of each device signal the table has (see :data:`SIGNALS`)."""
    out = {}
    for name, col, _ in SIGNALS:
        g = m.extra(col)
        if g is not None and np.isfinite(g[:, steps]).any():
            out[name] = float(np.nanmedian(g[:, steps]))
    return out


def how_they_differ(busy: float, levels: dict[str, float]) -> str:
    """A sentence on why the device's own counters and telemetry's compute share disagree, when they
    do by 10 points or more ('' otherwise)."""
    label = {"gpu_utilization": "GPU utilization", "sm_activity": "SM activity"}
    high = [n for n in label if levels.get(n, busy) >= busy + 0.10]
    out = []
    if high:
        out.append(
            f"{' and '.join(label[n] for n in high)} read{'s' if len(high) == 1 else ''} higher than the compute "
            "share because the two measure different things: NVML's utilization counts any kernel running, a "
            "collective's kernel spinning while it waits for peers included; the compute share is telemetry's, "
            "the time in phases not blocked in collectives"
        )
    if levels.get("gpu_utilization", busy) <= busy - 0.10:
        out.append(
            "GPU utilization reads lower than the compute share: time in a step outside any phase (host work, "
            "launches) counts as compute for telemetry, while the device idles in it"
        )
    if levels.get("sm_activity", busy) <= busy - 0.10:
        out.append(
            "SM activity reads lower: it is the share of the GPU's multiprocessors busy, and kernels seldom "
            "fill them all"
        )
    return "; ".join(out)


def _finding(
    m: StepMatrix, steps: np.ndarray, wall: np.ndarray, parts: dict[str, np.ndarray], p: UtilizationParams
) -> Finding:
    total = float(wall[steps].sum())
    shares = {k: float(v[steps].sum()) / total for k, v in parts.items()}
    busy = shares.pop("busy")
    tokens_per_s = None
    if m.tokens is not None and total > 0 and np.nansum(m.tokens[steps]) > 0:
        tokens_per_s = round(float(np.nansum(m.tokens[steps]) / total), 3)
    return _told(m, steps, busy, shares, p, tokens_per_s)


def to_slower_ranks(idle: dict[str, float], moved: float) -> tuple[dict[str, float], float]:
    """An idle split with at most ``moved`` (a share of the time) taken from "waiting for the other
    findings' culprits" and given to "waiting in collectives for slower ranks", and how much was: what a
    long run's findings, measured again on raw rows, no longer charge to their culprits."""
    take = min(max(moved, 0.0), idle.get("findings", 0.0))
    out = dict(idle)
    out["findings"] = idle.get("findings", 0.0) - take
    out["waiting_for_ranks"] = idle.get("waiting_for_ranks", 0.0) + take
    return out, take


def retold(f: Finding, m: StepMatrix, moved: float, params: UtilizationParams | None = None) -> Finding:
    """A low_utilization finding whose idle part "waiting for the other findings' culprits" held ``moved``
    (a share of the time) too much, told again with that moved to "waiting in collectives for slower
    ranks": a long run's straggler measured again on raw rows costs less than its blocks said, and the
    rest of the wait it was charged with is the ranks' step-to-step spread (analysis/coarse.py)."""
    shares, take = to_slower_ranks(f.details["idle"], moved)
    if take <= 0:
        return f
    steps = np.flatnonzero((m.steps >= f.first_step) & (m.steps <= f.last_step))
    told = _told(
        m, steps, f.details["busy_fraction"], shares, params or UtilizationParams(), f.details.get("tokens_per_s")
    )
    # its steps as they were (a block's edge moved to the step, the run's end) and, once settled as ended
    # (run_share), its severity
    severity = f.severity if "run_share" in f.details else told.severity
    return replace(
        told, first_step=f.first_step, last_step=f.last_step, severity=severity, details={**f.details, **told.details}
    )


def _told(
    m: StepMatrix,
    steps: np.ndarray,
    busy: float,
    shares: dict[str, float],
    p: UtilizationParams,
    tokens_per_s: float | None,
) -> Finding:
    """The low_utilization finding of ``steps`` (column indices) from its busy share and idle parts."""
    idle = {k: round(v, 4) for k, v in sorted(shares.items(), key=lambda kv: -kv[1]) if v > 0}
    largest = next(iter(idle), "host_overhead")
    severity = severity_of(busy, largest, p)
    first, last = int(m.steps[steps[0]]), int(m.steps[steps[-1]])
    details: dict = {
        "busy_fraction": round(busy, 4),
        "bound": p.bound,
        "warn_bound": p.warn_bound,
        "idle": idle,
        "largest": largest,
        "measured_by": "compute over the job's time (median over ranks)",
    }
    levels = device_levels(m, steps)
    seen = []
    for name, _, label in SIGNALS:
        if name in levels:
            details[name] = round(levels[name], 4)
            seen.append(f"{label} {levels[name]:.0%}")
    if tokens_per_s is not None:
        details["tokens_per_s"] = tokens_per_s
    top = list(idle.items())[:3]
    split = "; ".join(f"{PARTS[k]} {v:.0%}" for k, v in top)
    also = f" ({', '.join(seen)})" if seen else ""
    if busy >= p.warn_bound:
        band = (
            f"under the {p.bound:.0%} bound and above the {p.warn_bound:.0%} warning bound: common in "
            "data-parallel training, nothing is broken; the split says where the rest goes"
        )
    elif busy < p.warn_bound / 2:
        band = f"under {p.warn_bound / 2:.0%}, half the {p.warn_bound:.0%} warning bound: the job mostly waits"
    else:
        band = f"under the {p.warn_bound:.0%} warning bound"
    differ = how_they_differ(busy, levels)
    evidence = (
        f"over steps {first}-{last} the ranks compute {busy:.0%} of the job's time{also}, {band}; the idle "
        f"{1 - busy:.0%} is {split}; the largest part, {PARTS[largest]}, is {idle.get(largest, 0.0):.0%} of the "
        "time" + (" (the other findings' culprits: see those)" if largest == "findings" else "")
    )
    if differ:
        evidence += f". {differ[0].upper()}{differ[1:]}"
    return Finding(
        kind="low_utilization",
        ranks=[],
        phase=None,
        first_step=first,
        last_step=last,
        severity=severity,
        slowdown=round(float(idle.get(largest, 0.0)), 6),
        evidence=evidence,
        details=details,
    )


def detect(m: StepMatrix | None, ctx: Context) -> Found:
    """A sustained low busy share, with what the findings before it explain (the detectors' table)."""
    if m is None or ctx.live is None:
        return Found()
    return Found(detect_low_utilization(m, ctx.live, ctx.shift, ctx.params.utilization, gaps=ctx.gaps))

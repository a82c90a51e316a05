"""Lasting changes during a run: regressions, slower communication, data stalls that begin
(:func:`detect_regressions`).

The job-level step time (stragglers healed) is cut by binary segmentation with a rank statistic
(:func:`change_points`, :func:`find_change`: spikes and checkpoint steps do not move it); a change too
small for the noisy step time may be found in one component's quieter series and confirmed by the
step time (:func:`_confirmed_by_step_time`). The cause is the component whose level moved most, when it
holds half the change, or a third and half again as much as any other: a phase's compute ->
``regression``, the collectives' own time -> ``slow_comm``, the data wait -> ``data_stall``. What-if: the
old level. The rules: docs/finding-kinds.md, "regression" and "slow_comm".
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ...steptable.matrix import COMM, DATA, StepMatrix, columns_for, job_components, nanmedian
from ..findings import Finding, severity_for
from .context import Context, Found
from .params import RegressionParams
from .ranktest import split_z
from .whatif import step_savings


def for_columns(m: StepMatrix, idx: np.ndarray, p: RegressionParams) -> RegressionParams:
    """``p`` for the columns ``idx`` of ``m``: unchanged where a column is one step; where it is a window
    of several, segments and persistence in windows (:func:`~.matrix.columns_for`) and ``z_windows``."""
    if m.weight is None:
        return p
    return replace(
        p,
        min_segment=columns_for(m, idx, p.min_segment),
        min_persist_steps=columns_for(m, idx, p.min_persist_steps),
        z_min=min(p.z_min, p.z_windows),
    )


@dataclass
class Change:
    start: int  # index into the series: first step of the new level
    end: int  # last step of the new level (inclusive)
    before: float
    after: float
    z: float


def _rank_split(x: np.ndarray, lo: int, hi: int, direction: int, min_seg: int) -> tuple[int, float]:
    """Best split k in x[lo:hi] (x[lo:k] vs x[k:hi]) for a shift in ``direction`` (+1 up, -1 down)."""
    seg = x[lo:hi]
    n = len(seg)
    if n < 2 * min_seg:
        return -1, 0.0
    k = np.arange(min_seg, n - min_seg + 1)
    z = direction * split_z(seg, k)  # > 0 when later values are larger (up)
    best = int(np.argmax(z))
    return lo + int(k[best]), float(z[best])


def change_points(v: np.ndarray, p: RegressionParams, lo: int = 0, hi: int | None = None, depth: int = 0) -> list[int]:
    """Binary segmentation with the rank statistic: split points where the level shifts."""
    hi = len(v) if hi is None else hi
    if depth > 4 or hi - lo < 2 * p.min_segment:
        return []
    up_k, up_z = _rank_split(v, lo, hi, +1, p.min_segment)
    dn_k, dn_z = _rank_split(v, lo, hi, -1, p.min_segment)
    k, z = (up_k, up_z) if up_z >= dn_z else (dn_k, dn_z)
    if k < 0 or z < p.z_min:
        return []
    return change_points(v, p, lo, k, depth + 1) + [k] + change_points(v, p, k, hi, depth + 1)


def find_change(x: np.ndarray, p: RegressionParams, direction: int = +1) -> Change | None:
    """The largest lasting rise of x above its first level (NaNs dropped), or None; with
    ``direction=-1`` the largest lasting fall under it (a utilization drop: utilization.py).

    Segments between change points whose level is at least ``min_effect`` above the first
    segment's (below it, falling) are the change; adjacent such segments merge, and hold it when
    ``persist_fraction`` of their values lie beyond the midpoint between the base and the lowest
    (falling: highest) of their levels (a staircase of two rises is held by both); the one costing
    most (level moved x steps) wins.
    """
    ok = np.isfinite(x)
    if ok.sum() < 2 * p.min_segment:
        return None
    idx = np.flatnonzero(ok)
    v = x[ok]
    cuts = [0] + change_points(v, p) + [len(v)]
    base = float(np.median(v[cuts[0] : cuts[1]]))
    if base <= 0:
        return None
    bar = base * (1 + direction * p.min_effect)
    levels = [(a, b, float(np.median(v[a:b]))) for a, b in zip(cuts, cuts[1:])]
    moved = [(a, b, lv) for a, b, lv in levels if direction * (lv - bar) >= 0]
    merged: list[list] = []  # [first, end, the level nearest the base of its segments]
    for a, b, lv in moved:
        if merged and merged[-1][1] == a:
            merged[-1][1] = b
            merged[-1][2] = min(merged[-1][2], lv) if direction > 0 else max(merged[-1][2], lv)
        else:
            merged.append([a, b, lv])
    best = None
    for a, b, least in merged:
        post = v[a:b]
        after = float(np.median(post))
        # held: above halfway to its lowest step (a staircase of rises is held by its lower steps too)
        mid = (base + least) / 2.0
        if len(post) < p.min_persist_steps or np.mean(direction * (post - mid) > 0) < p.persist_fraction:
            continue
        cost = direction * (after - base) * len(post)
        if best is None or cost > best[0]:
            z = _rank_split(v, 0, b, direction, min(p.min_segment, a))[1] if a >= p.min_segment else p.z_min
            best = (cost, Change(int(idx[a]), int(idx[b - 1]), base, after, z))
    return best[1] if best else None


def _confirmed_by_step_time(t: np.ndarray, c: Change, p: RegressionParams) -> Change | None:
    """The step time's view of a change found in one component: the same steps, tested once. The
    component must also explain at least half of the step time's change (``c.after - c.before`` is
    the component's own): a job that slows everywhere at once is the step-time search's business."""
    before, after = t[: c.start], t[c.start : c.end + 1]
    before, after = before[np.isfinite(before)], after[np.isfinite(after)]
    if len(before) < p.min_segment or len(after) < p.min_persist_steps:
        return None
    b, a = float(np.median(before)), float(np.median(after))
    if b <= 0 or a < b * (1 + p.min_effect) or np.mean(after > (a + b) / 2.0) < p.persist_fraction:
        return None
    if c.after - c.before < 0.5 * (a - b):
        return None
    z = float(split_z(np.concatenate([before, after]), np.array([len(before)]))[0])
    return Change(c.start, c.end, b, a, z) if z >= p.z_confirm else None


def _level_change(x: np.ndarray, ch: Change) -> float:
    before = nanmedian(x[: ch.start])
    after = nanmedian(x[ch.start : ch.end + 1])
    return float(after - before) if np.isfinite(before) and np.isfinite(after) else 0.0


def _dimension_changes(m: StepMatrix, live_idx: np.ndarray, ch: Change) -> dict[str, float]:
    """Per parallel dimension (``comm_group.<label>_s``): the change at ``ch`` of the time the last
    rank to arrive is blocked in that dimension's collectives (the least blocked rank, per step: the
    collectives' own time)."""
    out = {}
    for col in m.columns:
        if col.startswith("comm_group.") and col.endswith("_s"):
            grid = m.extra(col)
            if grid is not None:
                own = np.nanmin(np.where(np.isfinite(grid), grid, np.inf), axis=0)[live_idx]
                out[col[len("comm_group.") : -2]] = _level_change(np.where(np.isfinite(own), own, np.nan), ch)
    return out


def detect_regressions(
    m: StepMatrix, live: np.ndarray, shift: np.ndarray, p: RegressionParams | None = None
) -> list[Finding]:
    live_idx = np.flatnonzero(live)
    p = for_columns(m, live_idx, p or RegressionParams())
    if len(live_idx) < 2 * p.min_segment:
        return []
    t = (m.step_time() - step_savings(m, shift))[live_idx]  # stragglers' cost healed
    components = {name: v[live_idx] for name, v in job_components(m).items()}
    if COMM in components:  # no rank blocked at all: unknown, not infinitely long
        components[COMM] = np.where(np.isfinite(components[COMM]), components[COMM], np.nan)
    # candidates: the step time's own largest change, and each component's change as the step time
    # confirms it; the one costing most time wins (a drift late in a noisy run must not hide the
    # change one component shows clearly from its start)
    candidates = [find_change(t, p)]
    for v in components.values():
        c = find_change(v, p)
        candidates.append(_confirmed_by_step_time(t, c, p) if c is not None else None)
    ch = max(
        (c for c in candidates if c is not None),
        key=lambda c: (c.after - c.before) * (c.end - c.start + 1),
        default=None,
    )
    if ch is None:
        return []
    deltas = {k: _level_change(v, ch) for k, v in components.items()}
    dt = ch.after - ch.before
    ranked = sorted(deltas, key=deltas.__getitem__, reverse=True)
    cause = ranked[0] if ranked else None
    if cause is not None:
        second = deltas[ranked[1]] if len(ranked) > 1 else 0.0
        if not (deltas[cause] >= 0.5 * dt or (deltas[cause] >= 0.3 * dt and deltas[cause] >= 1.5 * max(second, 0.0))):
            cause = None  # nothing measured explains most of it, or clearly more than the rest
    steps = m.steps[live_idx]
    first, last = int(steps[ch.start]), int(steps[ch.end])
    cost = dt / ch.after
    common: dict[str, Any] = dict(first_step=first, last_step=last, severity=severity_for(cost), slowdown=cost)
    details = {
        "before_s": ch.before,
        "after_s": ch.after,
        "z": round(ch.z, 2),
        "component_change_s": {("comm" if k == COMM else "data" if k == DATA else k): v for k, v in deltas.items()},
    }
    tail = "" if ch.end == len(t) - 1 else f" until step {last}"
    ba = before_after(m, live_idx[: ch.start], live_idx[ch.start : ch.end + 1])
    if ba:
        details["before_after"] = ba
    also = _before_after_text(ba)
    if cause == COMM:
        by_dim = _dimension_changes(m, live_idx, ch)
        where_dim = ""
        if by_dim:
            details["group_change_s"] = by_dim
            top = max(by_dim, key=by_dim.__getitem__)
            if by_dim[top] >= 0.5 * deltas[cause] and top != "world":
                details["group"] = top
                where_dim = f", {by_dim[top] * 1e3:.1f} ms of it in the {top} collectives"
        return [
            Finding(
                kind="slow_comm",
                ranks=[],
                phase=None,
                **common,
                details=details,
                evidence=(
                    f"from step {first}{tail} the collectives themselves take {deltas[cause] * 1e3:.1f} ms "
                    f"longer per step{where_dim} (time blocked by the last rank to arrive, which does not "
                    f"wait), job-wide; step time {ch.before * 1e3:.1f} -> {ch.after * 1e3:.1f} ms; at the old "
                    f"speed those steps would be {cost:.1%} faster{also}"
                ),
            )
        ]
    if cause == DATA:
        return [
            Finding(
                kind="data_stall",
                ranks=[],
                phase="data",
                **common,
                details=details,
                evidence=(
                    f"from step {first}{tail} every rank waits {deltas[cause] * 1e3:.1f} ms longer for "
                    f"data; step time {ch.before * 1e3:.1f} -> {ch.after * 1e3:.1f} ms; with input "
                    f"ready as before those steps would be {cost:.1%} faster{also}"
                ),
            )
        ]
    where = f" in phase {cause}" if cause else ""
    more = f" ({deltas[cause] * 1e3:.1f} ms of it{where})" if cause else ""
    return [
        Finding(
            kind="regression",
            ranks=[],
            phase=cause,
            **common,
            details=details,
            evidence=(
                f"from step {first}{tail} the step takes {dt * 1e3:.1f} ms longer{more}, on every rank: "
                f"{ch.before * 1e3:.1f} -> {ch.after * 1e3:.1f} ms (rank test z = {ch.z:.1f}); at the "
                f"old level those steps would be {cost:.1%} faster{also}"
            ),
        )
    ]


def before_after(m: StepMatrix, before: np.ndarray, after: np.ndarray) -> dict[str, list[float]]:
    """What a user reads a change in, before and after it (step indices): tokens/s of the job, MFU and
    GPU utilization (medians over ranks and steps, when the table has them), and the busy share of
    the step (compute over step time, median over ranks: on a CPU run too)."""
    if len(before) < 3 or len(after) < 3:
        return {}
    out: dict[str, list[float]] = {}
    t = m.step_time()
    with np.errstate(all="ignore"):
        if m.tokens is not None:
            tps = [float(np.nansum(m.tokens[i]) / np.nansum(t[i])) for i in (before, after)]
            if all(np.isfinite(tps)) and tps[0] > 0:
                out["tokens_per_s"] = tps
        for name, col in (("mfu", "mfu"), ("gpu_utilization", "dev.gpu_utilization_ratio")):
            g = m.extra(col)
            if g is not None:
                v = [float(np.nanmedian(g[:, i])) for i in (before, after)]
                if all(np.isfinite(v)):
                    out[name] = v
        busy = m.compute / (m.duration + m.data)
        v = [float(np.nanmedian(busy[:, i])) for i in (before, after)]
        if all(np.isfinite(v)):
            out["busy_fraction"] = v
    return {k: [round(a, 6), round(b, 6)] for k, (a, b) in out.items()}


def _before_after_text(ba: dict[str, list[float]]) -> str:
    parts = []
    if "tokens_per_s" in ba:
        parts.append("tokens/s {:,.0f} -> {:,.0f}".format(*ba["tokens_per_s"]))
    if "mfu" in ba:
        parts.append("MFU {:.1%} -> {:.1%}".format(*ba["mfu"]))
    if "gpu_utilization" in ba:
        parts.append("GPU utilization {:.0%} -> {:.0%}".format(*ba["gpu_utilization"]))
    if "busy_fraction" in ba:
        parts.append("busy {:.0%} -> {:.0%} of the step".format(*ba["busy_fraction"]))
    return f" ({', '.join(parts)})" if parts else ""


def detect(m: StepMatrix | None, ctx: Context) -> Found:
    """Lasting changes of the job's step, phase or collectives (the detectors' table)."""
    if m is None or ctx.live is None or ctx.shift is None:
        return Found()
    return Found(detect_regressions(m, ctx.live, ctx.shift, ctx.params.regression))

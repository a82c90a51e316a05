"""Imbalance that no single rank explains.

- ``stage_imbalance``: with a pipeline layout, one stage's ranks all compute longer than the
  typical stage (a partitioning problem, not N stragglers). The stage's median compute per step is
  compared with the median over stages; what-if: that stage at the typical stage's time.
- ``imbalance``: work that moves between ranks from step to step (sequence lengths, dynamic
  shapes): within a peer group, the slowest rank each step costs time, the slowest rank changes
  (no rank holds it in more than half the steps), and a rank's phases are slow *together* within a
  step (correlation of forward and backward excess at least ``min_phase_correlation``), which tells
  work assignment from independent kernel jitter. What-if: every rank at its group's median, each step.
"""

from __future__ import annotations

import numpy as np

from ...steptable.matrix import StepMatrix, even_sample, every_kth_step, nanmedian, rank_median
from ..findings import Finding, severity_for
from .context import Context, Found
from .params import ImbalanceParams
from .whatif import slowdown


def _phase_breakdown(m: StepMatrix, idx: np.ndarray, live: np.ndarray, ref_idx: np.ndarray) -> dict[str, float]:
    out = {}
    for name, arr in m.phase_compute.items():
        if name == "data":
            continue
        mine = nanmedian(nanmedian(arr[idx][:, live], axis=0))
        ref = nanmedian(nanmedian(arr[ref_idx][:, live], axis=0))
        if np.isfinite(mine) and np.isfinite(ref):
            out[name] = float(mine - ref)
    return out


def detect_stage_imbalance(
    m: StepMatrix, live: np.ndarray, shift: np.ndarray, p: ImbalanceParams | None = None
) -> tuple[list[Finding], np.ndarray]:
    p = p or ImbalanceParams()
    out_shift = np.zeros_like(shift)
    if not m.has_layout:
        return [], out_shift
    stages = np.unique(m.groups)
    c = m.compute - shift  # stragglers already explained
    per_stage = np.stack([rank_median(c, np.flatnonzero(m.groups == g)) for g in stages])  # (G, S)
    typical = nanmedian(per_stage, axis=0)  # (S,)
    findings = []
    for gi, g in enumerate(stages):
        excess = per_stage[gi, live] - typical[live]
        base = float(nanmedian(typical[live]))
        med = float(nanmedian(excess))
        if not (np.isfinite(med) and base > 0) or med < p.min_rel_excess * base:
            continue
        if np.mean(excess > 0) < 0.8:  # it must be the long stage nearly every step
            continue
        idx = np.flatnonzero(m.groups == g)
        one = np.zeros_like(shift)
        one[np.ix_(idx, np.flatnonzero(live))] = np.clip(excess, 0, None)[None, :]
        cost = slowdown(m, shift + one, live) - slowdown(m, shift, live)
        if cost < p.min_slowdown:
            continue
        out_shift += one
        phases = _phase_breakdown(m, idx, live, np.flatnonzero(m.groups != g))
        phase = max(phases, key=phases.__getitem__) if phases else None
        ranks = [int(r) for r in m.ranks[idx]]
        s0, s1 = int(m.steps[live][0]), int(m.steps[live][-1])
        findings.append(
            Finding(
                kind="stage_imbalance",
                ranks=ranks,
                phase=phase,
                first_step=s0,
                last_step=s1,
                severity=severity_for(cost),
                slowdown=cost,
                evidence=(
                    f"pipeline stage {int(g)} (ranks {', '.join(map(str, ranks))}) computes {med * 1e3:.1f} ms "
                    f"more per step than the typical stage ({base * 1e3:.1f} ms, {1 + med / base:.2f}x)"
                    + (f", most of it in {phase}" if phase else "")
                    + f"; rebalancing it would make steps "
                    f"{cost:.1%} faster (replay of a synchronous step; with pipelining this is an upper bound)"
                ),
                details={"stage": int(g), "excess_s": med, "typical_stage_s": base, "phase_excess_s": phases},
            )
        )
    return findings, out_shift


def detect_moving_imbalance(
    m: StepMatrix, live: np.ndarray, shift: np.ndarray, p: ImbalanceParams | None = None
) -> tuple[list[Finding], np.ndarray | None]:
    """The cheap tests first (who is slowest each step, phase correlation), the replay last."""
    p = p or ImbalanceParams()
    c = m.compute - shift
    groups = [np.flatnonzero(m.groups == g) for g in np.unique(m.groups)]
    groups = [idx for idx in groups if len(idx) >= 2]
    if not groups:
        return [], None
    tops = []
    for gi, idx in enumerate(groups):
        sub = c[idx][:, live]
        if np.isnan(sub).any():
            sub = np.where(np.isnan(sub), -np.inf, sub)
        tops.append(np.argmax(sub, axis=0) + 1_000_000 * gi)
    top = np.concatenate(tops)
    share = np.unique(top, return_counts=True)[1].max() / max(len(tops[0]), 1)
    if share > p.max_top_share:
        return [], None  # one rank holds it: a straggler's business, not moving imbalance
    corr = _phase_correlation(m, live)
    if corr is not None and corr < p.min_phase_correlation:
        return [], None  # independent jitter per kernel, not work assignment
    heal = np.zeros_like(shift)
    for idx in groups:
        heal[idx] = np.clip(c[idx] - rank_median(c, idx)[None, :], 0, None)
    heal[:, ~live] = 0
    cost = slowdown(m, shift + heal, live) - slowdown(m, shift, live)
    if cost < p.min_slowdown:
        return [], None
    median_c = float(nanmedian(nanmedian(c[:, live], axis=0)))
    spread = float(nanmedian(np.nanmax(c[:, live], axis=0) / nanmedian(c[:, live], axis=0)))
    s0, s1 = int(m.steps[live][0]), int(m.steps[live][-1])
    corr_text = f"; a rank's phases are slow together (correlation {corr:.2f})" if corr is not None else ""
    return [
        Finding(
            kind="imbalance",
            ranks=[],
            phase=None,
            first_step=s0,
            last_step=s1,
            severity=severity_for(cost),
            slowdown=cost,
            evidence=(
                f"work is unevenly spread and moves between ranks: each step the slowest rank computes "
                f"{spread:.2f}x the median ({median_c * 1e3:.1f} ms), and no rank is the slowest in more than "
                f"{share:.0%} of the steps{corr_text}; balancing each step would make steps {cost:.1%} faster"
            ),
            details={"slowest_over_median": spread, "top_rank_share": float(share), "phase_correlation": corr},
        )
    ], heal


def _phase_correlation(m: StepMatrix, live: np.ndarray) -> float | None:
    """Correlation of forward and backward excess (over group medians, rank offsets removed)."""
    f, b = m.phase_compute.get("forward"), m.phase_compute.get("backward")
    if f is None or b is None:
        return None
    live = every_kth_step(np.flatnonzero(live))
    ef, eb = [], []
    for g in np.unique(m.groups):
        idx = np.flatnonzero(m.groups == g)
        if len(idx) < 2:
            continue
        idx = even_sample(idx)  # a correlation needs no more than 64 ranks either
        for arr, acc in ((f, ef), (b, eb)):
            sub = arr[idx][:, live]
            e = sub - nanmedian(sub, axis=0)[None, :]
            e = e - nanmedian(e, axis=1)[:, None]
            acc.append(e.ravel())
    if not ef:
        return None
    x, y = np.concatenate(ef), np.concatenate(eb)
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 10 or np.std(x[ok]) == 0 or np.std(y[ok]) == 0:
        return None
    return float(np.corrcoef(x[ok], y[ok])[0, 1])


def detect_stage(m: StepMatrix | None, ctx: Context) -> Found:
    """Pipeline stages that hold the others back (the detectors' table)."""
    if m is None or ctx.live is None or ctx.shift is None:
        return Found()
    found, more = detect_stage_imbalance(m, ctx.live, ctx.shift, ctx.params.imbalance)
    return Found(found, more)


def detect_moving(m: StepMatrix | None, ctx: Context) -> Found:
    """Work that moves between ranks from step to step; only on rows of single steps (a block's median
    averages it away, and what is left between blocks is noise)."""
    if m is None or ctx.live is None or ctx.shift is None or not ctx.step_resolution:
        return Found()
    found, more = detect_moving_imbalance(m, ctx.live, ctx.shift, ctx.params.imbalance)
    return Found(found, more) if found else Found()

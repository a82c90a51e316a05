"""Checkpoints: a rank whose storage is slow against its peers' (:func:`detect_slow_checkpoints`),
checkpoints that block training beyond a budget (:func:`detect_checkpoint_budget`), and how often to
checkpoint (:func:`checkpoint_advice`: Young's and Daly's intervals, :func:`young`, :func:`daly`,
:func:`waste`), from the steps table's ``io.*`` columns (hooks/checkpoint.py).

A rank's bandwidth is its bytes over its own storage time (``io.checkpoint_io_s``): a DCP save ends
with every rank waiting for the slowest, so its extra time in a blocking save is the job's, in an
async upload not. The rules and the formulas: docs/finding-kinds.md, "slow_checkpoint".
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...steptable.matrix import StepMatrix, nan_to_zero
from ..findings import Finding, severity_for
from .context import Context, Found
from .params import CheckpointParams

BYTES, IO_S, BLOCKED_S, ASYNC_S, SAVES = (
    "io.checkpoint_bytes",
    "io.checkpoint_io_s",
    "io.checkpoint_s",
    "io.checkpoint_async_s",
    "io.checkpoint_saves",
)


def _grid(m: StepMatrix, name: str) -> np.ndarray | None:
    g = m.extra(name)
    return None if g is None else nan_to_zero(g)


def detect_slow_checkpoints(m: StepMatrix, p: CheckpointParams | None = None) -> list[Finding]:
    """A rank (or a node's ranks) whose checkpoints write or read far slower than its peers'."""
    p = p or CheckpointParams()
    nbytes, io, blocked, upload = (_grid(m, c) for c in (BYTES, IO_S, BLOCKED_S, ASYNC_S))
    if nbytes is None or blocked is None or m.n_ranks < 2:
        return []
    io = io if io is not None else np.zeros_like(nbytes)
    upload = upload if upload is not None else np.zeros_like(nbytes)
    own = np.where(io > 0, io, blocked + upload)  # the rank's own storage time, per rank and step
    has = (nbytes > 0) & (own > 0)
    cols = np.flatnonzero(has.any(axis=0))
    if len(cols) == 0:
        return []
    b = np.where(has, nbytes, 0.0).sum(axis=1)
    s = np.where(has, own, 0.0).sum(axis=1)
    ranks = np.flatnonzero((b > 0) & (s > 0))
    if len(ranks) < 2:
        return []
    bw = b[ranks] / s[ranks]
    n_ck = has[ranks].sum(axis=1)
    flagged, extra_s, peer_bw = [], np.zeros(m.n_steps), {}
    for i, r in enumerate(ranks):
        peers = float(np.median(np.delete(bw, i)))
        if peers <= 0 or bw[i] >= p.slow_ratio * peers:
            continue
        ideal = np.where(has[r], nbytes[r] / peers, 0.0)
        extra = np.where(has[r], own[r] - ideal, 0.0)
        if extra.sum() / max(n_ck[i], 1) < p.min_extra_s:
            continue
        flagged.append(int(m.ranks[r]))
        peer_bw[int(m.ranks[r])] = (float(bw[i]), peers)
        # the job waits for it where the save blocked (no async upload in that step)
        extra_s = np.maximum(extra_s, np.where(upload[r] > 0, 0.0, np.clip(extra, 0, None)))
    if not flagged:
        return []
    t = nan_to_zero(m.step_time()) * m.steps_per_column()
    cost = float(extra_s.sum() / max(t.sum(), 1e-12))  # of the run: what the severity weighs
    steps = m.steps[cols]
    first, last = int(steps[0]), int(steps[-1])
    covered = float(t[cols[0] : cols[-1] + 1].sum())
    r0 = flagged[0]
    mine, theirs = peer_bw[r0]
    who = f"rank {r0}" if len(flagged) == 1 else f"ranks {', '.join(map(str, flagged))}"
    return [
        Finding(
            kind="slow_checkpoint",
            ranks=flagged,
            phase=None,
            first_step=first,
            last_step=last,
            severity=severity_for(cost),
            slowdown=min(1.0, float(extra_s.sum()) / max(covered, 1e-12)),
            evidence=(
                f"{who} {'writes and reads' if len(flagged) == 1 else 'write and read'} checkpoints at "
                f"{mine / 1e6:.1f} MB/s against {theirs / 1e6:.1f} MB/s on the other ranks (median), over "
                f"{len(cols)} checkpoint step(s) from step {first}; at their speed the run would spend "
                f"{extra_s.sum():.2f} s less waiting for it ({cost:.1%} of its time in steps): look at that "
                "node's storage (disk, mount, network file system)"
            ),
            details={
                "bandwidth_Bps": {str(r): round(v[0], 1) for r, v in peer_bw.items()},
                "peer_bandwidth_Bps": round(theirs, 1),
                "checkpoint_steps": [int(x) for x in steps[:50]],
                "extra_s": round(float(extra_s.sum()), 4),
            },
        )
    ]


def young(delta_s: float, mtbf_s: float) -> float:
    """Young's optimal checkpoint interval (seconds of work between checkpoints)."""
    return math.sqrt(2.0 * delta_s * mtbf_s)


def daly(delta_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimal interval: Young's corrected, for δ < 2M; else M."""
    if delta_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = delta_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * delta_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta_s


def waste(interval_s: float, delta_s: float, mtbf_s: float) -> float:
    """The share of time lost at checkpoint interval τ: δ/τ for the checkpoints, τ/2M for the work redone
    after a failure (half an interval, on average)."""
    return delta_s / interval_s + interval_s / (2.0 * mtbf_s)


def checkpoint_advice(
    m: StepMatrix, up: dict[str, Any], findings: list[Finding], p: CheckpointParams | None = None
) -> dict[str, Any] | None:
    """How often to checkpoint, from the run's blocking time per save and its failures (or the setting's
    rate); None for a run without saves."""
    p = p or CheckpointParams()
    blocked, saves = _grid(m, BLOCKED_S), _grid(m, SAVES)
    if blocked is None or saves is None:
        return None
    cols = np.flatnonzero((saves > 0).any(axis=0))
    if len(cols) == 0:
        return None
    delta = float(np.median(np.median(blocked[:, cols], axis=0)))
    if delta <= 0:
        return None
    wall = float(up.get("wall_s") or up.get("in_steps_s") or 0.0)
    failures = int(up.get("restarts", 0)) + sum(1 for f in findings if f.kind == "rank_lost")
    if failures > 0 and wall > 0:
        mtbf, source = wall / failures, f"{failures} failure(s) seen in this run"
    else:
        mtbf, source = (
            3600.0 / p.failure_rate_per_hour,
            f"failure_rate_per_hour={p.failure_rate_per_hour:g} (none seen)",
        )
    out: dict[str, Any] = {
        "checkpoint_s": round(delta, 4),
        "saves": int(len(cols)),
        "mtbf_h": round(mtbf / 3600.0, 4),
        "mtbf_from": source,
        "young_s": round(young(delta, mtbf), 2),
        "daly_s": round(daly(delta, mtbf), 2),
    }
    rec = daly(delta, mtbf)
    step_s = float(np.nanmedian(m.step_time()))
    if step_s > 0:
        out["recommended_steps"] = max(1, int(round(rec / step_s)))
    out["waste_recommended"] = round(waste(rec, delta, mtbf), 6)
    if m.step_start is not None and len(cols) >= 2:
        starts = m.step_start[cols]
        now = float(np.median(np.diff(starts[np.isfinite(starts)]))) if np.isfinite(starts).sum() >= 2 else 0.0
        if now > 0:
            out["interval_s"] = round(now, 2)
            out["waste_now"] = round(waste(now, delta, mtbf), 6)
            out["goodput_gain"] = round(max(0.0, out["waste_now"] - out["waste_recommended"]), 6)
    return out


def detect_checkpoint_budget(
    m: StepMatrix, advice: dict[str, Any] | None, p: CheckpointParams | None = None
) -> list[Finding]:
    """Checkpoints blocking the typical rank over ``budget`` of the run's time in steps."""
    p = p or CheckpointParams()
    blocked = _grid(m, BLOCKED_S)
    if blocked is None:
        return []
    t = nan_to_zero(m.step_time()) * m.steps_per_column()
    typical = np.median(blocked, axis=0) * m.steps_per_column()
    share = float(typical.sum() / max(t.sum(), 1e-12))
    if share <= p.budget:
        return []
    cols = np.flatnonzero(typical > 0)
    gain = float((advice or {}).get("goodput_gain", 0.0))
    how = (
        f"checkpointing every {advice['daly_s']:.0f} s (Daly; about {advice.get('recommended_steps', '?')} steps) "
        f"instead of every {advice['interval_s']:.0f} s would give back {gain:.1%} of the time"
        if advice and "interval_s" in advice
        else "the run's interval between saves is not known (fewer than two saves)"
    )
    return [
        Finding(
            kind="slow_checkpoint",
            ranks=[],
            phase=None,
            first_step=int(m.steps[cols[0]]),
            last_step=int(m.steps[cols[-1]]),
            severity=severity_for(gain),
            slowdown=gain,
            evidence=(
                f"checkpoints block training {share:.1%} of its time in steps, over the {p.budget:.0%} budget; "
                f"{how}; a faster save (async, sharded, a faster store) cuts the rest"
            ),
            details={"share": round(share, 4), "budget": p.budget},
        )
    ]


def detect_slow(m: StepMatrix | None, ctx: Context) -> Found:
    """Ranks whose checkpoint writes or reads are slow against their peers (the detectors' table)."""
    if m is None:
        return Found()
    return Found(detect_slow_checkpoints(m, ctx.params.checkpoint or CheckpointParams()))


def detect_budget(m: StepMatrix | None, ctx: Context) -> Found:
    """Checkpoints that block training beyond the budget; leaves the interval advice for the summary."""
    if m is None or ctx.uptime is None:
        return Found()
    cp = ctx.params.checkpoint or CheckpointParams()
    ctx.advice = checkpoint_advice(m, ctx.uptime, ctx.findings, cp)
    return Found(detect_checkpoint_budget(m, ctx.advice, cp))

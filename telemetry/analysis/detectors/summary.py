"""The run's summary beside its findings: the what-if of all findings together, the goodput split of
the run's time, its uptime and busy share; and the rule that settles a slowdown that ended."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ...steptable.matrix import StepMatrix, gaps_after, nan_to_zero, nanmedian, rank_median
from ..findings import Finding, tally
from .straggler import straggler_scores
from .stretch import StragglerParams
from .utilization import UtilizationParams, parts_per_step
from .whatif import slowdown, step_savings


def summarize(
    m: StepMatrix | None,
    findings: list[Finding],
    shift: np.ndarray | None,
    utilization: UtilizationParams | None = None,
    gaps: bool = True,
    up: dict[str, Any] | None = None,
) -> dict[str, Any]:
    if m is None or m.n_steps == 0:
        return {"ranks": 0, "steps": 0, "findings": 0, "slowdown": 0.0, "severity": None}
    t = m.step_time()
    total = slowdown(m, shift) if shift is not None else 0.0
    regressed = sum(
        f.slowdown * covered_seconds(m, f)
        for f in findings
        if f.kind in ("regression", "slow_comm")
        or (f.kind == "data_stall" and not f.ranks and f.details.get("before_s") is not None)
        or (f.kind == "slow_checkpoint" and f.ranks)  # the job's wait for a slow rank's storage
    )
    total = min(1.0, total + (regressed + _dropped_seconds(m, findings)) / max(float(np.nansum(t)), 1e-12))
    up = up if up is not None else uptime(m)
    out: dict[str, Any] = {
        "ranks": m.n_ranks,
        "steps": m.n_steps,
        "first_step": int(m.steps[0]),
        "last_step": int(m.steps[-1]),
        "step_time_s": float(nanmedian(t)),
        "slowdown": round(total, 6),
        **tally(findings),
        "goodput": goodput_split(m, shift, up),
        "uptime": up,
        "straggler_score": straggler_scores(m),
    }
    busy = _busy(m, shift, utilization or UtilizationParams(), gaps)
    if busy:
        out["utilization"] = busy
    if m.has_layout:
        out["stages"] = int(len(np.unique(m.groups)))
    if m.tokens is not None:
        secs = np.nansum(t)
        if secs > 0 and m.tokens.sum() > 0:
            out["tokens_per_s"] = float(m.tokens.sum() / secs)
    if "mfu" in m.columns:
        out["mfu"] = float(nanmedian(m.columns["mfu"]))
    if any(f.kind == "hang" for f in findings):
        out["slowdown"] = 1.0
    return out


def _dropped_seconds(m: StepMatrix, findings: list[Finding]) -> float:
    """Seconds the utilization regressions that no other finding accounts for (warnings) would give
    back. Their grown idle part is none of the other findings' own (else they would be info), so their
    time adds to the others'; a drop within the run and one against the baseline on the same steps
    count once, the larger. A low_utilization finding is not in the total: its slowdown is the share of
    an idle part the job spends as it is built, not a culprit to heal."""
    drops = [f for f in findings if f.kind == "utilization_regression" and f.severity != "info"]
    if not drops:
        return 0.0
    t = nan_to_zero(m.step_time())
    saved = np.zeros(m.n_steps)
    for f in drops:
        mask = (m.steps >= f.first_step) & (m.steps <= f.last_step)
        saved = np.where(mask, np.maximum(saved, f.slowdown * t), saved)
    return float(saved.sum())


def _busy(m: StepMatrix, shift: np.ndarray | None, p: UtilizationParams, gaps: bool) -> dict[str, Any]:
    """The run's busy share after warm-up (low_utilization's measure), its bounds and its idle parts:
    the summary's ``utilization``, shown whether or not it is a finding."""
    if not np.isfinite(m.compute).any():
        return {}
    wall, parts = parts_per_step(m, shift, gaps)
    live = slice(StragglerParams().warmup(m.n_steps), None)
    w = m.steps_per_column()[live]  # per-step parts, each column as many times as the steps it holds
    total = float(np.nansum(wall[live] * w))
    if total <= 0:
        return {}
    shares = {k: float(np.nansum(v[live] * w)) / total for k, v in parts.items()}
    busy = shares.pop("busy")
    idle = {k: round(v, 4) for k, v in sorted(shares.items(), key=lambda kv: -kv[1]) if v > 0}
    band = "ok" if busy >= p.bound else "info" if busy >= p.warn_bound else "warning"
    band = "critical" if busy < p.warn_bound / 2 else band
    return {"busy_fraction": round(busy, 4), "bound": p.bound, "warn_bound": p.warn_bound, "band": band, "idle": idle}


TIME_KINDS = ("straggler", "data_stall", "input_bound", "stage_imbalance", "imbalance", "regression", "slow_comm")


def share_of_run(m: StepMatrix, f: Finding) -> float:
    """A finding's what-if as a fraction of the whole run's step time (it is over its own steps)."""
    total = float(np.nansum(m.step_time()))
    return f.slowdown * covered_seconds(m, f) / total if total > 0 else 0.0


def settle_ended(m: StepMatrix, f: Finding) -> Finding:
    """A slowdown that is over and cost the run little is info: a stretch that ended at least as many
    steps before the run's last as it lasted (and 10 or more), whose cost is under 1% of the whole
    run's time however much it slowed its own steps (six steps of a rank held back by the scheduler
    right after warm-up). A stretch still going at the run's end keeps its severity: it goes on
    costing."""
    if f.kind not in TIME_KINDS or f.severity == "info" or f.first_step is None or f.last_step is None:
        return f
    lasted = f.last_step - f.first_step + 1
    since = int(m.steps[-1]) - f.last_step
    share = share_of_run(m, f)
    if since < max(10, lasted) or share >= 0.01:
        return f
    return replace(
        f,
        severity="info",
        evidence=f.evidence + f"; it ended {since} steps before the run's last and cost {share:.1%} of the whole "
        "run: info, nothing to act on unless it comes back",
        details={**f.details, "run_share": share},
    )


def covered_seconds(m: StepMatrix, f: Finding) -> float:
    """Seconds of job time in the steps a finding covers."""
    t = m.step_time()
    mask = (m.steps >= (f.first_step if f.first_step is not None else m.steps[0])) & (
        m.steps <= (f.last_step if f.last_step is not None else m.steps[-1])
    )
    return float(np.nansum(t[mask]))


def uptime(m: StepMatrix) -> dict[str, Any]:
    """The run's wall time from its first step's start to its last step's end, split into time in
    steps, short gaps between steps (work outside ``telemetry.step``: logging, evaluation, host
    overhead) and long gaps (over ``RESTART_GAP_S`` and 30 median steps: a restart, with the steps
    re-run after it, or an outage): the lost time. Steps in order of their number; a restarted
    job's re-run steps replace the first session's (last wins), so the gap before the first
    re-run step holds the wasted work too."""
    w = m.steps_per_column()
    t = nan_to_zero(m.step_time())
    in_steps = float((t * w).sum())
    out: dict[str, Any] = {"in_steps_s": round(in_steps, 3)}
    if m.step_start is None or not np.isfinite(m.step_start).any():
        return out
    start = m.step_start
    ok = np.isfinite(start)
    first = float(start[ok][0])
    last_i = np.flatnonzero(ok)[-1]
    wall = float(start[last_i] + t[last_i] * w[last_i] - first)
    gaps, long = gaps_after(m)
    out.update(
        wall_s=round(max(wall, in_steps), 3),
        between_steps_s=round(float(gaps[~long].sum()), 3),
        lost_s=round(float(gaps[long].sum()), 3),
        restarts=int(long.sum()),
        restarted_at_steps=[int(s) for s in m.steps[1:][long[:-1]]][:20],
    )
    return out


def goodput_split(m: StepMatrix, shift: np.ndarray | None, up: dict[str, Any] | None = None) -> dict[str, float]:
    """Where the run's time went, as fractions of its wall time (first step start to last step end).

    compute: the typical rank's own work; data_wait: the typical rank's wait for input;
    straggler_wait: time the job waited for the culprits of the findings (the what-if);
    checkpoint: the time the typical rank was blocked in checkpoint saves and loads where measured
    (``io.checkpoint_s``), else the excess of steps that hit every rank at once (over 3x the median step);
    communication: the collectives' own time (the last rank to arrive does not wait);
    between_steps: short gaps between steps (work outside telemetry.step); lost: long gaps (a
    restart and the work it re-ran, an outage; see :func:`uptime`); other: the rest of the steps.
    Windows of several steps (a live job from Prometheus): straggler_wait, checkpoint, communication
    and other are one part, :data:`WAITS`.
    """
    t = nan_to_zero(m.step_time())
    w = m.steps_per_column()  # each column's per-step times count as many times as the steps it holds
    total = float((t * w).sum())
    if total <= 0:
        return {}
    up = up or {}
    between, lost = float(up.get("between_steps_s", 0.0)), float(up.get("lost_s", 0.0))
    wall = total + between + lost
    med = float(np.median(t))
    spikes = t > 3 * med
    checkpoint = float(((t - med) * w)[spikes].sum())
    measured = m.extra("io.checkpoint_s")
    if measured is not None and np.nansum(measured) > 0:
        # measured (io.checkpoint_s: the time ranks were blocked in saves and loads), per step the
        # typical rank's, in place of the spikes; the spikes' compute counts as compute again
        checkpoint = float((np.median(nan_to_zero(measured), axis=0) * w).sum())
        spikes = np.zeros_like(spikes)
    culprit = float((step_savings(m, shift) * w).sum()) if shift is not None else 0.0
    compute = float(np.nansum((rank_median(m.compute) * w)[~spikes]))
    data = float(np.nansum((rank_median(m.data) * w)[~spikes]))
    comm = 0.0
    if m.comm is not None:
        comm = float(np.nansum((m.comm_own() * w)[~spikes]))
        comm = comm if np.isfinite(comm) else 0.0
    parts = {
        "compute": compute,
        "data_wait": data,
        "straggler_wait": culprit,
        "checkpoint": checkpoint,
        "communication": comm,
    }
    scale = min(1.0, total / max(sum(parts.values()), 1e-12))  # overlapping estimates never exceed 100%
    out = {k: round(v * scale / wall, 4) for k, v in parts.items()}
    out["other"] = round(max(0.0, total / wall - sum(out.values())), 4)
    if m.weight is not None:
        # Windows of a live job read from Prometheus: a window's per-step means cannot say which rank
        # arrived last at each step, nor which step spiked. The collectives' own time (the last rank's
        # blocked time, step by step), the waits for late ranks and the spikes are one part here, as
        # the run store's communication + straggler_wait + checkpoint + other (split, they read far from
        # the store's; together they agree: bench/RESULTS.md, "Prometheus and the run store").
        out[WAITS] = round(sum(out.pop(k) for k in (*_MERGED_FROM_WINDOWS, "other")), 4)
    if between > 0:
        out["between_steps"] = round(between / wall, 4)
    if lost > 0:
        out["lost"] = round(lost / wall, 4)
    return out


# the goodput part windows of several steps give for straggler_wait, checkpoint, communication and other
WAITS = "communication_and_waits"
_MERGED_FROM_WINDOWS = ("straggler_wait", "checkpoint", "communication")

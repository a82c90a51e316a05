"""Lost ranks: a rank that stopped reporting while its peers went on (a process that died, a killed
pod, a node that went away). Distinct from a hang, where every rank is alive and stuck.

:func:`detect_lost_ranks` reads a run directory's progress heartbeats and, where the launcher recorded
it, how the rank's process ended (``rank-N.exit.json``): a rank that never shut down and either ended
abnormally or fell ``LOST_AFTER_S`` behind a peer is lost. A job whose ranks all stop at once has no
lost rank (the store's reader says so: telemetry/store/ended.py). Online detection feeds it blocks
instead (:func:`missing_streaks`, :func:`lost_rank_of_blocks`). The rules: docs/finding-kinds.md,
"rank_lost".
"""

from __future__ import annotations

import time
from typing import Any, Mapping, cast

import numpy as np

from ..findings import Finding, severity_for
from .context import Context, Found

LOST_AFTER_S = 5.0


def detect_lost_ranks(
    progress: Mapping[int, Mapping[str, Any]], first_start_s: float | None = None, lost_after_s: float = LOST_AFTER_S
) -> list[Finding]:
    beats = {int(r): p for r, p in progress.items()}
    if len(beats) < 2:
        return []
    times = {r: float(p["time_s"]) for r, p in beats.items() if p.get("time_s")}
    last_report = max(times.values(), default=None)
    lost: list[int] = []
    for r, p in beats.items():
        if p.get("finished"):
            continue
        exit_ = p.get("exit") or {}
        abnormal = exit_.get("exit_code") not in (None, 0)
        seen = times.get(r)
        later = [t for q, t in times.items() if q != r and seen is not None and t - seen >= lost_after_s]
        finished_after = [
            q
            for q, b in beats.items()
            if q != r and b.get("finished") and seen is not None and times.get(q, 0.0) > seen
        ]
        if abnormal or later or finished_after:
            lost.append(r)
    if not lost or len(lost) == len(beats) and not any((beats[r].get("exit") or {}).get("exit_code") for r in lost):
        return []  # everyone stopped alike: nothing says which one went first
    out = []
    job_last_step = max((int(p["last_step"]) for p in beats.values() if p.get("last_step") is not None), default=None)
    for r in sorted(lost):
        seen = times.get(r)
        peers_finished = any(
            q != r and b.get("finished") and seen is not None and times.get(q, 0.0) > seen for q, b in beats.items()
        )
        waiting = {
            q: b["collective"]
            for q, b in beats.items()
            if q != r and q not in lost and b.get("collective") and not b.get("finished")
        }
        out.append(_finding(r, beats[r], times, last_report, job_last_step, first_start_s, peers_finished, waiting))
    return out


def _finding(
    r: int,
    p: Mapping[str, Any],
    times: dict[int, float],
    last_report: float | None,
    job_last_step: int | None,
    first_start_s: float | None,
    peers_finished: bool = False,
    waiting: Mapping[int, str] | None = None,
) -> Finding:
    exit_ = p.get("exit") or {}
    seen = times.get(r)
    gone_at = seen if seen is not None else exit_.get("time_s")
    last = p.get("last_step")
    step = cast(int, p.get("open_step")) if p.get("open_step") is not None else (last + 1 if last is not None else 0)
    where = f"in step {step}" + (f" phase {p['phase']}" if p.get("phase") else "")  # as last heard
    if p.get("collective"):
        where += f", inside {p['collective']}"
    when = time.strftime("%H:%M:%S", time.localtime(gone_at)) if gone_at else "an unknown time"
    gap = (last_report - seen) if (last_report is not None and seen is not None) else None
    if exit_.get("exit_code") not in (None, 0):
        how = (
            f"its process ended with {exit_['signal']} (exit {exit_['exit_code']}, seen by its launcher)"
            if exit_.get("signal")
            else f"its process exited with code {exit_['exit_code']} (seen by its launcher)"
        )
    else:
        how = "it never shut down (the process was killed, crashed or stopped responding, or its node went away)"
    peers = f"; its peers reported for {gap:.1f} s more" if gap and gap > 0 else ""
    # ended: its launcher saw the process end, or its peers shut down after it; else it may be stopped
    ended = exit_.get("exit_code") not in (None, 0) or peers_finished
    if job_last_step is not None and last is not None and job_last_step > last:
        peers += f" and got as far as step {job_last_step}"
    if waiting and not ended:  # alive and stopped, or gone: either way the job waits for it
        peers += (
            f"; rank{'s' if len(waiting) > 1 else ''} {', '.join(map(str, sorted(waiting)))} "
            f"wait{'' if len(waiting) > 1 else 's'} for it in {', '.join(sorted(set(waiting.values())))}"
        )
    after = None
    if first_start_s is not None and gone_at is not None and last_report is not None and last_report > first_start_s:
        after = round(max(0.0, min(1.0, (last_report - gone_at) / (last_report - first_start_s))), 6)
    return Finding(
        kind="rank_lost",
        ranks=[r],
        phase=None,  # the last heartbeat's phase is not where it died
        first_step=int(step),
        last_step=int(max(step, job_last_step or step)),
        severity=severity_for(1.0),
        slowdown=1.0,
        evidence=(
            f"rank {r} {'ended' if ended else 'stopped reporting'} without a clean shutdown "
            f"(last heartbeat at {when}, {where}"
            + (f"; last completed step {last})" if last is not None else ", before its first step)")
            + f": {how}{peers}"
        ),
        details={
            "last_step": last,
            "last_report_s": seen,
            "exit": exit_ or None,
            "peers_last_report_s": last_report,
            "after_loss": after,
        },
    )


# ---- online: blocks of steps rank 0 received ------------------------------------------------------
def missing_streaks(rows: Mapping[int, Any], world: int, at_least: int) -> dict[int, int]:
    """Ranks missing from each of the latest ``at_least`` (or more) blocks that other ranks reported:
    rank -> the first block of that run of missing blocks. ``rows``: block -> the ranks that
    reported it (a set or an array)."""
    blocks = sorted(b for b, seen in rows.items() if len(seen))
    if not blocks or world <= 0:
        return {}
    seen = np.zeros((len(blocks), world), dtype=bool)
    for i, b in enumerate(blocks):
        r = np.fromiter(rows[b], dtype=np.int64) if isinstance(rows[b], (set, frozenset)) else np.asarray(rows[b])
        r = r.astype(np.int64, copy=False)
        seen[i, r[(r >= 0) & (r < world)]] = True
    newest_first = seen[::-1]
    run = np.where(newest_first.any(axis=0), newest_first.argmax(axis=0), len(blocks))  # blocks missed since
    lost = np.flatnonzero((run >= at_least) & (run < len(blocks)))  # it reported before: not one never started
    return {int(r): blocks[len(blocks) - int(run[r])] for r in lost}


def lost_rank_of_blocks(rank: int, first_block: int, latest_block: int, every: int) -> Finding:
    """``rank_lost`` from online detection: ``rank`` posted no summary from ``first_block`` to
    ``latest_block`` (blocks of ``every`` steps) while its peers went on."""
    first, last = first_block * every, (latest_block + 1) * every - 1
    return Finding(
        kind="rank_lost",
        ranks=[rank],
        phase=None,
        first_step=first,
        last_step=last,
        severity="critical",
        slowdown=1.0,
        evidence=(
            f"rank {rank} posted no summary for steps {first}-{last} while its peers "
            "did (online detection on rank 0): its process died, stopped responding or "
            "left the job"
        ),
        details={"missing_blocks": latest_block - first_block + 1},
    )


def detect(m: object, ctx: Context) -> Found:
    """Ranks that stopped reporting while others went on, from the heartbeats (the detectors' table)."""
    return Found(detect_lost_ranks(ctx.progress or {}, ctx.first_start_s))

"""Hangs: no rank finished a step for longer than a bound; name the ranks holding the job up.

Works from the per-rank progress heartbeats of a run directory (what each rank was doing when last
seen: open step, phase, and the collective it is blocked in, if any). The ranks to blame are those
that did not reach the collective their peers wait in (or stopped sending heartbeats); the ranks
blocked in a collective are victims, named in the evidence.
"""

from __future__ import annotations

from typing import Any, Mapping, cast

import numpy as np

from ...steptable.matrix import StepMatrix, nanmedian
from ..findings import Finding
from .context import Context, Found

MIN_BOUND_S = 10.0
BOUND_STEPS = 30.0


def hang_bound(median_step_s: float | None, bound_s: float | None = None) -> float:
    """The user's bound, else ``BOUND_STEPS`` x the median step time, at least ``MIN_BOUND_S``."""
    if bound_s is not None:
        if not (np.isfinite(bound_s) and bound_s > 0):
            raise ValueError(f"hang bound {bound_s!r}; accepted: a number of seconds above 0")
        return bound_s
    if median_step_s is None or not np.isfinite(median_step_s):
        return MIN_BOUND_S
    return max(MIN_BOUND_S, BOUND_STEPS * median_step_s)


def hang_bound_s(m: StepMatrix | None, bound_s: float | None = None) -> float:
    """:func:`hang_bound` for the steps of ``m``."""
    med = float(nanmedian(m.step_time())) if m is not None and m.n_steps else None
    return hang_bound(med, bound_s)


def detect_hang(
    progress: Mapping[int, Mapping[str, Any]],
    m: StepMatrix | None,
    world_size: int | None = None,
    bound_s: float | None = None,
    explained: set[int] | frozenset[int] = frozenset(),
) -> list[Finding]:
    """``explained``: ranks already reported lost; a stall they alone caused is their finding."""
    if not progress:
        return []
    beats = {int(r): p for r, p in progress.items()}
    clean = all(p.get("finished") and p.get("open_step") is None for p in beats.values())
    if clean and (world_size is None or len(beats) >= world_size):
        return []  # every rank shut down between steps
    now = max(float(p.get("time_s") or 0) for p in beats.values())
    ends = [float(p["last_step_end_s"]) for p in beats.values() if p.get("last_step_end_s")]
    last_end = max(ends) if ends else min(float(p.get("time_s") or now) for p in beats.values())
    bound = hang_bound_s(m, bound_s)
    stalled_for = now - last_end
    if stalled_for <= bound:
        return []
    silent = sorted(r for r, p in beats.items() if now - float(p.get("time_s") or 0) > bound)
    missing = sorted(set(range(world_size)) - set(beats)) if world_size else []
    waiting = sorted(r for r, p in beats.items() if p.get("collective") and r not in silent)
    outside = sorted(
        r for r, p in beats.items() if not p.get("collective") and p.get("open_step") is not None and r not in silent
    )
    culprits = sorted(set(silent) | set(missing) | (set(outside) if waiting else set()))
    if not culprits:
        culprits = sorted(beats)  # everyone blocked alike: the job as a whole is stuck
    if explained and set(culprits) <= set(explained):
        return []  # the lost ranks' finding says it: their peers wait for ranks that are gone
    open_steps = cast(
        "list[int]", [p.get("open_step") for r, p in beats.items() if r in culprits and p.get("open_step") is not None]
    )
    step = min(open_steps) if open_steps else None
    phases = {beats[r].get("phase") for r in culprits if r in beats} - {None}
    phase = phases.pop() if len(phases) == 1 else None
    parts = [f"no rank finished a step for {stalled_for:.1f} s (bound {bound:.1f} s)"]
    for r in culprits:
        p = beats.get(r)
        if p is None:
            parts.append(f"rank {r} never reported")
        elif r in silent:
            parts.append(f"rank {r} stopped reporting {now - float(p['time_s']):.1f} s ago")
        elif p.get("collective"):  # every rank blocked alike: this one waits too
            parts.append(f"rank {r} waits in {_call(p)} in step {p.get('open_step')}")
        elif waiting:
            parts.append(f"rank {r} is in step {p.get('open_step')}{_in_phase(p)} and never reached the collective")
        else:
            parts.append(f"rank {r} is in step {p.get('open_step')}{_in_phase(p)}")
    if waiting and set(waiting) - set(culprits):
        ops = sorted({_call(beats[r]) for r in waiting})
        parts.append(f"rank(s) {', '.join(map(str, waiting))} wait in {', '.join(ops)}")
    return [
        Finding(
            kind="hang",
            ranks=culprits,
            phase=phase,
            first_step=step,
            last_step=step,
            severity="critical",
            slowdown=1.0,
            evidence="; ".join(parts),
            details={"stalled_s": stalled_for, "bound_s": bound, "waiting_ranks": waiting},
        )
    ]


def _call(progress: Mapping[str, Any]) -> str:
    """``all_reduce #1234`` when the heartbeat numbers the call (its group instance's count: the same call
    has the same number on every rank of the group), else the op alone."""
    seq = progress.get("collective_seq")
    return f"{progress['collective']} #{seq}" if isinstance(seq, int) and seq > 0 else str(progress["collective"])


def _in_phase(progress: Mapping[str, Any]) -> str:
    """`` phase forward``, or nothing when the heartbeat does not say (e.g. read from Prometheus)."""
    return f" phase {progress['phase']}" if progress.get("phase") else ""


def detect(m: StepMatrix | None, ctx: Context) -> Found:
    """A job that stopped making steps, from the heartbeats; a stall that only ranks found lost caused
    is theirs (the detectors' table runs lost ranks first)."""
    lost = {r for f in ctx.findings if f.kind == "rank_lost" for r in f.ranks}
    return Found(detect_hang(ctx.progress or {}, m, ctx.world_size, ctx.params.hang_bound_s, explained=lost))

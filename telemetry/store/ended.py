"""How a run ended, from its heartbeats: a job whose ranks all stopped without a clean shutdown.

Every rank's pipeline writes a heartbeat (``rank-N.progress.json``) each tick, and a last one with
``finished: true`` at a clean shutdown (``shutdown()``, exit, SIGTERM). A run where no rank has that
last heartbeat, no launcher recorded how one ended, and every heartbeat is stale was killed as a whole
(the scheduler, a node failure) or stopped: :func:`unclean_end` is the note the reader adds to the
run's warnings. One rank gone while its peers went on is the ``rank_lost`` detector's (it says which).
"""

from __future__ import annotations

import time
from typing import Any, Mapping

STALE_AFTER_S = 5.0  # as the rank_lost detector's LOST_AFTER_S: a live rank's heartbeat is a tick old


def unclean_end(
    progress: Mapping[int, Mapping[str, Any]], now_s: float, stale_after_s: float = STALE_AFTER_S
) -> list[str]:
    """A note (for the analysis' warnings) on a run whose ranks all stopped without a clean shutdown
    and with no launcher record of how: a job killed as a whole (the scheduler, a node failure) or
    every process stopped. No ``rank_lost`` finding says it, since nothing says which rank went
    first. Said only when every heartbeat is older than ``stale_after_s`` at ``now_s`` (a running
    job's are at most a tick old), so a live run is never called ended (unless this host's clock runs
    ahead of the job's)."""
    beats = {int(r): p for r, p in progress.items()}
    times = {r: float(p["time_s"]) for r, p in beats.items() if p.get("time_s")}
    if not beats or not times or any(p.get("finished") for p in beats.values()):
        return []
    if any((p.get("exit") or {}).get("exit_code") not in (None, 0) for p in beats.values()):
        return []  # the launcher saw how they ended: the rank_lost findings say it
    if now_s - max(times.values()) < stale_after_s:
        return []
    lo, hi = min(times.values()), max(times.values())
    clock = "%H:%M:%S"
    when = time.strftime(clock, time.localtime(lo)) + (
        ""
        if time.strftime(clock, time.localtime(hi)) == time.strftime(clock, time.localtime(lo))
        else "-" + time.strftime(clock, time.localtime(hi))
    )
    steps = sorted({int(p["last_step"]) for p in beats.values() if p.get("last_step") is not None})
    done = (
        f"; last completed step {steps[0]}"
        if len(steps) == 1
        else f"; last completed steps {steps[0]}-{steps[-1]}"
        if steps
        else "; before their first step"
    )
    ranks = sorted(beats)
    who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {_ranges(ranks)}"
    return [
        f"{who} ended without a clean shutdown (none recorded; last heartbeat{'s' if len(ranks) > 1 else ''} "
        f"at {when}, {now_s - hi:.0f} s before this analysis{done}): the job was killed as a whole, every "
        "rank stopped, or the run directory stopped taking writes; nothing says which rank went first"
    ]


def _ranges(ranks: list[int]) -> str:
    """``0-3, 7``."""
    out: list[list[int]] = []
    for r in ranks:
        if out and r == out[-1][1] + 1:
            out[-1][1] = r
        else:
            out.append([r, r])
    return ranges_text(out)


def ranges_text(ranges: list[list[int]]) -> str:
    """[[0, 3], [7, 7]] -> ``0-3, 7`` (ranks, or steps: the run store's lost steps too)."""
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges)

"""Runs too long to hold at once, in windows of steps: the plan, and the windows' findings merged.

A run directory whose steps table would exceed ``WINDOW_ROWS`` rows (ranks x steps; the memory it
bounds: bench/RESULTS.md, "Run store") is analyzed in consecutive windows of whole steps, each read on its
own from the segments (their ``step`` statistics skip the rest), and the findings are merged: the
same kind, ranks and phase in adjacent windows (the next one beginning within ``tolerance`` steps
of where the last ended) are one finding from the first's first step to the last's last step,
with its what-if weighted by the steps each covered. Windows after the first have no warm-up.
Heartbeats (hangs, lost ranks) are analyzed with the last window, where the run ends.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, cast

import numpy as np

from ...analysis_options import AnalysisOptions
from ..findings import SEVERITIES, Finding, tally

if TYPE_CHECKING:
    from ..detectors import Analysis

WINDOW_ROWS = AnalysisOptions.window_rows


def plan(first: int, last: int, ranks: int, rows: int = WINDOW_ROWS) -> list[tuple[int, int]]:
    """Consecutive windows of whole steps covering first..last, each at most ``rows`` rows."""
    per = max(1, rows // max(ranks, 1))
    n = last - first + 1
    count = max(1, math.ceil(n / per))
    size = math.ceil(n / count)
    return [(a, min(last, a + size - 1)) for a in range(first, last + 1, size)]


def analyze_windows(
    windows: list[tuple[int, int]],
    run_window: Callable[[tuple[int, int], bool, bool], Analysis],
    tolerance: int | None = None,
) -> Analysis:
    """``run_window((a, b), first, last)`` -> an Analysis of that window (``first``: the run's first
    window, with warm-up; ``last``: the one that gets the heartbeats). Returns one Analysis."""
    from ..detectors import Analysis

    results = []
    for i, w in enumerate(windows):
        r = run_window(w, i == 0, i == len(windows) - 1)
        r.matrix = None  # the window's rank x step arrays: gone before the next window is read
        results.append(r)
    size = windows[0][1] - windows[0][0] + 1
    findings = merge_findings(
        [r.findings for r in results], tolerance if tolerance is not None else max(10, size // 20)
    )
    summary = merge_summaries([r.summary for r in results], findings)
    summary["windows"] = {"count": len(windows), "steps_each": size}
    return Analysis(findings, summary, None)


def merge_findings(per_window: list[list[Finding]], tolerance: int) -> list[Finding]:
    """Findings of consecutive windows: one per continuing (kind, ranks, phase)."""
    out: list[Finding] = []
    open_: dict[tuple, tuple[Finding, int]] = {}  # key -> (merged so far, windows merged)
    for findings in per_window:
        seen = set()
        for f in findings:
            key = (f.kind, tuple(f.ranks), f.phase)
            prev = open_.get(key)
            if (
                prev is not None
                and key not in seen
                and f.first_step is not None
                and prev[0].last_step is not None
                and f.first_step <= prev[0].last_step + tolerance
            ):
                open_[key] = (_join(prev[0], f), prev[1] + 1)
            else:
                if prev is not None:
                    out.append(_close(*prev))
                open_[key] = (f, 1)
            seen.add(key)
        for key in [k for k in open_ if k not in seen]:  # ended before this window
            out.append(_close(*open_.pop(key)))
    out += [_close(*v) for v in open_.values()]
    out.sort(key=lambda f: (-SEVERITIES.index(f.severity), -f.slowdown))
    return out


def _steps(f: Finding) -> int:
    return (f.last_step - f.first_step + 1) if f.first_step is not None and f.last_step is not None else 1


def _join(a: Finding, b: Finding) -> Finding:
    na, nb = _steps(a), _steps(b)
    cost = (a.slowdown * na + b.slowdown * nb) / (na + nb)
    worse = a if SEVERITIES.index(a.severity) >= SEVERITIES.index(b.severity) else b
    return replace(
        a, last_step=b.last_step, slowdown=round(cost, 6), severity=worse.severity, causes=a.causes or b.causes
    )


def _close(f: Finding, windows: int) -> Finding:
    if windows == 1:
        return f
    note = (
        f" [one finding over steps {f.first_step}-{f.last_step}, merged from {windows} windows of the run; "
        f"the numbers above are the first window's, the what-if is over all of them]"
    )
    return replace(f, evidence=f.evidence + note, details={**f.details, "windows": windows})


def merge_summaries(summaries: list[dict[str, Any]], findings: list[Finding]) -> dict[str, Any]:
    ok = [s for s in summaries if s.get("steps")]
    if not ok:
        return summaries[-1] if summaries else {}
    secs = np.array([s.get("uptime", {}).get("in_steps_s", 0.0) or s["steps"] * s["step_time_s"] for s in ok])
    w = secs / secs.sum() if secs.sum() > 0 else np.full(len(ok), 1 / len(ok))
    out: dict[str, Any] = {
        "ranks": max(s["ranks"] for s in ok),
        "steps": sum(s["steps"] for s in ok),
        "first_step": min(s["first_step"] for s in ok),
        "last_step": max(s["last_step"] for s in ok),
        "step_time_s": float(np.median([s["step_time_s"] for s in ok])),
        "slowdown": round(float(np.dot(w, [s["slowdown"] for s in ok])), 6),
        **tally(findings),
    }
    keys = sorted({k for s in ok for k in s.get("goodput", {})})
    out["goodput"] = {k: round(float(np.dot(w, [s.get("goodput", {}).get(k, 0.0) for s in ok])), 4) for k in keys}
    up: dict[str, Any] = {}
    for k in ("in_steps_s", "between_steps_s", "lost_s", "wall_s"):
        if any(k in s.get("uptime", {}) for s in ok):
            up[k] = round(sum(s.get("uptime", {}).get(k, 0.0) for s in ok), 3)
    up["restarts"] = sum(s.get("uptime", {}).get("restarts", 0) for s in ok)
    up["restarted_at_steps"] = [x for s in ok for x in s.get("uptime", {}).get("restarted_at_steps", [])][:20]
    out["uptime"] = up
    scores: dict[int, list[float]] = {}
    for s in ok:
        for r, v in s.get("straggler_score", {}).items():
            scores.setdefault(r, []).append(v)
    out["straggler_score"] = {r: float(np.mean(v)) for r, v in scores.items()}
    for k in ("tokens_per_s", "mfu"):
        vals = [s[k] for s in ok if k in s]
        if vals:
            out[k] = (
                float(np.dot(w[: len(vals)] / w[: len(vals)].sum(), vals))
                if len(vals) == len(ok)
                else float(np.median(vals))
            )
    util = [s.get("utilization") for s in ok]
    if all(util):  # the busy share and idle parts of the whole run: weighted by each window's time
        util = cast("list[dict[str, Any]]", util)  # all(): none is None
        busy = float(np.dot(w, [u["busy_fraction"] for u in util]))
        parts = sorted({k for u in util for k in u["idle"]})
        idle = {k: round(float(np.dot(w, [u["idle"].get(k, 0.0) for u in util])), 4) for k in parts}
        bound, warn = util[0]["bound"], util[0]["warn_bound"]
        band = "ok" if busy >= bound else "info" if busy >= warn else "warning" if busy >= warn / 2 else "critical"
        out["utilization"] = {
            "busy_fraction": round(busy, 4),
            "bound": bound,
            "warn_bound": warn,
            "band": band,
            "idle": dict(sorted(idle.items(), key=lambda kv: -kv[1])),
        }
    if any("stages" in s for s in ok):
        out["stages"] = max(s.get("stages", 0) for s in ok)
    return out

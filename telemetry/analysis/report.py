"""Rendering an analysis for people: a per-rank, per-phase table and the findings."""

from __future__ import annotations

import textwrap

import numpy as np

from .detectors import Analysis
from .detectors.matrix import StepMatrix, nanmedian

MAX_RANK_ROWS = 16


def _ms(x: float) -> str:
    return "-" if not np.isfinite(x) else f"{x * 1e3:.1f}"


def rank_table(m: StepMatrix, warmup: int) -> str:
    """Median milliseconds per step for each rank and phase (after warm-up)."""
    live = slice(min(warmup, max(m.n_steps - 1, 0)), None)
    cols: list[tuple[str, np.ndarray]] = [("step", m.duration)]
    order = ["data"] + [p for p in m.phases if p != "data"]
    cols += [(p, m.phases[p]) for p in order if p in m.phases]
    if m.comm is not None:
        cols += [("comm", m.comm), ("compute", m.compute)]
    meds = {name: nanmedian(arr[:, live], axis=1) for name, arr in cols}
    steps = np.isfinite(m.duration).sum(axis=1)
    rows = list(range(m.n_ranks))
    note = ""
    if len(rows) > MAX_RANK_ROWS:
        key = meds["compute"] if "compute" in meds else meds["step"]
        top = np.argsort(-np.nan_to_num(key, nan=-np.inf))[:MAX_RANK_ROWS - 1]
        rows = sorted(int(i) for i in top)
        note = f"  ({m.n_ranks - len(rows)} more ranks not shown; the {len(rows)} with most compute are)\n"
    widths = [max(len(name), 7) for name, _ in cols]
    head = "  rank  steps " + " ".join(f"{name:>{w}}" for (name, _), w in zip(cols, widths))
    lines = ["Per rank, median ms per step" + (f" (after {warmup} warm-up steps)" if warmup else "") + ":",
             head]
    for i in rows:
        cells = " ".join(f"{_ms(meds[name][i]):>{w}}" for (name, _), w in zip(cols, widths))
        lines.append(f"  {int(m.ranks[i]):>4}  {int(steps[i]):>5} {cells}")
    return "\n".join(lines) + "\n" + note


def render(analysis: Analysis, source: str, warmup: int = 0, warnings: list[str] | None = None) -> str:
    s = analysis.summary
    out = []
    if not s.get("steps"):
        return f"{source}: no steps recorded\n"
    tps = f", {s['tokens_per_s']:,.0f} tokens/s" if "tokens_per_s" in s else ""
    out.append(f"{source}: {s['ranks']} ranks, {s['steps']} steps ({s['first_step']}-{s['last_step']}), "
               f"median step {_ms(s['step_time_s'])} ms{tps}\n")
    if analysis.matrix is not None:
        out.append(rank_table(analysis.matrix, warmup))
    for w in warnings or []:
        out.append(f"warning: {w}\n")
    if not analysis.findings:
        out.append("Findings: none (no straggler, no hang detected).\n")
        return "\n".join(out)
    out.append(f"Findings ({len(analysis.findings)}):")
    for f in analysis.findings:
        who = f"rank {', '.join(map(str, f.ranks))}" if f.ranks else "job-wide"
        where = f"  phase {f.phase}" if f.phase else ""
        steps = f"  steps {f.first_step}-{f.last_step}" if f.first_step is not None else ""
        out.append(f"  [{f.severity}] {f.kind}  {who}{where}{steps}  slowdown {f.slowdown:.1%}")
        out.append(textwrap.fill(f.evidence, width=100, initial_indent="      ", subsequent_indent="      "))
    out.append(f"\nEstimated slowdown from all findings together: {s['slowdown']:.1%} of the run's step time.\n")
    return "\n".join(out)

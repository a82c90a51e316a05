"""Rendering an analysis for people: a per-rank, per-phase table and the findings.

Names are kept apart: the header's *step time* is what the job pays per step (data wait
included, median over ranks and steps); the table's *in step* is the step's own wall time; phase
columns are phase *compute* (time blocked in collectives removed), and *blocked* is the time in
collectives, whichever phase it fell in.
"""

from __future__ import annotations

import textwrap
from typing import Any

import numpy as np

from ..steptable.matrix import StepMatrix, nanmedian
from .detectors import Analysis, share_of_run
from .detectors.utilization import PARTS
from .findings import Finding
from .traces.waits import breakdown_text, waits_text

MAX_RANK_ROWS = 16


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _ms(x: float) -> str:
    return "-" if not np.isfinite(x) else f"{x * 1e3:.1f}"


def rank_table(m: StepMatrix, warmup: int) -> str:
    """Median milliseconds per step for each rank: data wait, in-step wall time, each phase's
    compute, time blocked in collectives, total compute (after warm-up)."""
    live = slice(min(warmup, max(m.n_steps - 1, 0)), None)
    cols: list[tuple[str, np.ndarray]] = []
    if "data" in m.phases:
        cols.append(("data", m.phases["data"]))
    cols.append(("in step", m.duration))
    cols += [(p, m.phase_compute[p]) for p in m.phases if p != "data"]
    if m.comm is not None:
        cols += [("blocked", m.comm), ("compute", m.compute)]
    meds = {name: nanmedian(arr[:, live], axis=1) for name, arr in cols}
    steps = np.isfinite(m.duration).sum(axis=1)
    rows = list(range(m.n_ranks))
    note = ""
    if len(rows) > MAX_RANK_ROWS:
        key = meds["compute"] if "compute" in meds else meds["in step"]
        top = np.argsort(-np.nan_to_num(key, nan=-np.inf))[: MAX_RANK_ROWS - 1]
        rows = sorted(int(i) for i in top)
        note = f"  ({m.n_ranks - len(rows)} more ranks not shown; the {len(rows)} with most compute are)\n"
    widths = [max(len(name), 7) for name, _ in cols]
    head = "  rank  steps " + " ".join(f"{name:>{w}}" for (name, _), w in zip(cols, widths))
    lines = ["Per rank, median ms per step" + (f" (after {warmup} warm-up steps)" if warmup else "") + ":", head]
    for i in rows:
        cells = " ".join(f"{_ms(meds[name][i]):>{w}}" for (name, _), w in zip(cols, widths))
        lines.append(f"  {int(m.ranks[i]):>4}  {int(steps[i]):>5} {cells}")
    legend = "  in step: the step's own wall time; phases: compute, time blocked in collectives removed"
    if m.comm is not None:
        legend += "; blocked: time in collectives; compute: busy time, not blocked (what a straggler has more of)"
    if "data" in m.phases:
        legend += "; data: wait for input before the step"
    lines.append(textwrap.fill(legend, width=100, subsequent_indent="  "))
    return "\n".join(lines) + "\n" + note


def online_section(online: list[dict], offline: list[Finding]) -> str:
    """What online detection said during the run, beside the offline findings, and where they differ."""
    lines = [f"Online detection during the run ({_n(len(online), 'finding')}, marked [online]):"]
    for d in online:
        who = f"rank {', '.join(map(str, d['ranks']))}" if d.get("ranks") else "job-wide"
        where = f"  phase {d['phase']}" if d.get("phase") else ""
        block = f", blocks of {d['block_steps']} steps" if d.get("block_steps") else ""
        verdict = "confirmed offline" if d["confirmed_offline"] else "NOT found offline"
        lines.append(
            f"  [online] [{d.get('severity')}] {d.get('kind')}  {who}{where}  steps "
            f"{d.get('first_step')}-{d.get('last_step')}{block}: {verdict}"
        )
        if not d["confirmed_offline"]:
            lines.append(
                textwrap.fill(d["why_not_offline"], width=100, initial_indent="      ", subsequent_indent="      ")
            )
    keys = {(d.get("kind"), tuple(d.get("ranks") or ()), d.get("phase")) for d in online}
    only = [f for f in offline if f.severity != "info" and (f.kind, tuple(f.ranks), f.phase) not in keys]
    if only:
        lines.append(
            textwrap.fill(
                f"Found offline only: {', '.join(sorted({f.kind for f in only}))}. Online detection reports a "
                "finding once, from warning up, after enough blocks of steps; it does not look for moving "
                "imbalance, and a finding of the last blocks may come after the job ended.",
                width=100,
                initial_indent="  ",
                subsequent_indent="  ",
            )
        )
    return "\n".join(lines) + "\n"


def collecting_line(c: dict[str, Any]) -> str:
    """What the report and the page say while collecting."""
    w = c.get("window_s") or 0.0
    more = (c["need"] - c["have"]) * w
    return (
        f"collecting: {c['have']} of {c['need']} windows of {w:g} s with steps (about {more:.0f} s more); "
        "no straggler, stall or regression can be told yet"
    )


def render(
    analysis: Analysis,
    source: str,
    warmup: int = 0,
    warnings: list[str] | None = None,
    online: list[dict] | None = None,
) -> str:
    s = analysis.summary
    out = []
    if not s.get("steps"):
        return f"{source}: no steps recorded\n"
    tps = f", {s['tokens_per_s']:,.0f} tokens/s" if "tokens_per_s" in s else ""
    if s.get("window_s"):  # a live job read from Prometheus: a column is a window of several steps
        span = (
            f"{_n(s['steps'], 'window')} of {s['window_s']:g} s with steps (steps {s['first_step']}-{s['last_step']})"
        )
    else:
        span = f"{_n(s['steps'], 'step')} ({s['first_step']}-{s['last_step']})"
    out.append(
        f"{source}: {_n(s['ranks'], 'rank')}, {span}, median step time {_ms(s['step_time_s'])} ms "
        f"(data wait included){tps}\n"
    )
    up = s.get("uptime") or {}
    if up.get("restarts"):
        out.append(
            f"Uptime {up['wall_s'] / 60:.1f} min, of which {up['lost_s'] / 60:.1f} min lost in "
            f"{_n(up['restarts'], 'restart')} or outages (before steps "
            f"{', '.join(map(str, up['restarted_at_steps']))}; goodput 'lost')\n"
        )
    if analysis.matrix is not None:
        out.append(rank_table(analysis.matrix, warmup))
    for w in warnings or []:
        out.append(f"warning: {w}\n")
    failed = s.get("cause_failures")
    if failed:
        out.append(
            f"warning: the causes of {failed['findings']} finding(s) could not be worked out ({failed['first']})\n"
        )
    busy = busy_line(s.get("utilization"))
    if busy:
        out.append(busy)
    advice = advice_line(s.get("checkpoint_advice"))
    if advice:
        out.append(advice)
    tb = s.get("trace_breakdown") or {}
    if tb.get("ranks"):
        out.append("The traces broken down (the definitions follow HTA's: docs/captures.md):")
        out.extend(breakdown_text(part) for part in tb["ranks"].values())
        out.extend(waits_text(tb.get("waits") or {}))
        out.append("")
    if s.get("collecting"):
        out.append(f"Findings: none yet, {collecting_line(s['collecting'])}.\n")
        if not analysis.findings:
            return "\n".join(out)
    if not analysis.findings:
        out.append("Findings: none (no straggler, no hang detected).\n")
        if online:
            out.append(online_section(online, analysis.findings))
        return "\n".join(out)
    out.append(f"Findings ({len(analysis.findings)}):")
    for f in analysis.findings:
        who = f"rank {', '.join(map(str, f.ranks))}" if f.ranks else "job-wide"
        where = f"  phase {f.phase}" if f.phase else ""
        steps = f"  steps {f.first_step}-{f.last_step}" if f.first_step is not None else ""
        share = f" ({share_of_run(analysis.matrix, f):.1%} of the run)" if analysis.matrix is not None else ""
        out.append(f"  [{f.severity}] {f.kind}  {who}{where}{steps}  slowdown {f.slowdown:.1%} of those steps{share}")
        out.append(textwrap.fill(f.evidence, width=100, initial_indent="      ", subsequent_indent="      "))
        for i, c in enumerate(f.causes):
            out.append(
                textwrap.fill(
                    f"{c['kind']}: {c['evidence']}",
                    width=100,
                    initial_indent=f"      {'cause' if i == 0 else 'also '}  ",
                    subsequent_indent="             ",
                )
            )
        if f.trace_ids:
            more = f" (and {len(f.trace_ids) - 1} more in --json)" if len(f.trace_ids) > 1 else ""
            out.append(f"      trace   the worst traced step's trace: {f.trace_ids[0]}{more}")
        if f.capture is not None:
            roles = f.capture.get("roles") or {}
            who = " against ".join(f"rank {r} ({roles.get(str(r), '?')})" for r in f.capture.get("ranks", []))
            steps = f.capture.get("steps") or ["?", "?"]
            out.append(f"      capture {f.capture.get('dir')}: {who}, steps {steps[0]}-{steps[1]}")
            base = f.capture.get("baseline")
            if base:
                out.append(
                    f"      against the run's baseline capture {base.get('dir')}: rank {base.get('rank')}, steps "
                    f"{base['steps'][0]}-{base['steps'][1]} (the diff: its time per step now against then)"
                )
            for row in (f.trace_diff or [])[:5]:
                ratio = f"{row['ratio']:.2f}x" if row.get("ratio") is not None else "only here"
                out.append(
                    f"        {row['kind']:<10} {row['name'][:60]:<60} {row['flagged_ms_per_step']:8.2f} ms/step "
                    f"against {row['peer_ms_per_step']:.2f} ({ratio})"
                )
            bd = f.capture.get("breakdown") or {}
            for part in (bd.get("ranks") or {}).values():
                out.append("        " + breakdown_text(part, brief=True))
            if base and base.get("breakdown"):
                out.append("        baseline: " + breakdown_text(base["breakdown"], brief=True))
            out.extend("      " + line for line in waits_text(bd.get("waits") or {}))
            if not f.trace_diff:
                if f.capture.get("missing"):
                    why = f"traces missing for ranks {f.capture['missing']}"
                elif "peer" not in roles.values() and not base:
                    why = "no baseline capture to compare with"
                else:
                    why = "no op costs the flagged rank more"
                out.append(f"        (no diff: {why})")
    if online:
        out.append("\n" + online_section(online, analysis.findings).rstrip())
    gaps = [f for f in analysis.findings if f.kind == "low_utilization"]
    left_out = ""
    if gaps:
        share = (
            f"'s {sum(share_of_run(analysis.matrix, f) for f in gaps):.1%} of the run"
            if analysis.matrix is not None
            else ""
        )
        left_out = (
            f" Not in it: low_utilization{share}, the share of the largest idle part, which the job spends as "
            "it is built (removing that part would save at most that); no culprit's healing gives it back."
        )
    if any(f.kind == "slow_checkpoint" and not f.ranks for f in analysis.findings):
        left_out += (
            " Not in it either: the job-wide slow_checkpoint, what a better checkpoint interval would give "
            "back (a choice, not a culprit)."
        )
    out.append(
        f"\nEstimated slowdown from all findings together: {s['slowdown']:.1%} of the whole run's step time "
        f"(steps {s['first_step']}-{s['last_step']}; each finding above is over its own steps, and its "
        f"share of the run in brackets).{left_out}\n"
    )
    return "\n".join(out)


def advice_line(a: dict[str, Any] | None) -> str | None:
    """``summary.checkpoint_advice`` as the report's lines."""
    if not a:
        return None
    now = (
        f"every {a['interval_s']:.0f} s now (lost to checkpoints and redone work: {a['waste_now']:.1%}); "
        if "interval_s" in a
        else ""
    )
    steps = f" (about {a['recommended_steps']} steps)" if "recommended_steps" in a else ""
    gain = f", {a['goodput_gain']:.1%} of the time back" if "goodput_gain" in a else ""
    return (
        f"Checkpoints: {a['saves']} save(s), {a['checkpoint_s']:.2f} s blocking each; {now}recommended every "
        f"{a['daly_s']:.0f} s{steps} (Daly; Young {a['young_s']:.0f} s; MTBF {a['mtbf_h']:.1f} h from "
        f"{a['mtbf_from']}): {a['waste_recommended']:.1%} lost{gain}\n"
    )


def busy_line(u: dict | None) -> str:
    """The run's busy share after warm-up, its band and its idle parts (the summary's utilization)."""
    if not u:
        return ""
    band = {
        "ok": f"at or above the {u['bound']:.0%} bound",
        "info": f"info: under the {u['bound']:.0%} bound, above the {u['warn_bound']:.0%} warning bound",
        "warning": f"under the {u['warn_bound']:.0%} warning bound",
        "critical": f"under half the {u['warn_bound']:.0%} warning bound",
    }[u["band"]]
    idle = ", ".join(f"{PARTS[k].split(' (')[0]} {v:.0%}" for k, v in list(u.get("idle", {}).items())[:4] if v >= 0.005)
    return (
        textwrap.fill(
            f"Busy: the ranks compute {u['busy_fraction']:.0%} of the job's time after warm-up ({band})"
            + (f"; idle: {idle}." if idle else "."),
            width=100,
            subsequent_indent="  ",
        )
        + "\n"
    )

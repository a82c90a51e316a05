"""Analysis over windows of steps: ``--steps A:B``, ``--last N``, and runs too long to hold at once.

A run directory whose steps table would exceed ``WINDOW_ROWS`` rows (ranks x steps; about 3.5 GiB
of peak memory at 1,024 ranks) is analyzed in consecutive windows of whole steps, each read on its
own from the segments (their ``step`` statistics skip the rest), and the findings are merged: the
same kind, ranks and phase in adjacent windows (the next one beginning within ``tolerance`` steps
of where the last ended) are one finding from the first's first step to the last's last step,
with its what-if weighted by the steps each covered. Windows after the first have no warm-up.
Heartbeats (hangs, lost ranks) are analyzed with the last window, where the run ends.
"""

from __future__ import annotations

import math
import os
from dataclasses import replace
from typing import Any, Callable

import numpy as np

from . import coarse
from .findings import SEVERITIES, Finding, tally

WINDOW_ROWS = 12_000_000


def parse_steps(text: str) -> tuple[int, int]:
    """``--steps A:B`` of every command (inclusive; either side may be empty) -> (first, last).

    The one parser: analyze, export and the others say the same for the same text.

    >>> parse_steps("100:200"), parse_steps(":50"), parse_steps("7:7")
    ((100, 200), (0, 50), (7, 7))
    """
    a, sep, b = text.partition(":")
    if not sep:
        raise ValueError(
            f"--steps {text!r}; accepted: A:B, A: or :B (step numbers, inclusive; one step: {text}:{text})"
        )
    try:
        first = int(a) if a.strip() else 0
        last = int(b) if b.strip() else 2**62
    except ValueError:
        raise ValueError(f"--steps {text!r}: not step numbers; accepted: A:B, A: or :B") from None
    if first < 0 or last < 0:
        raise ValueError(f"--steps {text!r}: step numbers are 0 or more; accepted: 0 <= A <= B")
    if last < first:
        raise ValueError(f"--steps {text!r}: the end is before the start; accepted: 0 <= A <= B")
    return first, last


def plan(first: int, last: int, ranks: int, rows: int = WINDOW_ROWS) -> list[tuple[int, int]]:
    """Consecutive windows of whole steps covering first..last, each at most ``rows`` rows."""
    per = max(1, rows // max(ranks, 1))
    n = last - first + 1
    count = max(1, math.ceil(n / per))
    size = math.ceil(n / count)
    return [(a, min(last, a + size - 1)) for a in range(first, last + 1, size)]


def analyze_windows(
    windows: list[tuple[int, int]],
    run_window: Callable[[tuple[int, int], bool, bool], Any],
    tolerance: int | None = None,
) -> Any:
    """``run_window((a, b), first, last)`` -> an Analysis of that window (``first``: the run's first
    window, with warm-up; ``last``: the one that gets the heartbeats). Returns one Analysis."""
    from .detectors import Analysis

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


def analyze_path(
    path: str,
    hang_after: float | None = None,
    *,
    busy_bound: float = 0.8,
    steps: tuple[int, int] | None = None,
    last: int | None = None,
    window_rows: int | None = None,
    busy_warn_bound: float | None = None,
    base: str | None = None,
    failure_rate_per_hour: float | None = None,
    raw: bool = False,
):
    """Open and analyze ``path`` (any input the loader reads), only ``steps`` or the ``last`` N steps
    when given; a run directory of more than ``coarse.COARSE_ROWS`` rows analyzed whole is read from
    its blocks of steps (:mod:`.coarse`; ``raw``: from its rows all the same); one too long to hold
    at once is analyzed in windows of whole steps and the findings merged. ``busy_warn_bound``: default 0.6, or ``busy_bound`` when lower. ``base``: a
    baseline run (any input the loader reads) whose utilization this run's is held against (each
    window against the whole base). Returns the :class:`~.detectors.Analysis`, the
    :class:`~.load.RunInput` of the last window read, and a line saying how the run was split (None
    when it was read whole)."""
    from ..store.segments import step_range
    from .captures import with_captures
    from .detectors import CheckpointParams, StragglerParams, UtilizationParams, analyze
    from .load import KINETO_TRACES, open_input
    from .tracelinks import with_trace_ids

    window_rows = window_rows or WINDOW_ROWS
    warn = min(UtilizationParams.warn_bound, busy_bound) if busy_warn_bound is None else busy_warn_bound
    util = UtilizationParams(bound=busy_bound, warn_bound=warn)
    cp = (
        CheckpointParams()
        if failure_rate_per_hour is None
        else CheckpointParams(failure_rate_per_hour=failure_rate_per_hour)
    )
    against = {}
    if base is not None:
        against = {"base": open_input(base).table, "base_name": f"the base run {base}"}
    if os.path.isdir(path) and not raw and steps is None and last is None:
        got = coarse_analysis(path, hang_after, util, cp, against)  # a long run: from its blocks of steps
        if got is not None:
            return got[:3]
    span = step_range(path) if os.path.isdir(path) else None
    run_last = span[1] if span is not None else None  # the run's last step, whatever was asked for
    if span is not None and steps is not None:
        span = (max(span[0], steps[0]), min(span[1], steps[1]), span[2])
    if span is not None and last is not None:
        span = (max(span[0], span[1] - last + 1), span[1], span[2])
    windows = plan(*span, rows=window_rows) if span is not None and span[0] <= span[1] else []
    if len(windows) > 1:  # too long to hold at once: windows, findings merged
        opened = {}

        def one(w: tuple[int, int], first: bool, final: bool):
            opened.pop("run", None)  # the last window's table goes before this one is read
            run = opened["run"] = open_input(path, w)
            return analyze(
                run.table,
                run.progress if final else None,
                run.world_size,
                hang_after,
                straggler=None if first else StragglerParams(warmup_steps=0),
                utilization=util,
                checkpoint=cp,
                **against,
            )

        result = analyze_windows(windows, one)
        last_run = opened["run"]
        result.findings = with_trace_ids(
            result.findings, last_run.meta, last_run.table, lambda a, b: open_input(path, (a, b)).table
        )
        result.findings = with_captures(result.findings, path, last_run.warnings, run_last)
        note = (
            f"telemetry analyze: {span[2]:,} ranks x {span[1] - span[0] + 1:,} steps analyzed in {len(windows)} "
            f"windows of {windows[0][1] - windows[0][0] + 1:,} steps (at most {window_rows:,} rows at once)"
        )
        return result, opened["run"], note
    if steps is None and last is None:
        window = None  # everything, format 1 lines included
    elif span is not None:
        window = (span[0], span[1])
    else:  # a table (or format 1 lines only): its steps are known once read
        whole = open_input(path).table
        hi = int(whole["step"].max()) if len(whole) else 0
        window = steps or (0, hi)
        if last is not None:
            window = (max(window[0], min(window[1], hi) - last + 1), window[1])
    run = open_input(path, window)
    result = analyze(
        run.table, run.progress, run.world_size, hang_after, utilization=util, ops=run.ops, checkpoint=cp, **against
    )
    result.findings = with_trace_ids(result.findings, run.meta, run.table)
    if os.path.isdir(path):
        result.findings = with_captures(result.findings, path, run.warnings, run_last)
    if run.kind == KINETO_TRACES:
        result.summary["trace_breakdown"] = trace_breakdown(path, run.ranks, run.warnings)
    return result, run, None


def coarse_analysis(path: str, hang_after=None, util=None, cp=None, against: dict | None = None):
    """:func:`analyze_path` of a run directory of more than ``coarse.COARSE_ROWS`` rows from its
    blocks (:mod:`.coarse`): (Analysis, RunInput without rows, the note, the block table the
    analysis read: :func:`.coarse.block_table`); None for a shorter one, one that is no run
    directory, or one whose segments were written without their blocks' aggregates. ``util``,
    ``cp``: UtilizationParams and CheckpointParams (None: the defaults). The run's kept summary
    (:mod:`.runsummary`, written by ``telemetry compact``) stands for the read while it is current:
    its analysis with the default settings, its blocks with any other."""
    from ..store import layout
    from ..store.segments import read_aggregates
    from . import runsummary
    from .captures import with_captures
    from .detectors import CheckpointParams, UtilizationParams

    if not layout.is_run_dir(path):
        return None
    kept = runsummary.read(path)
    defaults = (
        hang_after is None and util in (None, UtilizationParams()) and cp in (None, CheckpointParams()) and not against
    )
    if kept is not None and kept.doc is not None and defaults:
        try:
            return _from_kept(path, kept)
        except (TypeError, KeyError, ValueError, AttributeError):
            kept.doc = None  # JSON that is no kept analysis (edited, another version's): the blocks afresh
    said: list[str] = list(kept.doc.get("read_warnings", [])) if kept is not None and kept.doc else []
    agg = kept.blocks if kept is not None else read_aggregates(path, said, summarize=False, keep=coarse.wanted)
    if agg is None:
        return None
    got = coarse_findings(path, agg, said, hang_after, util, cp, against)
    if got is None:
        return None
    result, run, note, table = got
    result.findings = with_captures(result.findings, path, run.warnings, _last_step(agg))
    return result, run, note, table


def coarse_findings(path: str, agg: Any, said: list[str], hang_after=None, util=None, cp=None, against=None):
    """:func:`coarse_analysis` of the aggregates ``agg`` (as :func:`read_aggregates` gave them, with
    ``keep=coarse.wanted``; ``said``: what that read warned) without the captures matched: (Analysis,
    RunInput without rows, the note, the block table); None for a run of ``coarse.COARSE_ROWS`` rows
    or fewer."""
    from .detectors import CheckpointParams, UtilizationParams
    from .load import open_input
    from .tracelinks import with_trace_ids

    if not agg.num_rows:
        return None
    first, last = int(agg.column("first_step").to_numpy().min()), _last_step(agg)
    ranks = len(np.unique(agg.column("rank").to_numpy()))
    if ranks * (last - first + 1) <= coarse.COARSE_ROWS:
        return None
    run = open_input(path, rows=False)  # meta, heartbeats, online findings, warnings
    run.warnings += said

    def rows_of(w: tuple[int, int]) -> Any:  # a few blocks' rows: no heartbeat or meta read again
        import pandas as pd

        from ..store.segments import read_step_columns
        from .table import columns_to_table

        got = read_step_columns(path, [], w)
        return columns_to_table(got) if got is not None else pd.DataFrame()

    table = coarse.block_table(agg)
    result = coarse.analyze_coarse(
        agg,
        ranks,
        rows_of,
        run.progress,
        run.world_size,
        table=table,
        hang_bound_s=hang_after,
        utilization=util or UtilizationParams(),
        checkpoint=cp or CheckpointParams(),
        **(against or {}),
    )
    result.findings = with_trace_ids(result.findings, run.meta, run.table, lambda a, b: open_input(path, (a, b)).table)
    note = (
        f"telemetry analyze: {ranks:,} ranks x {last - first + 1:,} steps analyzed from the "
        f"{coarse.BLOCK_NOTE} ({agg.num_rows:,} rows); findings with ranks measured again on raw rows "
        "(--raw: every row, in windows)"
    )
    return result, run, note, table


def _last_step(agg: Any) -> int:
    return int(agg.column("last_step").to_numpy().max())


def _from_kept(path: str, kept: Any):
    """:func:`coarse_analysis` from the run's kept summary: its findings and summary as they were
    computed, the captures matched now, the block table made from the kept blocks."""
    from .captures import with_captures
    from .detectors import Analysis
    from .detectors.matrix import from_table
    from .load import open_input
    from .runsummary import DIR, KEPT

    doc = kept.doc
    run = open_input(path, rows=False)
    run.warnings += doc.get("read_warnings", [])
    table = coarse.block_table(kept.blocks)
    findings = [Finding(**d) for d in doc["findings"]]
    summary = dict(doc["summary"])
    if isinstance(summary.get("straggler_score"), dict):  # ranks: JSON's keys are strings
        summary["straggler_score"] = {int(r): v for r, v in summary["straggler_score"].items()}
    result = Analysis(findings, summary, from_table(table) if len(table) else None)
    result.findings = with_captures(result.findings, path, run.warnings, _last_step(kept.blocks))
    note = f"{doc['note']}; {KEPT} {os.path.join(path, DIR)}"
    return result, run, note, table


def trace_breakdown(path: str, ranks: dict[int, dict], warnings: list[str]) -> dict:
    """``summary.trace_breakdown`` of a directory of Kineto traces: each rank's trace broken down
    (:mod:`.tracebreakdown`) and the collectives' wait for late peers across them."""
    from .table import TableError
    from .tracebreakdown import breakdown, summarize

    parts = {}
    for rank, info in sorted(ranks.items()):
        if not info.get("trace"):
            continue
        try:
            parts[rank] = breakdown(os.path.join(path, info["trace"]))
        except (TableError, OSError) as exc:  # a trace that does not read, or no room to spill it
            warnings.append(f"trace breakdown of rank {rank}: {exc}")
    return summarize(parts)

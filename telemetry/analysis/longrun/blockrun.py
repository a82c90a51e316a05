"""A long run analyzed whole from its blocks of steps, and what ``telemetry compact`` keeps of it.

A run directory of more than ``coarse.COARSE_ROWS`` rows is read from its segments' per-rank 64-step
aggregates (:mod:`.coarse`), or, while the run's kept summary (:mod:`.kept`) is current, from the blocks
and findings kept there (the findings only for the default settings). :func:`keep` is what
``telemetry compact`` runs: the analysis from the blocks, then the summary and the picture written.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from ...analysis_options import AnalysisOptions
from ...store import layout
from ...store.segments import read_aggregates
from ..detectors import Analysis, settings
from ..findings import Finding
from ..inputs.load import open_input
from ..traces.captures import with_captures
from ..traces.links import with_trace_ids
from . import coarse, kept, kept_picture


def coarse_analysis(
    path: str, options: AnalysisOptions | None = None, against: dict[str, Any] | None = None
) -> Analysis | None:
    """The Analysis of a run directory of more than ``coarse.COARSE_ROWS`` rows from its blocks, with
    ``input`` (the RunInput without rows), ``note`` and ``blocks`` (the block table it read:
    :func:`.coarse.block_table`) set; None for a shorter one, one that is no run directory, or one whose
    segments were written without their blocks' aggregates. ``against``: a baseline's table
    (``{"base", "base_name"}``). The run's kept summary stands for the read while it is current: its
    analysis with the default settings, its blocks with any other."""
    options = options or AnalysisOptions()
    if not layout.is_run_dir(path):
        return None
    got = kept.read(path)
    if got is not None and got.doc is not None and options.defaults and not against:
        try:
            return _from_kept(path, got)
        except (TypeError, KeyError, ValueError, AttributeError):
            got.doc = None  # JSON that is no kept analysis (edited, another version's): the blocks afresh
    said: list[str] = list(got.doc.get("read_warnings", [])) if got is not None and got.doc else []
    agg = got.blocks if got is not None else read_aggregates(path, said, summarize=False, keep=coarse.wanted)
    if agg is None:
        return None
    result = coarse_findings(path, agg, said, options, against)
    if result is None:
        return None
    result.findings = with_captures(result.findings, path, result.warnings, _last_step(agg))
    return result


def coarse_findings(
    path: str,
    agg: pa.Table,
    said: list[str],
    options: AnalysisOptions | None = None,
    against: dict[str, Any] | None = None,
) -> Analysis | None:
    """:func:`coarse_analysis` of the aggregates ``agg`` (as :func:`read_aggregates` gave them, with
    ``keep=coarse.wanted``; ``said``: what that read warned) without the captures matched; None for a
    run of ``coarse.COARSE_ROWS`` rows or fewer."""
    from ...steptable.table import columns_to_table
    from ...store.segments import read_step_columns

    if not agg.num_rows:
        return None
    first, last = int(agg.column("first_step").to_numpy().min()), _last_step(agg)
    ranks = len(np.unique(agg.column("rank").to_numpy()))
    if ranks * (last - first + 1) <= coarse.COARSE_ROWS:
        return None
    run = open_input(path, rows=False)  # meta, heartbeats, online findings, warnings
    run.warnings += said

    def rows_of(w: tuple[int, int]) -> pd.DataFrame:  # a few blocks' rows: no heartbeat or meta read again
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
        **settings(options or AnalysisOptions()),
        **(against or {}),
    )
    result.findings = with_trace_ids(result.findings, run.meta, run.table, lambda a, b: open_input(path, (a, b)).table)
    result.input, result.blocks = run, table
    result.note = (
        f"telemetry analyze: {ranks:,} ranks x {last - first + 1:,} steps analyzed from the "
        f"{coarse.BLOCK_NOTE} ({agg.num_rows:,} rows); findings with ranks measured again on raw rows "
        "(--raw: every row, in windows)"
    )
    return result


def _last_step(agg: pa.Table) -> int:
    return int(agg.column("last_step").to_numpy().max())


def _from_kept(path: str, got: kept.Kept) -> Analysis:
    """:func:`coarse_analysis` from the run's kept summary: its findings and summary as they were
    computed, the captures matched now, the block table made from the kept blocks."""
    from ...steptable.matrix import from_table

    doc = got.doc or {}
    run = open_input(path, rows=False)
    run.warnings += doc.get("read_warnings", [])
    table = coarse.block_table(got.blocks)
    findings = [Finding(**d) for d in doc["findings"]]
    summary = dict(doc["summary"])
    if isinstance(summary.get("straggler_score"), dict):  # ranks: JSON's keys are strings
        summary["straggler_score"] = {int(r): v for r, v in summary["straggler_score"].items()}
    result = Analysis(findings, summary, from_table(table) if len(table) else None)
    result.findings = with_captures(result.findings, path, run.warnings, _last_step(got.blocks))
    result.input, result.blocks = run, table
    result.note = f"{doc['note']}; {kept.KEPT} {os.path.join(path, kept.DIR)}"
    return result


def keep(path: str) -> str:
    """What ``telemetry compact`` keeps of a long run: its analysis from its blocks (default settings),
    the blocks and the analysis in ``RUN/summary/`` (:func:`.kept.write`), and beyond 256 ranks its
    picture (:mod:`.kept_picture`); returns the line that says what was done (or why nothing was)."""
    fp = kept.fingerprint(path)
    if fp is None:
        return "no summary kept: a rank's live tail is there (a run being written, or one that did not end)"
    if kept.current(path, fp):
        line = f"its analysis already kept in {os.path.join(path, kept.DIR)} (the run unchanged since)"
        return line if kept_picture.current(os.path.join(path, kept.DIR), fp) else f"{line}; {_picture(path, fp, None)}"
    said: list[str] = []
    agg = read_aggregates(path, said, summarize=False, keep=coarse.wanted)
    result = coarse_findings(path, agg, said) if agg is not None else None
    if agg is None or result is None:
        return (
            f"no summary kept: {coarse.COARSE_ROWS:,} rows or fewer (read row by row in seconds), or segments "
            "written without their blocks' aggregates"
        )
    if kept.fingerprint(path) != fp:
        return "no summary kept: the run directory changed while it was analyzed"
    where = kept.write(path, fp, agg, {"note": result.note, "read_warnings": said, **result.to_json()})
    return f"kept its analysis from {agg.num_rows:,} blocks in {where}; {_picture(path, fp, result)}"


def _picture(path: str, fp: str, result: Analysis | None) -> str:
    """Keep the run's picture of the series its blocks' analysis (``result``; read from the kept summary
    when None) draws; what was done."""
    if result is None:
        result = coarse_analysis(path)
        if result is None:
            return "no picture kept: the run is not read from its blocks"
    m, s = result.matrix, result.summary
    if m is None:
        return "no picture kept: the run is not read from its blocks"
    try:
        return kept_picture.write(
            path,
            os.path.join(path, kept.DIR),
            fp,
            list(kept_picture.series_of(m)),
            m.ranks,
            (s["first_step"], s["last_step"]),
        )
    except (OSError, ValueError, pa.ArrowException) as exc:
        return f"no picture kept: {exc}"

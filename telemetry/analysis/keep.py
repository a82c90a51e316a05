"""What ``telemetry compact`` keeps of a long run in ``RUN/summary/`` once every rank is compacted and
none is being written (runsummary.py reads it back): its analysis from its blocks (the blocks and the
findings) and, beyond 256 ranks, its picture step by step (picture.py).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..store import layout
from ..store.segments import read_aggregates
from . import coarse, picture, runsummary
from .windows import coarse_analysis, coarse_findings


def write(path: str) -> str:
    """Analyze a long run from its blocks (default settings) and keep the blocks and the analysis in
    ``RUN/summary/``; returns the line that says what was done (or why nothing was)."""
    fp = runsummary.fingerprint(path)
    if fp is None:
        return "no summary kept: a rank's live tail is there (a run being written, or one that did not end)"
    if runsummary.current(path, fp):
        said = f"its analysis already kept in {os.path.join(path, runsummary.DIR)} (the run unchanged since)"
        return (
            said if picture.current(os.path.join(path, runsummary.DIR), fp) else f"{said}; {_picture(path, fp, None)}"
        )
    said: list[str] = []
    agg = read_aggregates(path, said, summarize=False, keep=coarse.wanted)
    got = coarse_findings(path, agg, said) if agg is not None else None
    if got is None:
        return (
            f"no summary kept: {coarse.COARSE_ROWS:,} rows or fewer (read row by row in seconds), or segments "
            "written without their blocks' aggregates"
        )
    result, run, note, _ = got
    if runsummary.fingerprint(path) != fp:
        return "no summary kept: the run directory changed while it was analyzed"
    where = os.path.join(path, runsummary.DIR)
    os.makedirs(where, exist_ok=True)
    blocks = agg.sort_by([("block", "ascending"), ("rank", "ascending")])  # block_table's order: read, not sorted
    blocks = blocks.replace_schema_metadata({**(agg.schema.metadata or {}), runsummary.FP_KEY: fp.encode()})
    layout.write_atomic(
        os.path.join(where, runsummary.BLOCKS),
        lambda f: pq.write_table(blocks, f, compression="zstd", row_group_size=1 << 20),
    )
    doc = {"format": runsummary.FORMAT, "fingerprint": fp, "note": note, "read_warnings": said, **result.to_json()}
    body = json.dumps(doc).encode()  # keys in the findings' own order: the JSON analyze prints is the same
    layout.write_atomic(os.path.join(where, runsummary.ANALYSIS), lambda f: f.write(body))
    return f"kept its analysis from {agg.num_rows:,} blocks in {where}; {_picture(path, fp, result)}"


def _picture(path: str, fp: str, result: Any) -> str:
    """Keep the run's picture (picture.py) of the series its blocks' analysis (``result``; read from the
    kept summary when None) draws; what was done."""
    if result is None:
        got = coarse_analysis(path)
        if got is None:
            return "no picture kept: the run is not read from its blocks"
        result = got[0]
    m, s = result.matrix, result.summary
    try:
        return picture.write(
            path,
            os.path.join(path, runsummary.DIR),
            fp,
            list(picture.series_of(m)),
            m.ranks,
            (s["first_step"], s["last_step"]),
        )
    except (OSError, ValueError, pa.ArrowException) as exc:
        return f"no picture kept: {exc}"

"""What ``telemetry compact`` keeps of a long run in ``RUN/summary/``, written and read here: its
analysis from its blocks, what ``telemetry analyze`` and the dashboard would compute, read instead of
every rank's files.

:func:`write` (called by :func:`.blockrun.keep`, for a run of more than ``coarse.COARSE_ROWS`` rows once
every rank is compacted) keeps ``blocks.parquet`` (the aggregates' columns :func:`.coarse.block_table`
reads) and ``analysis.json`` (findings, summary, warnings, the line saying how it was analyzed). The
rule: both carry the run's :func:`fingerprint` and :func:`read` uses them only while it is the run's;
the findings stand for the default settings only (other settings analyze the kept blocks afresh).
Beside them, for many ranks: :mod:`.kept_picture`. More: docs/runs.md, "A long run's analysis, kept".
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ...store import layout

DIR = "summary"
BLOCKS = "blocks.parquet"
ANALYSIS = "analysis.json"
FORMAT = 1
KEPT = "kept by telemetry compact in"  # the note's words for an analysis read from the summary
FP_KEY = b"telemetry.fingerprint"


def fingerprint(path: str) -> str | None:
    """The run directory's state as a reader sees it: a hash over every name, size and modification time
    (ns) in ``ranks/`` (the ranks' lock files aside) and ``meta.json``'s; None when a rank's live tail is
    there (a run being written, or one that stopped before sealing it: nothing to keep)."""
    h = hashlib.sha256()
    entries = []
    try:
        with os.scandir(os.path.join(path, layout.RANKS_DIR)) as it:
            for e in it:
                if e.name.endswith(".lock"):
                    continue  # who holds a rank (rewritten by every claim, telemetry compact's too): no data
                st = e.stat()
                entries.append((e.name, st.st_size, st.st_mtime_ns))
    except FileNotFoundError:
        return None
    if any(".tail-" in name for name, _, _ in entries):
        return None
    try:
        st = os.stat(os.path.join(path, layout.META))
        entries.append((layout.META, st.st_size, st.st_mtime_ns))
    except FileNotFoundError:
        pass
    for name, size, mtime in sorted(entries):
        h.update(f"{name}\0{size}\0{mtime}\n".encode())
    return h.hexdigest()


@dataclass
class Kept:
    """What :func:`read` found: the blocks (an Arrow table, as :func:`read_aggregates` gives them with
    ``keep=coarse.wanted``) and the analysis document (None when only the blocks are current)."""

    blocks: pa.Table
    doc: dict[str, Any] | None


def read(path: str) -> Kept | None:
    """The run's kept blocks and analysis while they are the run's (the fingerprints agree); None when
    there are none, they are stale, or they do not read (a damaged file is the run's files read again)."""
    where = os.path.join(path, DIR)
    if not os.path.exists(os.path.join(where, BLOCKS)):
        return None
    fp = fingerprint(path)
    if fp is None:
        return None
    try:
        pf = pq.ParquetFile(os.path.join(where, BLOCKS))
        if not _of_run(pf.schema_arrow, fp):
            return None
        blocks = pf.read(use_threads=True)
    except (OSError, ValueError, pa.ArrowException):
        return None
    return Kept(blocks, _doc(where, fp))


def _of_run(schema: pa.Schema, fp: str) -> bool:
    """Whether the kept blocks (their schema) are of the run as it is (``fp``)."""
    return (schema.metadata or {}).get(FP_KEY, b"").decode() == fp


def _doc(where: str, fp: str) -> dict[str, Any] | None:
    """The kept analysis when it is of the run as it is (``fp``) and its findings read as this version's;
    None otherwise (missing, cut, stale, another version's)."""
    from ..findings import Finding

    try:
        with open(os.path.join(where, ANALYSIS), encoding="utf-8") as f:
            doc = json.load(f)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("fingerprint") != fp:
            return None
        [Finding(**d) for d in doc["findings"]]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    return doc


def current(path: str, fp: str) -> bool:
    """Whether the kept summary is of the run as it is (``fp``), its blocks' rows not read."""
    where = os.path.join(path, DIR)
    try:
        if not _of_run(pq.read_schema(os.path.join(where, BLOCKS)), fp):
            return False
    except (OSError, ValueError, pa.ArrowException):
        return False
    return _doc(where, fp) is not None


def write(path: str, fp: str, agg: pa.Table, doc: dict[str, Any]) -> str:
    """Keep the blocks ``agg`` (as :func:`read_aggregates` gave them with ``keep=coarse.wanted``) and the
    analysis document ``doc`` (the findings JSON, the note, the read's warnings) of the run as it is
    (``fp``) in ``RUN/summary/``; returns that directory."""
    where = os.path.join(path, DIR)
    os.makedirs(where, exist_ok=True)
    blocks = agg.sort_by([("block", "ascending"), ("rank", "ascending")])  # block_table's order: read, not sorted
    blocks = blocks.replace_schema_metadata({**(agg.schema.metadata or {}), FP_KEY: fp.encode()})
    layout.write_atomic(
        os.path.join(where, BLOCKS),
        lambda f: pq.write_table(blocks, f, compression="zstd", row_group_size=1 << 20),
    )
    body = json.dumps({"format": FORMAT, "fingerprint": fp, **doc}).encode()  # keys in the findings' own order
    layout.write_atomic(os.path.join(where, ANALYSIS), lambda f: f.write(body))
    return where

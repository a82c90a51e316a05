"""Compaction: a rank's sealed segments merged into fewer, larger files, while the job runs.

Each rank's writer (on its sink's own thread, never the training thread) merges every
``COMPACT_SEGMENTS`` segments it sealed (:func:`merge`) into ``rank-N.seg-FIRST-LAST.parquet`` (row groups
of ``ROW_GROUP`` rows with their ``step`` statistics) and ``rank-N.spans-FIRST-LAST.parquet``, the rows in
the order they were written; at shutdown it merges what is left; ``telemetry compact`` runs
:func:`compact_rank`. The rule: a kill at any step of a compaction loses no row and reads none twice
(the steps and why: :func:`merge`); what it left is removed later (:func:`tidy`). More: docs/runs.md,
"Compaction".
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from . import layout
from .catalogue import leftovers, listing, resolve
from .seal import write_aggregates, write_parquet

COMPACT_SEGMENTS = 16  # sealed segments merged into one compacted segment
ROW_GROUP = 2048  # rows per row group of a compacted segment: a sealed segment's size


def _stage(name: str) -> None:
    """Called after each step of a compaction (tests stop a process here); does nothing."""


STAGES = (
    "read",
    "spans written",
    "spans in place",
    "aggregates written",
    "steps written",
    "committed",
    "one deleted",
    "done",
)


def merge(run_dir: str, rank: int, seqs: Sequence[int]) -> str:
    """Merge ``rank``'s sealed segments ``seqs`` (ascending, two or more, none compacted, no
    compacted segment between them) into one; returns its path. Raises OSError or
    ``pa.ArrowException`` (nothing changed then but a temporary file, removed).

    The steps, each of which a kill may end (tests/unit/telemetry/store/test_compact.py kills a
    process at every one of them):

    1. read the segments (nothing written);
    2. write the spans, then the aggregates (:mod:`.aggregates`, made anew from the merged rows), each
       to a temporary file, renamed: compacted spans or aggregates without their step columns are
       ignored by readers, and removed later;
    3. write the step columns to a temporary file (on the disk itself: fsync), rename it: the commit.
       From here every reader takes the compacted segment instead of the files it merged;
    4. delete the merged files (superseded: a reader that still finds some ignores them).

    So a kill before 3 leaves the segments as they were and a temporary file, a kill after it leaves
    superseded files, and the rank's next session (or ``telemetry compact``) removes them. A reader
    that listed a file this step then deleted lists the directory again
    (:func:`telemetry.store.segreads.read_step_columns`)."""
    if len(seqs) < 2 or list(seqs) != sorted(seqs):
        raise ValueError(f"merge: seqs {list(seqs)!r}; accepted: two or more, ascending")
    first, last = seqs[0], seqs[-1]
    steps_files = [layout.segment_path(run_dir, rank, s) for s in seqs]
    spans_files = [p for p in (layout.spans_path(run_dir, rank, s) for s in seqs) if os.path.exists(p)]
    agg_files = [p for p in (layout.agg_path(run_dir, rank, s) for s in seqs) if os.path.exists(p)]
    steps = _concat([pq.read_table(p, page_checksum_verification=True) for p in steps_files])
    spans = _concat([pq.read_table(p, page_checksum_verification=True) for p in spans_files])
    _stage("read")
    if spans is not None:
        path = layout.compacted_path(run_dir, rank, first, last, "spans")
        write_parquet(path, spans, True, ROW_GROUP * 8, lambda: _stage("spans written"))
        _stage("spans in place")
    # the aggregates anew from the merged rows: a block two segments shared is summarized whole
    agg = layout.compacted_path(run_dir, rank, first, last, "agg")
    write_aggregates(agg, steps, True, lambda: _stage("aggregates written"))
    out = layout.compacted_path(run_dir, rank, first, last)
    write_parquet(out, steps, True, ROW_GROUP, lambda: _stage("steps written"))
    _sync_dir(os.path.dirname(out))  # the rename is on the disk before the merged files go
    _stage("committed")
    for i, path in enumerate(steps_files + spans_files + agg_files):
        _remove(path)
        if i == 0:
            _stage("one deleted")
    _stage("done")
    return out


def _concat(tables: list[pa.Table]) -> pa.Table | None:
    if not tables:
        return None
    return pa.concat_tables(tables, promote_options="default").combine_chunks()


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _sync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def tidy(run_dir: str, rank: int, names: list[str] | None = None) -> int:
    """Remove what a stopped compaction or seal of ``rank`` left (:func:`~.catalogue.leftovers`);
    returns how many files. Only for the process that holds the rank (its writer, at start).
    ``names``: the run's ``ranks/`` as listed already (:func:`~.catalogue.listing`)."""
    gone = 0
    for path in leftovers(run_dir, rank, names):
        try:
            os.remove(path)
            gone += 1
        except OSError:
            pass
    return gone


def groups(
    run_dir: str, rank: int, size: int = COMPACT_SEGMENTS, least: int = 2, names: list[str] | None = None
) -> list[list[int]]:
    """``rank``'s sealed segments not yet compacted, as runs of consecutive files (no compacted
    segment or unsealed tail between) cut into groups of at most ``size``; groups of fewer than
    ``least`` left out. ``names``: as :func:`tidy`'s."""
    files, _ = resolve(listing(run_dir, names).get(rank, []))
    out: list[list[int]] = []
    run: list[int] = []
    for seq, kinds in sorted(files.items()):
        if "seg" in kinds and "first" not in kinds:
            run.append(seq)
            continue
        out += _cut(run, size, least)
        run = []
    return out + _cut(run, size, least)


def _cut(run: list[int], size: int, least: int) -> list[list[int]]:
    return [g for g in (run[i : i + size] for i in range(0, len(run), size)) if len(g) >= least]


def compact_rank(
    run_dir: str,
    rank: int,
    size: int = COMPACT_SEGMENTS,
    on_error: Callable | None = None,
    names: list[str] | None = None,
) -> int:
    """Tidy ``rank``'s files and merge its segments in groups of ``size`` (a finished run, or one
    written before compaction: ``telemetry compact``); returns the compacted segments written.
    ``names``: the run's ``ranks/`` as listed before (other ranks' changes since do not matter: only
    this rank's files are read from it; what tidying removes, resolving leaves out too)."""
    tidy(run_dir, rank, names)
    made = 0
    for group in groups(run_dir, rank, size, names=names):
        try:
            merge(run_dir, rank, group)
            made += 1
        except (OSError, pa.ArrowException, ValueError) as exc:
            if on_error is not None:
                on_error(group, exc)
    return made

"""Sealed segments written: a rank's records as Parquet (zstd), the step columns and the spans in
two files, with the aggregates over blocks of steps beside them; and the tails a previous session of
a rank left, sealed when its writer starts again.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from ..pipeline.records import StepRecord
from . import aggregates, layout
from .aggregates import block_aggregates
from .catalogue import rank_files
from .columns import spans_batch, steps_batch
from .tails import read_tail

COMPRESSION = "zstd"


def write_parquet(
    path: str,
    data: pa.RecordBatch | pa.Table,
    durable: bool,
    row_group_size: int | None = None,
    before_rename: Callable[[], None] | None = None,
) -> None:
    """Floats byte-stream-split (their bytes regrouped: zstd then finds the repetition in times and
    readings), the rest dictionary-encoded; statistics only for ``step`` (a window of steps skips
    the segments outside it, and the row groups of a compacted one) and no Arrow schema. Written to
    a temporary name and renamed (``before_rename`` runs between: compaction's tests stop a process
    there)."""
    table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
    floats = [f.name for f in table.schema if pa.types.is_floating(f.type)]
    others = [f.name for f in table.schema if not pa.types.is_floating(f.type)]
    layout.write_atomic(
        path,
        lambda f: pq.write_table(
            table,
            f,
            row_group_size=row_group_size,
            compression=COMPRESSION,
            # pyarrow takes a bool or the columns' names for each of these three (its code has no annotations:
            # the checker reads the bool of their defaults)
            write_statistics=["step"] if "step" in table.schema.names else False,  # pyright: ignore[reportArgumentType]
            use_dictionary=others,  # pyright: ignore[reportArgumentType]
            use_byte_stream_split=floats,  # pyright: ignore[reportArgumentType]
            store_schema=False,
            write_page_checksum=True,  # a flipped byte is an error, not a wrong number
        ),
        durable,
        before_rename,
    )


def write_segment(run_dir: str, rank: int, seq: int, records: Sequence[StepRecord], durable: bool = False) -> None:
    """Seal ``records`` as segment ``seq``: spans first, then the aggregates over blocks of steps, then
    the step columns (whose presence marks the segment complete: a reader takes a segment's steps
    only once they are there). ``durable``: on the disk itself before the rename (at shutdown), not
    only handed to the OS."""
    write_parquet(layout.spans_path(run_dir, rank, seq), spans_batch(records), durable)
    steps = steps_batch(records)
    write_aggregates(layout.agg_path(run_dir, rank, seq), pa.Table.from_batches([steps]), durable)
    write_parquet(layout.segment_path(run_dir, rank, seq), steps, durable)


def write_columns(run_dir: str, rank: int, seq: int, steps: pa.Table) -> None:
    """Segment ``seq`` of ``rank`` from step columns made elsewhere (a simulated run: no spans)."""
    write_aggregates(layout.agg_path(run_dir, rank, seq), steps, False)
    for batch in steps.combine_chunks().to_batches() or [pa.RecordBatch.from_pylist([], schema=steps.schema)]:
        write_parquet(layout.segment_path(run_dir, rank, seq), batch, False)


def write_aggregates(
    path: str, steps: pa.Table, durable: bool, before_rename: Callable[[], None] | None = None
) -> None:
    """The per-(rank, block) aggregates of ``steps`` (:mod:`.aggregates`) to ``path``. Columns that
    cannot be summarized (a bug, a type never seen) leave no file: readers summarize the rows then."""
    try:
        agg = block_aggregates(steps)
    except (ValueError, TypeError, pa.ArrowException):
        return
    if agg is not None:
        aggregates.write_file(path, agg, durable, before_rename)


def recover_tails(run_dir: str, rank: int) -> int:
    """Seal the tails a previous session of ``rank`` left (a crash, a kill); returns the highest
    sequence number in use (0 when none). A tail whose segment exists (sealed, not yet deleted)
    is deleted."""
    files = rank_files(run_dir).get(rank, {})
    for seq, kinds in sorted(files.items()):
        tail = kinds.get("tail")
        if tail is None:
            continue
        if "seg" not in kinds:
            records = read_tail(tail, [])
            if records:
                write_segment(run_dir, rank, seq, records)
        os.remove(tail)
    return max(files, default=0)

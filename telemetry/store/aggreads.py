"""A run's aggregates over blocks of steps (:mod:`.aggregates`), read back: each segment's file, the
blocks two segments share combined; a segment without its aggregates, and a live tail, summarized
from their rows.
"""

from __future__ import annotations

import os
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from . import aggregates
from .aggregates import block_aggregates, combine
from .catalogue import Vanished, again, gone, in_reading_order, rank_files
from .columns import steps_batch
from .segcache import remember
from .segreads import schema_problem, table_column
from .tails import read_tail


def read_aggregates(
    run_dir: str,
    warnings: list[str],
    steps: tuple[int, int] | None = None,
    summarize: bool = True,
    keep: Callable[[str], bool] | None = None,
) -> pa.Table | None:
    """Every rank's aggregates over blocks of steps (:mod:`.aggregates`), the blocks two segments
    share combined; None when the run has no format-2 files. A segment without its aggregates (or
    whose aggregates do not read), and a live tail, are summarized from their rows; with
    ``summarize`` False a segment without them makes it None instead (a run written before them:
    read its rows). ``steps``: only blocks with steps in first..last. ``keep``: the columns to keep
    besides rank, block, n, first_step and last_step (each file's others dropped as it is read)."""
    return again(lambda said, last: _aggregates(run_dir, said, steps, last, summarize, keep), warnings)


_AGG_KEYS = ("rank", "block", "n", "first_step", "last_step")


def _aggregates(
    run_dir: str,
    warnings: list[str],
    steps: tuple[int, int] | None,
    last: bool,
    summarize: bool,
    keep: Callable[[str], bool] | None = None,
) -> pa.Table | None:
    chosen: dict[tuple[str, ...], list[str]] = {}  # the files of a run share a few schemas: chosen once each

    def kept(t: pa.Table) -> pa.Table:
        if keep is None:
            return t
        names = tuple(t.column_names)
        cols = chosen.get(names)
        if cols is None:
            cols = chosen[names] = [c for c in names if c in _AGG_KEYS or keep(c)]
        return t.select(cols)

    files = rank_files(run_dir)
    parts: list[pa.Table] = []
    for rank, seq, kind, path, _ in in_reading_order(run_dir):
        agg = files[rank][seq].get("agg") if kind == "seg" else None
        if agg is None and kind == "seg" and not summarize:
            return None
        if agg is not None:
            try:
                table = aggregates.read_file(agg)
                remember(path, agg, table)
                parts.append(kept(table))
                if len(parts) >= 512:  # thousands of small tables hold far more than their rows: one
                    parts = [pa.concat_tables(parts, promote_options="default").combine_chunks()]
                continue
            except FileNotFoundError as exc:
                if not last and gone(agg, exc):
                    raise Vanished from None
            except (OSError, ValueError, pa.ArrowException) as exc:
                warnings.append(f"{os.path.basename(agg)}: unreadable ({exc}); its segment's rows summarized instead")
        made = _summarize(path, kind, warnings, last)
        if made is not None:
            parts.append(kept(made))
    parts = [p for p in parts if p.num_rows]
    if not parts:
        return None
    table = combine(pa.concat_tables(parts, promote_options="default"))
    if steps is not None:
        first_step, last_step = table.column("first_step").to_numpy(), table.column("last_step").to_numpy()
        table = table.filter(pa.array((last_step >= steps[0]) & (first_step <= steps[1])))
    return table


def _summarize(path: str, kind: str, warnings: list[str], last: bool) -> pa.Table | None:
    """A segment's or a tail's aggregates, from its rows (none were stored, or they do not read)."""
    try:
        if kind == "seg":
            rows = pq.read_table(path, page_checksum_verification=True)
            rows = rows.select([n for n in rows.column_names if table_column(n)])
        else:
            records = read_tail(path, warnings)
            rows = pa.Table.from_batches([steps_batch(records)]) if records else None
    except (OSError, pa.ArrowException) as exc:
        if not last and gone(path, exc):
            raise Vanished from None
        warnings.append(f"{os.path.basename(path)}: unreadable ({exc}); skipped")
        return None
    if rows is None or schema_problem(rows.schema) is not None:
        return None
    return block_aggregates(rows)

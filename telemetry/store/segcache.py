"""What the reads keep of a segment between calls: its footer's schema and first and last step, per
version of the file, and the steps its aggregates said it holds (so that a window of steps opens
only the segments that hold some of them).
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

_FOOTERS: dict[str, tuple[tuple[float, int], tuple[pa.Schema, int | None, int | None]]] = {}
_SCHEMAS: dict[tuple, pa.Schema] = {}  # segments of a run share a few schemas: held once


def footer(path: str) -> tuple[pa.Schema, int | None, int | None]:
    """A segment's schema and first and last step (from its statistics), read from its footer once
    per version of the file (windows of a long run ask again for every window)."""
    st = os.stat(path)
    key = (st.st_mtime, st.st_size)
    hit = _FOOTERS.get(path)
    if hit is not None and hit[0] == key:
        return hit[1]
    meta = pq.read_metadata(path)
    schema = meta.schema.to_arrow_schema()
    schema = _SCHEMAS.setdefault((tuple(schema.names), tuple(str(t) for t in schema.types)), schema)  # one copy each
    lo = hi = None
    if "step" in schema.names and meta.num_row_groups:
        i = schema.names.index("step")
        stats = [meta.row_group(g).column(i).statistics for g in range(meta.num_row_groups)]
        if all(s is not None and s.has_min_max for s in stats):
            lo, hi = int(min(s.min for s in stats)), int(max(s.max for s in stats))
    if len(_FOOTERS) > 1_000_000:
        _FOOTERS.clear()
        _SCHEMAS.clear()
    _FOOTERS[path] = (key, (schema, lo, hi))
    return schema, lo, hi


# segment path -> (its aggregates' path, their (mtime, size), first step, last step): learned when the
# aggregates are read, so that a window of steps opens only the segments that hold some of them
# (reading every segment's footer instead grows with the segments: slow at tens of thousands)
_RANGES: dict[str, tuple[str, tuple[float, int], int, int]] = {}


def remember(seg: str, agg: str, table: pa.Table) -> None:
    if not table.num_rows:
        return
    try:
        st = os.stat(agg)
    except OSError:
        return
    if len(_RANGES) > 1_000_000:
        _RANGES.clear()
    # pyarrow.compute makes its functions at import: the checker does not see them
    lo = int(pc.min(table.column("first_step")).as_py())  # pyright: ignore[reportAttributeAccessIssue]
    hi = int(pc.max(table.column("last_step")).as_py())  # pyright: ignore[reportAttributeAccessIssue]
    _RANGES[seg] = (agg, (st.st_mtime, st.st_size), lo, hi)


def known_outside(seg: str, steps: tuple[int, int]) -> bool:
    """Whether ``seg`` holds no step of ``steps``, as its aggregates said (they are still the same file)."""
    hit = _RANGES.get(seg)
    if hit is None or hit[3] >= steps[0] and hit[2] <= steps[1]:
        return False
    try:
        st = os.stat(hit[0])
    except OSError:
        return False
    return (st.st_mtime, st.st_size) == hit[1]

"""A run's step columns and records, read back from its segments and tails: the steps table's rows
(:func:`read_step_columns`), the records with their spans (:func:`read_records`), the run's first and
last step (:func:`step_range`). A segment whose columns do not make steps-table rows is said and
skipped; a file damaged past its footer is read alone and said.
"""

from __future__ import annotations

import os
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from ..pipeline.records import StepRecord
from .catalogue import Vanished, again, gone, in_reading_order, rank_files
from .columns import records_from_columns, steps_batch
from .segcache import footer, known_outside
from .tails import read_tail


def read_step_columns(
    run_dir: str, warnings: list[str], steps: tuple[int, int] | None = None, ranks: Iterable[int] | None = None
) -> pa.Table | None:
    """Every rank's step columns (no spans, no per-op columns), in reading order; None when the
    run has no format-2 files. The segments are read in one Arrow dataset scan (its threads decode
    in parallel) under the union of their schemas (a column a segment lacks is null there); then
    the tails, whose numbers come after every segment's of their rank. ``steps``: only steps
    first..last (inclusive); segments outside are skipped by their statistics. ``ranks``: only
    these ranks' files are opened."""
    keep = None if ranks is None else frozenset(int(r) for r in ranks)
    return again(lambda said, last: _step_columns(run_dir, said, steps, last, keep), warnings)


def _step_columns(
    run_dir: str,
    warnings: list[str],
    steps: tuple[int, int] | None,
    last: bool = True,
    ranks: frozenset[int] | None = None,
) -> pa.Table | None:
    pieces = [p for p in in_reading_order(run_dir) if ranks is None or p[0] in ranks]
    if not pieces:
        return None
    segs = [p for p in pieces if p[2] == "seg"]
    tables = []
    readable = []
    schemas = []
    for _, _, _, path, _ in segs:
        if steps is not None and known_outside(path, steps):
            continue  # its aggregates said so: not even its footer read
        try:
            schema, lo, hi = footer(path)
        except (OSError, pa.ArrowException) as exc:
            if not last and gone(path, exc):
                raise Vanished from None
            warnings.append(f"{os.path.basename(path)}: unreadable ({exc}); skipped")
            continue
        if steps is not None and lo is not None and hi is not None and (hi < steps[0] or lo > steps[1]):
            continue  # wholly outside the window: not opened again
        problem = schema_problem(schema)
        if problem is not None:
            warnings.append(f"{os.path.basename(path)}: {problem}; its rows skipped")
            continue
        schemas.append(schema)
        readable.append(path)
    if readable:
        schema, readable = _unify(schemas, readable, warnings)
        cols = [n for n in schema.names if table_column(n)]
        try:
            where = None if steps is None else (ds.field("step") >= steps[0]) & (ds.field("step") <= steps[1])
            tables.append(ds.dataset(readable, format=_VERIFIED, schema=schema).to_table(columns=cols, filter=where))
        except (OSError, pa.ArrowException):  # a file damaged past its footer: read one at a time, say which
            tables += [t for t in (_read_one(p, cols, warnings, steps, last) for p in readable) if t is not None]
    for _, _, kind, path, _ in pieces:
        if kind == "tail":
            try:
                records = read_tail(path, warnings)
            except OSError as exc:
                if not last and isinstance(exc, FileNotFoundError):
                    raise Vanished from None  # sealed meanwhile: its segment holds the records
                warnings.append(f"{os.path.basename(path)}: unreadable ({exc}); skipped")
                continue
            if steps is not None:
                records = [r for r in records if steps[0] <= r.step <= steps[1]]
            if records:
                t = pa.Table.from_batches([steps_batch(records)])
                tables.append(t.select([n for n in t.column_names if table_column(n)]))
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return None
    return pa.concat_tables(tables, promote_options="default")


# Pages written with a CRC (write_page_checksum) are checked on every read: a flipped byte in a
# segment is then an unreadable file, said and skipped, never a wrong number.
_VERIFIED = ds.ParquetFileFormat(
    default_fragment_scan_options=ds.ParquetFragmentScanOptions(page_checksum_verification=True)
)


_STEP_TYPES = {
    "rank": pa.types.is_integer,
    "step": pa.types.is_integer,
    "start_s": lambda t: pa.types.is_floating(t) or pa.types.is_integer(t),
    "duration_s": lambda t: pa.types.is_floating(t) or pa.types.is_integer(t),
}


def schema_problem(schema: pa.Schema) -> str | None:
    """What keeps a segment's rows out of the steps table: a required column missing or of the
    wrong type (a file written by something else, or damaged); None when it can be read."""
    for name, ok in _STEP_TYPES.items():
        if name not in schema.names:
            return f"no {name} column"
        if not ok(schema.field(name).type):
            return f"column {name} is {schema.field(name).type}, not a number"
    return None


def _unify(schemas: list[pa.Schema], paths: list[str], warnings: list[str]) -> tuple[pa.Schema, list[str]]:
    """The union of the segments' schemas; a segment whose column types clash with the
    segments before it is left out and said (one Arrow call when none clash)."""
    try:
        return pa.unify_schemas(schemas), paths
    except (pa.ArrowException, ValueError, TypeError):
        pass
    merged, kept = None, []
    for schema, path in zip(schemas, paths):
        try:
            merged = schema if merged is None else pa.unify_schemas([merged, schema])
        except (pa.ArrowException, ValueError, TypeError) as exc:
            warnings.append(
                f"{os.path.basename(path)}: its columns clash with the other segments' ({exc}); its rows skipped"
            )
            continue
        kept.append(path)
    return merged, kept


def table_column(name: str) -> bool:
    """A step column the steps table holds (not what only the store keeps: per-op statistics,
    spans dropped)."""
    return not name.startswith("op.") and name != "spans_dropped"


def _read_one(
    path: str, cols: list[str], warnings: list[str], steps: tuple[int, int] | None, last: bool = True
) -> pa.Table | None:
    try:
        have = set(pq.read_schema(path).names)
        where = None if steps is None else [("step", ">=", steps[0]), ("step", "<=", steps[1])]
        return pq.read_table(
            path, columns=[c for c in cols if c in have], filters=where, page_checksum_verification=True
        )
    except (OSError, pa.ArrowException) as exc:
        if not last and gone(path, exc):
            raise Vanished from None
        warnings.append(f"{os.path.basename(path)}: unreadable ({exc}); skipped")
        return None


def step_range(run_dir: str) -> tuple[int, int, int] | None:
    """(first step, last step, ranks) of a format-2 run from each rank's first and last file
    (segment statistics, or the tail's records); None when it has none. Cheap: two files a rank."""
    lo, hi, ranks = None, None, 0
    for _rank, seqs in rank_files(run_dir).items():
        ranks += 1
        order = sorted(seqs)
        for seq in (order[0], order[-1]):
            kinds = seqs[seq]
            got = None
            if "seg" in kinds:
                try:
                    _, a, b = footer(kinds["seg"])
                    if a is None:  # no statistics (written elsewhere): the step column itself
                        col = pq.read_table(kinds["seg"], columns=["step"]).column("step").to_numpy()
                        a, b = (int(col.min()), int(col.max())) if len(col) else (None, None)
                    got = None if a is None or b is None else (a, b)
                except (OSError, ValueError, pa.ArrowException):
                    got = None
            elif "tail" in kinds:
                try:
                    recs = read_tail(kinds["tail"], [])
                except OSError:
                    recs = []
                got = (min(r.step for r in recs), max(r.step for r in recs)) if recs else None
            if got is not None:
                lo = got[0] if lo is None else min(lo, got[0])
                hi = got[1] if hi is None else max(hi, got[1])
    return None if lo is None or hi is None else (int(lo), int(hi), ranks)


def read_records(
    run_dir: str, warnings: list[str], steps: tuple[int, int] | None = None, ranks: Iterable[int] | None = None
) -> list[dict[str, Any]]:
    """Every rank's records as the store's record dicts, spans included (trace export, the
    dashboard's collectives view): slower than :func:`read_step_columns`, read only when asked.
    ``steps``: only steps first..last (inclusive; a segment wholly outside is not opened);
    ``ranks``: only these ranks' files are opened."""
    keep = None if ranks is None else frozenset(int(r) for r in ranks)
    return again(lambda said, last: _records(run_dir, said, last, steps, keep), warnings)


def _records(
    run_dir: str,
    warnings: list[str],
    last: bool = True,
    steps: tuple[int, int] | None = None,
    ranks: frozenset[int] | None = None,
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    lo, hi = steps if steps is not None else (None, None)
    for rank, _seq, kind, path, spans_file in in_reading_order(run_dir):
        if ranks is not None and rank not in ranks:
            continue
        try:
            if kind == "tail":
                got = [record_dict(r) for r in read_tail(path, warnings)]
            else:
                if steps is not None:
                    if known_outside(path, steps):
                        continue
                    _, first, final = footer(path)
                    if first is not None and final is not None and (final < steps[0] or first > steps[1]):
                        continue  # wholly outside: its rows not read
                table = pq.read_table(path, page_checksum_verification=True)
                spans = pq.read_table(spans_file, page_checksum_verification=True) if spans_file else None
                got = records_from_columns(table, spans)
            out.extend(got if steps is None else [r for r in got if lo <= r["step"] <= hi])
        except (OSError, pa.ArrowException) as exc:
            if not last and (gone(path, exc) or (spans_file is not None and gone(spans_file, exc))):
                raise Vanished from None
            warnings.append(f"{os.path.basename(path)}: unreadable ({exc}); skipped")
    return out


def record_dict(r: StepRecord) -> dict[str, Any]:
    """A record as the store's record dict (the JSON-lines format's shape)."""
    d: dict[str, Any] = {
        "rank": r.rank,
        "step": r.step,
        "start_s": r.start_s,
        "duration_s": r.duration_s,
        "ok": r.ok,
        "phases": r.phases,
        "phase_comm": r.phase_comm,
        "comm_s": r.comm_s,
        "ops": {k: list(v) for k, v in r.ops.items()},
        "tokens": r.tokens,
        "samples": r.samples,
        "scalars": r.scalars,
        "spans": [list(s) for s in r.spans],
    }
    for key in ("device", "mfu", "host_duration_s"):
        if getattr(r, key) is not None:
            d[key] = getattr(r, key)
    if r.comm_groups:
        d["comm_groups"] = {k: list(v) for k, v in r.comm_groups.items()}
    if r.io:
        d["io"] = dict(r.io)
    if r.spans_dropped:
        d["spans_dropped"] = r.spans_dropped
    return d

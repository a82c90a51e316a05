"""Format 2's files: tails (JSON lines) and sealed segments (Parquet), written and read.

Per rank, files are numbered (``SEQ``) in the order they were written; a rank's records are
read in that order, so that for a (rank, step) written twice the later file wins. Tail lines are JSON
(:class:`TailEncoder`: a header, a shape line per new shape of record, and a short array per record
whose numbers are packed float64: exact, NaN included, since a diverged loss is data). Segments are Parquet (zstd), the step columns and the spans in two files.
"""

from __future__ import annotations

import base64
import bisect
import json
import os
import re
from array import array
from typing import Any, Callable, Iterable, Sequence

import pyarrow as pa
import pyarrow.compute
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from ..pipeline.records import OpStats, Span, StepRecord
from . import aggregates, layout
from .aggregates import block_aggregates, combine
from .columns import records_from_columns, spans_batch, steps_batch

TAIL_FORMAT = 2
COMPRESSION = "zstd"


class TailEncoder:
    """Step records -> tail lines. A record's names and shape (its phases, ops, logged names,
    readings, spans' kinds and names) go in a ``{"shape": k, ...}`` line when first seen in this
    tail; the record itself is ``[k, rank, step, ok, spans_dropped, "<its numbers>"]``, the numbers
    packed as float64 and base64-encoded (exact, NaN and infinities included, and no float is
    turned into text: that was most of format 1's cost per record)."""

    def __init__(self) -> None:
        self.shapes: dict[tuple, int] = {}

    def lines(self, r: StepRecord) -> str:
        return "".join(self.parts(r))

    def parts(self, r: StepRecord) -> tuple[str, str]:
        """(the shape line, when this record's shape is new in this tail, else ""; the record's line)."""
        spans = r.spans
        opt = (r.tokens is not None, r.samples is not None, r.mfu is not None, r.host_duration_s is not None)
        key = (
            tuple(r.phases),
            tuple(r.phase_comm),
            tuple(r.ops),
            tuple(r.scalars),
            tuple(r.device) if r.device else None,
            tuple((s.kind, s.name, s.ok, s.group) if s.group else (s.kind, s.name, s.ok) for s in spans),
            opt,
            tuple(r.comm_groups) if r.comm_groups else None,
            tuple(r.io) if r.io else None,
        )
        k = self.shapes.get(key)
        head = ""
        if k is None:
            k = self.shapes[key] = len(self.shapes)
            head = (
                json.dumps(
                    {
                        "shape": k,
                        "phases": key[0],
                        "phase_comm": key[1],
                        "ops": key[2],
                        "scalars": key[3],
                        "device": key[4],
                        "spans": key[5],
                        "opt": opt,
                        "groups": key[7],
                        "io": key[8],
                    }
                )
                + "\n"
            )
        values = [
            r.start_s,
            r.duration_s,
            r.comm_s,
            *r.phases.values(),
            *r.phase_comm.values(),
            *[x for st in r.ops.values() for x in st],
            *r.scalars.values(),
        ]
        if r.device:
            values += r.device.values()
        values += [x for x, has in zip((r.tokens, r.samples, r.mfu, r.host_duration_s), opt) if has]
        for s in spans:
            values += (s.start_s, s.end_s, s.nbytes)
        if r.comm_groups:
            for blocked, nbytes in r.comm_groups.values():
                values += (blocked, nbytes)
        if r.io:
            values += r.io.values()
        try:
            numbers = array("d", values)
        except (TypeError, OverflowError):  # not a float (a bool, None, an int too large): as a float or NaN
            numbers = array("d", [_as_float(x) for x in values])
        packed = base64.b64encode(numbers.tobytes()).decode("ascii")
        return head, f'[{k},{r.rank},{r.step},{"true" if r.ok else "false"},{r.spans_dropped},"{packed}"]\n'


def _as_float(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError, OverflowError):
        return float("nan")


class TailDecoder:
    """Tail lines (parsed) -> step records, with the shapes seen so far in this tail. Every count
    and type is checked: a tail is data from disk, and a bad line is skipped here, not a failure
    of a reader later."""

    def __init__(self) -> None:
        self.shapes: dict[int, dict[str, Any]] = {}

    def feed(self, obj: Any) -> StepRecord | None | bool:
        """A parsed line -> its record; True for a header or shape line; None for a bad line."""
        if isinstance(obj, dict):
            if isinstance(obj.get("shape"), int):
                self.shapes[obj["shape"]] = obj
                return True
            return True if "format" in obj else None
        try:
            k, rank, step, ok, dropped, packed = obj
            shape = self.shapes[k]
            if type(rank) is not int or type(step) is not int or type(dropped) is not int:
                return None
            v = array("d")
            v.frombytes(base64.b64decode(packed, validate=True))
            phases, pcomm, ops, scalars = shape["phases"], shape["phase_comm"], shape["ops"], shape["scalars"]
            device, spans, opt = shape["device"] or (), shape["spans"], shape["opt"]
            groups = shape.get("groups") or ()  # a tail written before groups were kept: none
            io_keys = shape.get("io") or ()  # a tail written before checkpoints were kept: none
            sizes = len(phases) + len(pcomm) + 5 * len(ops) + len(scalars) + len(device) + sum(opt)
            if len(v) != 3 + sizes + 3 * len(spans) + 2 * len(groups) + len(io_keys):
                return None
            i = 3
            ph = dict(zip(phases, v[i : i + len(phases)]))
            i += len(phases)
            pc = dict(zip(pcomm, v[i : i + len(pcomm)]))
            i += len(pcomm)
            op = {}
            for name in ops:
                c, d, bl, nb, bus = v[i : i + 5]
                op[name] = OpStats(int(c), d, bl, int(nb), bus)
                i += 5
            sc = dict(zip(scalars, v[i : i + len(scalars)]))
            i += len(scalars)
            dev = dict(zip(device, v[i : i + len(device)])) if device else None
            i += len(device)
            extra = []
            for has in opt:
                extra.append(v[i] if has else None)
                i += 1 if has else 0
            tokens, samples, mfu, host = extra
            sp = []
            for kind, name, span_ok, *group in spans:  # a collective's group, when it has one
                sp.append(
                    Span(str(kind), str(name), v[i], v[i + 1], bool(span_ok), int(v[i + 2]), *map(str, group[:1]))
                )
                i += 3
            cg = {}
            for g in groups:
                cg[str(g)] = (v[i], int(v[i + 1]))
                i += 2
            io = {str(k): v[i + j] for j, k in enumerate(io_keys)}
            return StepRecord(
                rank,
                step,
                v[0],
                v[1],
                bool(ok),
                ph,
                pc,
                v[2],
                op,
                None if tokens is None else int(tokens),
                None if samples is None else int(samples),
                sc,
                tuple(sp),
                dropped,
                dev,
                mfu,
                host,
                cg or None,
                io or None,
            )
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError):
            return None


def read_tail(path: str, warnings: list[str]) -> list[StepRecord]:
    """A tail's records; a torn last line is skipped and said, a bad line elsewhere counted."""
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    torn = lines.pop()
    name = os.path.basename(path)
    out, bad = [], 0
    decoder = TailDecoder()
    for raw in lines:
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            obj = None
        rec = decoder.feed(obj)
        if rec is None:
            bad += 1
        elif rec is not True:
            out.append(rec)
    if bad:
        warnings.append(f"{name}: {bad} invalid line(s) skipped")
    if torn.strip():
        warnings.append(
            f"{name}: torn last record ({len(torn)} bytes) skipped; the rank probably stopped "
            "while writing (or is writing it now)"
        )
    return out


def write_parquet(
    path: str,
    data: pa.RecordBatch | pa.Table,
    durable: bool,
    row_group_size: int | None = None,
    before_rename: Callable[[], None] | None = None,
) -> None:
    """Floats byte-stream-split (their bytes regrouped: zstd then finds the repetition in times and
    readings), the rest dictionary-encoded; statistics only for ``step`` (a window of steps skips
    the segments outside it, and the row groups of a compacted one) and no Arrow schema: about 135
    bytes per demo step record with its spans, against 200 with the defaults. Written to a temporary
    name and renamed (``before_rename`` runs between: compaction's tests stop a process there)."""
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
            write_statistics=["step"] if "step" in table.schema.names else False,
            use_dictionary=others,
            use_byte_stream_split=floats,
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


def listing(run_dir: str, names: list[str] | None = None) -> dict[int, list[tuple[int, int, bool, str, str]]]:
    """rank -> [(first seq, last seq, compacted, kind, path)] of every format-2 file in the listing
    (``names``: the names in ``ranks/`` as listed already: ``telemetry compact`` lists 10,000 ranks'
    files once, not once a rank)."""
    rdir = os.path.join(run_dir, layout.RANKS_DIR)
    out: dict[int, list[tuple[int, int, bool, str, str]]] = {}
    if names is None:
        try:
            names = os.listdir(rdir)
        except FileNotFoundError:
            return out
    for name in names:
        m = layout.SEQ_RE.match(name)
        if m:
            first = int(m.group(3))
            last = int(m.group(4)) if m.group(4) else first
            entry = (first, last, m.group(4) is not None, m.group(2), os.path.join(rdir, name))
            out.setdefault(int(m.group(1)), []).append(entry)
    return out


def resolve(entries: list[tuple[int, int, bool, str, str]]) -> tuple[dict[int, dict[str, str]], list[str]]:
    """One rank's files -> (seq -> {"tail"|"seg"|"spans": path} of the files to read, the files
    superseded). A compacted segment (its step columns present: they are written last) stands for
    every file numbered FIRST..LAST, under the key LAST (``"first"`` names FIRST); a compacted
    segment inside a larger one, and compacted spans whose step columns never came (a compaction
    stopped half way), are superseded too."""
    ranges = sorted(
        {(a, b) for a, b, merged, kind, _ in entries if merged and kind == "seg"}, key=lambda r: (r[0], -r[1])
    )
    keep: list[tuple[int, int]] = []
    for a, b in ranges:
        if keep and a <= keep[-1][1]:
            continue  # inside the one before (compaction merges only files no range covers)
        keep.append((a, b))
    kept = set(keep)
    starts = [a for a, _ in keep]

    def covered(seq: int) -> bool:
        i = bisect.bisect_right(starts, seq) - 1
        return i >= 0 and seq <= keep[i][1]

    out: dict[int, dict[str, str]] = {}
    superseded = []
    for a, b, merged, kind, path in entries:
        if merged:
            if (a, b) in kept:
                out.setdefault(b, {})[kind] = path
                out[b]["first"] = str(a)
            else:
                superseded.append(path)
        elif covered(a):
            superseded.append(path)
        else:
            out.setdefault(a, {})[kind] = path
    return out, superseded


_TEMP = re.compile(r"\.(parquet|arrows)\.tmp\d+$")


def rank_files(run_dir: str) -> dict[int, dict[int, dict[str, str]]]:
    """rank -> seq -> {"tail"|"seg"|"spans": path} of the files to read, from the run directory's
    listing (compacted segments in place of the files they merged)."""
    return {rank: resolve(entries)[0] for rank, entries in listing(run_dir).items()}


def leftovers(run_dir: str, rank: int, names: list[str] | None = None) -> list[str]:
    """What a stopped compaction or seal of ``rank`` left: files a compacted segment supersedes,
    compacted spans without their step columns, temporaries. Removed only by the rank's own writer
    (which holds its lock) or ``telemetry compact``. ``names``: as :func:`listing`'s."""
    rdir = os.path.join(run_dir, layout.RANKS_DIR)
    if names is None:
        try:
            names = os.listdir(rdir)
        except FileNotFoundError:
            names = []
    _, superseded = resolve(listing(run_dir, names).get(rank, []))
    stem = os.path.basename(layout.rank_stem(run_dir, rank)) + "."
    temps = [os.path.join(rdir, n) for n in names if n.startswith(stem) and _TEMP.search(n)]
    return superseded + temps


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


def _pieces(run_dir: str) -> list[tuple[int, int, str, str, str | None]]:
    """(rank, seq, kind, path, spans path) of every rank's steps in reading order: a segment
    (compacted or not), or a tail that has no segment."""
    out = []
    for rank, seqs in sorted(rank_files(run_dir).items()):
        for seq, kinds in sorted(seqs.items()):
            if "seg" in kinds:
                out.append((rank, seq, "seg", kinds["seg"], kinds.get("spans")))
            elif "tail" in kinds:
                out.append((rank, seq, "tail", kinds["tail"], None))
    return out


class _Vanished(Exception):
    """A file listed a moment ago is gone: a compaction merged it meanwhile; the listing is read again."""


def _again(read: Callable[[list[str], bool], Any], warnings: list[str]) -> Any:
    """``read(warnings, last)``, from a new listing while files it listed vanish under it (a
    compaction deletes the segments it merged, whose rows the compacted one then holds): each row
    once. ``last``: the last try, where a vanished file is said and skipped like an unreadable one."""
    tries = 8
    for attempt in range(tries):
        said: list[str] = []
        try:
            out = read(said, attempt == tries - 1)
        except _Vanished:
            continue
        warnings.extend(said)
        return out
    raise AssertionError("unreachable: the last try raises no _Vanished")


def _gone(path: str, exc: BaseException) -> bool:
    return isinstance(exc, FileNotFoundError) or not os.path.exists(path)


def has_segments(run_dir: str) -> bool:
    return bool(rank_files(run_dir))


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
    return _again(lambda said, last: _step_columns(run_dir, said, steps, last, keep), warnings)


def _step_columns(
    run_dir: str,
    warnings: list[str],
    steps: tuple[int, int] | None,
    last: bool = True,
    ranks: frozenset[int] | None = None,
) -> pa.Table | None:
    pieces = [p for p in _pieces(run_dir) if ranks is None or p[0] in ranks]
    if not pieces:
        return None
    segs = [p for p in pieces if p[2] == "seg"]
    tables = []
    readable = []
    schemas = []
    for _, _, _, path, _ in segs:
        if steps is not None and _known_outside(path, steps):
            continue  # its aggregates said so: not even its footer read
        try:
            schema, lo, hi = footer(path)
        except (OSError, pa.ArrowException) as exc:
            if not last and _gone(path, exc):
                raise _Vanished from None
            warnings.append(f"{os.path.basename(path)}: unreadable ({exc}); skipped")
            continue
        if steps is not None and lo is not None and (hi < steps[0] or lo > steps[1]):
            continue  # wholly outside the window: not opened again
        problem = _schema_problem(schema)
        if problem is not None:
            warnings.append(f"{os.path.basename(path)}: {problem}; its rows skipped")
            continue
        schemas.append(schema)
        readable.append(path)
    if readable:
        schema, readable = _unify(schemas, readable, warnings)
        cols = [n for n in schema.names if _table_column(n)]
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
                    raise _Vanished from None  # sealed meanwhile: its segment holds the records
                warnings.append(f"{os.path.basename(path)}: unreadable ({exc}); skipped")
                continue
            if steps is not None:
                records = [r for r in records if steps[0] <= r.step <= steps[1]]
            if records:
                t = pa.Table.from_batches([steps_batch(records)])
                tables.append(t.select([n for n in t.column_names if _table_column(n)]))
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return None
    return pa.concat_tables(tables, promote_options="default")


# Pages written with a CRC (write_page_checksum) are checked on every read: a flipped byte in a
# segment is then an unreadable file, said and skipped, never a wrong number.
_VERIFIED = ds.ParquetFileFormat(
    default_fragment_scan_options=ds.ParquetFragmentScanOptions(page_checksum_verification=True)
)
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


_STEP_TYPES = {
    "rank": pa.types.is_integer,
    "step": pa.types.is_integer,
    "start_s": lambda t: pa.types.is_floating(t) or pa.types.is_integer(t),
    "duration_s": lambda t: pa.types.is_floating(t) or pa.types.is_integer(t),
}


def _schema_problem(schema: pa.Schema) -> str | None:
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


def _table_column(name: str) -> bool:
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
        if not last and _gone(path, exc):
            raise _Vanished from None
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
                    got = None if a is None else (a, b)
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
    return None if lo is None else (int(lo), int(hi), ranks)


def read_records(
    run_dir: str, warnings: list[str], steps: tuple[int, int] | None = None, ranks: Iterable[int] | None = None
) -> list[dict[str, Any]]:
    """Every rank's records as the store's record dicts, spans included (trace export, the
    dashboard's collectives view): slower than :func:`read_step_columns`, read only when asked.
    ``steps``: only steps first..last (inclusive; a segment wholly outside is not opened);
    ``ranks``: only these ranks' files are opened."""
    keep = None if ranks is None else frozenset(int(r) for r in ranks)
    return _again(lambda said, last: _records(run_dir, said, last, steps, keep), warnings)


def _records(
    run_dir: str,
    warnings: list[str],
    last: bool = True,
    steps: tuple[int, int] | None = None,
    ranks: frozenset[int] | None = None,
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    lo, hi = steps if steps is not None else (None, None)
    for rank, _seq, kind, path, spans_file in _pieces(run_dir):
        if ranks is not None and rank not in ranks:
            continue
        try:
            if kind == "tail":
                got = [record_dict(r) for r in read_tail(path, warnings)]
            else:
                if steps is not None:
                    if _known_outside(path, steps):
                        continue
                    _, first, final = footer(path)
                    if first is not None and (final < lo or first > hi):
                        continue  # wholly outside: its rows not read
                table = pq.read_table(path, page_checksum_verification=True)
                spans = pq.read_table(spans_file, page_checksum_verification=True) if spans_file else None
                got = records_from_columns(table, spans)
            out.extend(got if steps is None else [r for r in got if lo <= r["step"] <= hi])
        except (OSError, pa.ArrowException) as exc:
            if not last and (_gone(path, exc) or (spans_file is not None and _gone(spans_file, exc))):
                raise _Vanished from None
            warnings.append(f"{os.path.basename(path)}: unreadable ({exc}); skipped")
    return out


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
    return _again(lambda said, last: _aggregates(run_dir, said, steps, last, summarize, keep), warnings)


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
    for rank, seq, kind, path, _ in _pieces(run_dir):
        agg = files[rank][seq].get("agg") if kind == "seg" else None
        if agg is None and kind == "seg" and not summarize:
            return None
        if agg is not None:
            try:
                table = aggregates.read_file(agg)
                _remember(path, agg, table)
                parts.append(kept(table))
                if len(parts) >= 512:  # thousands of small tables hold far more than their rows: one
                    parts = [pa.concat_tables(parts, promote_options="default").combine_chunks()]
                continue
            except FileNotFoundError as exc:
                if not last and _gone(agg, exc):
                    raise _Vanished from None
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


# segment path -> (its aggregates' path, their (mtime, size), first step, last step): learned when the
# aggregates are read, so that a window of steps opens only the segments that hold some of them
# (at 50,000 segments, reading each one's footer costs half a minute)
_RANGES: dict[str, tuple[str, tuple[float, int], int, int]] = {}


def _remember(seg: str, agg: str, table: pa.Table) -> None:
    if not table.num_rows:
        return
    try:
        st = os.stat(agg)
    except OSError:
        return
    if len(_RANGES) > 1_000_000:
        _RANGES.clear()
    lo = int(pa.compute.min(table.column("first_step")).as_py())
    hi = int(pa.compute.max(table.column("last_step")).as_py())
    _RANGES[seg] = (agg, (st.st_mtime, st.st_size), lo, hi)


def _known_outside(seg: str, steps: tuple[int, int]) -> bool:
    """Whether ``seg`` holds no step of ``steps``, as its aggregates said (they are still the same file)."""
    hit = _RANGES.get(seg)
    if hit is None or hit[3] >= steps[0] and hit[2] <= steps[1]:
        return False
    try:
        st = os.stat(hit[0])
    except OSError:
        return False
    return (st.st_mtime, st.st_size) == hit[1]


def _summarize(path: str, kind: str, warnings: list[str], last: bool) -> pa.Table | None:
    """A segment's or a tail's aggregates, from its rows (none were stored, or they do not read)."""
    try:
        if kind == "seg":
            rows = pq.read_table(path, page_checksum_verification=True)
            rows = rows.select([n for n in rows.column_names if _table_column(n)])
        else:
            records = read_tail(path, warnings)
            rows = pa.Table.from_batches([steps_batch(records)]) if records else None
    except (OSError, pa.ArrowException) as exc:
        if not last and _gone(path, exc):
            raise _Vanished from None
        warnings.append(f"{os.path.basename(path)}: unreadable ({exc}); skipped")
        return None
    if rows is None or _schema_problem(rows.schema) is not None:
        return None
    return block_aggregates(rows)


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

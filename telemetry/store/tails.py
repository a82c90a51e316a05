"""A rank's live tail: JSON lines, appended as records come, read back while the rank writes.

A tail's lines (:class:`TailEncoder`): a header, a shape line per new shape of record, and a short
array per record whose numbers are packed float64: exact, NaN included, since a diverged loss is
data. :class:`TailDecoder` reads them back line by line (the live follower), :func:`read_tail` a
whole tail.
"""

from __future__ import annotations

import base64
import json
import os
from array import array
from typing import Any, Literal

from ..pipeline.records import OpStats, Span, StepRecord

TAIL_FORMAT = 2


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
            # a collective's group, and its group instance when known (its call number is a number below)
            tuple(
                (s.kind, s.name, s.ok, s.group, s.gid)
                if s.gid
                else (s.kind, s.name, s.ok, s.group)
                if s.group
                else (s.kind, s.name, s.ok)
                for s in spans
            ),  # fmt: skip
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
            values += (s.start_s, s.end_s, s.nbytes, s.seq) if s.gid else (s.start_s, s.end_s, s.nbytes)
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

    def feed(self, obj: Any) -> StepRecord | Literal[True] | None:  # obj: a parsed JSON line
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
            numbered = sum(len(s) > 4 for s in spans)  # a collective with its group instance: + its call number
            if len(v) != 3 + sizes + 3 * len(spans) + numbered + 2 * len(groups) + len(io_keys):
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
            for kind, name, span_ok, *group in spans:  # a collective's group, and its instance, when known
                if len(group) > 1:
                    g, gid = str(group[0]), str(group[1])
                    sp.append(
                        Span(str(kind), str(name), v[i], v[i + 1], bool(span_ok), int(v[i + 2]), g, gid, int(v[i + 3]))
                    )
                    i += 4
                    continue
                g = str(group[0]) if group else ""
                sp.append(Span(str(kind), str(name), v[i], v[i + 1], bool(span_ok), int(v[i + 2]), g))
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

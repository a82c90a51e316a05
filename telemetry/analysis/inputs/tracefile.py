"""A Chrome trace file's ``traceEvents``, streamed: one event at a time, never the file whole.

``json.load`` of a multi-GB profiler trace is out; the events are decoded one by one with
``json.JSONDecoder.raw_decode`` from ``_CHUNK``-character reads (gzip or plain), and the file's
other top-level keys (``distributedInfo``, ...) are handed back in a dict. A file that is not a
Chrome trace, is cut short or is not valid JSON is a TableError naming it.
"""

from __future__ import annotations

import gzip
import json
import os
from typing import IO, Any, Iterator

from ...steptable.table import TableError

_CHUNK = 1 << 18  # characters read at a time (the reader holds about 4 chunks at once)
_WS = " \t\r\n"


class _Reader:
    """A JSON text read in chunks; values decoded one at a time with ``raw_decode``."""

    def __init__(self, f: IO[str], source: str) -> None:
        self.f, self.source = f, source
        self.buf, self.pos, self.eof = "", 0, False
        self.dec = json.JSONDecoder()

    def fill(self) -> None:
        data = self.f.read(_CHUNK)
        if not data:
            self.eof = True
        self.buf = self.buf[self.pos :] + data
        self.pos = 0

    def peek(self) -> str:
        while True:
            buf, pos, n = self.buf, self.pos, len(self.buf)
            while pos < n and buf[pos] in _WS:
                pos += 1
            self.pos = pos
            if pos < n:
                return buf[pos]
            if self.eof:
                return ""
            self.fill()

    def expect(self, ch: str) -> None:
        got = self.peek()
        if got != ch:
            raise TableError(
                f"{self.source}: not a Chrome trace (expected {ch!r} at character {self.pos}, found {got[:1]!r})"
            )
        self.pos += 1

    def value(self) -> Any:
        self.peek()
        while True:
            try:
                obj, end = self.dec.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if self.eof:
                    raise TableError(f"{self.source}: not valid JSON ({exc})") from None
                self.fill()
                continue
            if end >= len(self.buf) and not self.eof:  # a number cut at the chunk's end
                self.fill()
                continue
            self.pos = end
            return obj


def iter_trace(path: str, top: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The events of one Chrome trace file, one at a time; the file's other top-level keys
    (``distributedInfo``, ``baseTimeNanoseconds``, ...) go into ``top`` as they are read (some
    writers put them after the events)."""
    name = os.path.basename(path)
    opener = gzip.open if path.lower().endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            r = _Reader(f, name)
            first = r.peek()
            if first == "[":  # the array form of the format: events only
                yield from _array(r)
                return
            r.expect("{")
            if r.peek() == "}":
                return
            while True:
                key = r.value()
                r.expect(":")
                if key == "traceEvents":
                    if r.peek() != "[":
                        raise TableError(f"{name}: traceEvents is not a list")
                    yield from _array(r)
                else:
                    top[key] = r.value()
                nxt = r.peek()
                if nxt == ",":
                    r.pos += 1
                    continue
                if nxt in ("}", ""):
                    return
                raise TableError(f"{name}: not a Chrome trace (unexpected {nxt!r} after key {key!r})")
    except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile) as exc:
        raise TableError(f"{name}: not a readable trace file ({exc})") from None


def _array(r: _Reader) -> Iterator[Any]:
    r.expect("[")
    if r.peek() == "]":
        r.pos += 1
        return
    while True:
        yield r.value()
        nxt = r.peek()
        r.pos += 1
        if nxt == "]":
            return
        if nxt == "":
            raise TableError(f"{r.source}: not valid JSON (the file ends inside traceEvents: cut short?)")
        if nxt != ",":
            raise TableError(f"{r.source}: traceEvents: expected ',' or ']' (found {nxt[:1]!r})")


# ---- what one file holds -----------------------------------------------------------------------

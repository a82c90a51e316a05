"""Which format-2 files a run holds, and which of them to read.

Per rank, files are numbered (``SEQ``) in the order they were written; a rank's records are read in
that order, so that for a (rank, step) written twice the later file wins. A compacted segment stands
for every file it merged; what a stopped compaction or seal left is found here too. A read that
finds a listed file gone (a compaction merged it meanwhile) lists again (:func:`again`).
"""

from __future__ import annotations

import bisect
import os
import re
from typing import Any, Callable

from . import layout


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


def in_reading_order(run_dir: str) -> list[tuple[int, int, str, str, str | None]]:
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


class Vanished(Exception):
    """A file listed a moment ago is gone: a compaction merged it meanwhile; the listing is read again."""


def again(read: Callable[[list[str], bool], Any], warnings: list[str]) -> Any:
    """``read(warnings, last)``, from a new listing while files it listed vanish under it (a
    compaction deletes the segments it merged, whose rows the compacted one then holds): each row
    once. ``last``: the last try, where a vanished file is said and skipped like an unreadable one."""
    tries = 8
    for attempt in range(tries):
        said: list[str] = []
        try:
            out = read(said, attempt == tries - 1)
        except Vanished:
            continue
        warnings.extend(said)
        return out
    raise AssertionError("unreachable: the last try raises no Vanished")


def gone(path: str, exc: BaseException) -> bool:
    return isinstance(exc, FileNotFoundError) or not os.path.exists(path)


def has_segments(run_dir: str) -> bool:
    return bool(rank_files(run_dir))

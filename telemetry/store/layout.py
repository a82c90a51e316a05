"""Where each file of a run directory lives."""

from __future__ import annotations

import json
import os
import re
from typing import Any, BinaryIO, Callable

RANKS_DIR = "ranks"
META = "meta.json"
FINDINGS = "findings.jsonl"
STEPS_RE = re.compile(r"^rank-(\d+)\.steps\.jsonl$")  # format 1: one JSON object per step (still read)
# Format 2: per rank, a live tail of JSON lines sealed into columnar segments, numbered in order;
# a compacted segment (``seg-FIRST-LAST``) holds the sealed segments FIRST..LAST merged, in order.
SEQ_RE = re.compile(r"^rank-(\d+)\.(tail|seg|spans|agg)-(\d+)(?:-(\d+))?\.(jsonl|parquet|arrows)$")


def rank_stem(run_dir: str, rank: int) -> str:
    return os.path.join(run_dir, RANKS_DIR, f"rank-{rank:05d}")


def steps_path(run_dir: str, rank: int) -> str:
    return rank_stem(run_dir, rank) + ".steps.jsonl"


def tail_path(run_dir: str, rank: int, seq: int) -> str:
    """The live tail: the records since the last seal, one JSON array per step."""
    return f"{rank_stem(run_dir, rank)}.tail-{seq:06d}.jsonl"


def segment_path(run_dir: str, rank: int, seq: int) -> str:
    """A sealed segment's step columns (Parquet)."""
    return f"{rank_stem(run_dir, rank)}.seg-{seq:06d}.parquet"


def spans_path(run_dir: str, rank: int, seq: int) -> str:
    """A sealed segment's spans (Parquet), apart from the step columns."""
    return f"{rank_stem(run_dir, rank)}.spans-{seq:06d}.parquet"


def compacted_path(run_dir: str, rank: int, first: int, last: int, kind: str = "seg") -> str:
    """Segments ``first``..``last`` merged (``kind``: "seg", the step columns, "spans" or "agg")."""
    return f"{rank_stem(run_dir, rank)}.{kind}-{first:06d}-{last:06d}.{'arrows' if kind == 'agg' else 'parquet'}"


def agg_path(run_dir: str, rank: int, seq: int) -> str:
    """A sealed segment's per-rank aggregates over blocks of steps (:mod:`.aggregates`)."""
    return f"{rank_stem(run_dir, rank)}.agg-{seq:06d}.arrows"


def progress_path(run_dir: str, rank: int) -> str:
    return rank_stem(run_dir, rank) + ".progress.json"


def rank_meta_path(run_dir: str, rank: int) -> str:
    return rank_stem(run_dir, rank) + ".json"


def rank_groups_path(run_dir: str, rank: int) -> str:
    """The group instances a rank called collectives in: ``{gid: {"label", "ranks"}}`` (hooks/groups.py)."""
    return rank_stem(run_dir, rank) + ".groups.json"


def exit_path(run_dir: str, rank: int) -> str:
    """How a rank's process ended, when its launcher knows it (``exit_code``, ``signal``, ``time_s``)."""
    return rank_stem(run_dir, rank) + EXIT_SUFFIX


EXIT_SUFFIX = ".exit.json"


def write_json_atomic(path: str, obj: Any) -> None:
    """Write to a temporary file and rename, so a reader never sees half a file."""
    write_atomic(path, lambda f: f.write(json.dumps(obj, indent=1, sort_keys=True, default=str).encode()))


def write_atomic(
    path: str,
    write: Callable[[BinaryIO], Any],
    durable: bool = False,
    before_rename: Callable[[], None] | None = None,
) -> None:
    """``write(file)`` into a temporary file beside ``path``, then rename it to ``path``: a reader sees
    the old file or the new one, never half of one. ``durable``: on the disk itself before the rename
    (fsync), not only handed to the OS. ``before_rename`` runs between (tests stop a process there)."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            write(f)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        if before_rename is not None:
            before_rename()
        os.replace(tmp, path)
    except BaseException:
        try:  # a full or read-only disk: the old file stays whole, and no temporary is left behind
            os.remove(tmp)
        except OSError:
            pass
        raise


def is_run_dir(path: str) -> bool:
    return os.path.isdir(os.path.join(path, RANKS_DIR)) or os.path.isfile(os.path.join(path, META))

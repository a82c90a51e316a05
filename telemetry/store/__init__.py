"""The run store: the embedded default sink. Per rank, a live tail sealed into Parquet segments under RUN_DIR.

Layout (see :mod:`telemetry.store.layout`; docs/runs.md, "The run directory")::

    RUN_DIR/meta.json                               job, world size, hosts, config, versions, start time
    RUN_DIR/ranks/rank-00003.json                   this rank's identity (host, pid, local rank, node)
    RUN_DIR/ranks/rank-00003.tail-000007.jsonl      the live tail, appended every tick
    RUN_DIR/ranks/rank-00003.seg-000006.parquet     a sealed segment's step columns (+ .spans-000006)
    RUN_DIR/ranks/rank-00003.seg-000001-000005.parquet  segments 1-5 compacted (+ .spans-000001-000005)
    RUN_DIR/ranks/rank-00003.progress.json          heartbeat, replaced atomically every tick
    RUN_DIR/ranks/rank-00003.groups.json            the group instances its collectives were called in, with their ranks
    RUN_DIR/findings.jsonl                          findings written by online detection
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .reader import RunData, read_run

# The writer (the sink, telemetry.store.writer:RunStoreSink) is not imported here: reading a run
# needs nothing of the pipeline. Nor is the reader until it is asked for: a rank writes and never
# reads, and the reader's pyarrow.dataset brings pandas (0.4 s of a rank's start).
__all__ = ["RunData", "read_run"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import reader

        return getattr(reader, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

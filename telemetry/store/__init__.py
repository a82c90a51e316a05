"""The run store: the embedded default sink. Per-rank append-only JSON Lines under RUN_DIR.

Layout (see :mod:`telemetry.store.layout`)::

    RUN_DIR/meta.json                     job, world size, hosts, config, versions, start time
    RUN_DIR/ranks/rank-00003.json         this rank's identity (host, pid, local rank, node)
    RUN_DIR/ranks/rank-00003.steps.jsonl  one JSON object per step, appended, flushed every tick
    RUN_DIR/ranks/rank-00003.progress.json  heartbeat, replaced atomically every tick
    RUN_DIR/findings.jsonl                findings written by online detection / analyze
"""

from .reader import RunData, read_run
from .writer import RunStoreSink

__all__ = ["RunData", "RunStoreSink", "read_run"]

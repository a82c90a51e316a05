"""The run store: the embedded default sink. Per-rank append-only JSON Lines under RUN_DIR.

Layout (see :mod:`telemetry.store.layout`)::

    RUN_DIR/meta.json                     job, world size, hosts, config, versions, start time
    RUN_DIR/ranks/rank-00003.json         this rank's identity (host, pid, local rank, node)
    RUN_DIR/ranks/rank-00003.steps.jsonl  one JSON object per step, appended, flushed every tick
    RUN_DIR/ranks/rank-00003.progress.json  heartbeat, replaced atomically every tick
    RUN_DIR/findings.jsonl                findings written by online detection / analyze
"""

from .reader import RunData, read_run

# The writer (the sink, telemetry.store.writer:RunStoreSink) is not imported here: reading a run
# needs nothing of the pipeline.
__all__ = ["RunData", "read_run"]

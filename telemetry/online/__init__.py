"""Online detection: every K steps each rank posts a small fixed-size summary; rank 0 runs the same
detectors as offline on the summaries and reports findings while the job runs. The training thread
never waits for any of this.

No collective and no process group of its own (a gloo group is a full mesh, impossible at 10,000
ranks): the summaries go through the job's rendezvous store under ``telemetry/``, read by rank 0 in
batches. Modules: :mod:`.wire` (the summary's fields, the store keys, :class:`~.wire.BlockSummarizer`),
:mod:`.reads` (batched reads, the background deleter), :mod:`.table` (the blocks' steps table),
:mod:`.detector` (:class:`OnlineDetector`), :mod:`.starter` (the job's store, :class:`OnlineStarter`),
:mod:`.capture` (captures on findings). What it does and at what cost: docs/online.md, docs/scale.md.
"""

from .detector import OnlineDetector
from .starter import OnlineStarter, default_store

__all__ = ["OnlineDetector", "OnlineStarter", "default_store"]

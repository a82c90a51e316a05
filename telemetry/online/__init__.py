"""Online detection: every K steps each rank posts a small fixed-size summary; rank 0 runs the
same detectors as offline on the summaries and reports findings while the job runs.

No collective and no process group of its own (a gloo group is a full mesh, impossible at 10,000
ranks): each rank's pipeline thread writes its summary of a block of K steps to the job's
rendezvous store (torch.distributed's TCPStore, under the prefix ``telemetry/``) as one packed
array of float64 (block, steps, then medians of step time, compute, comm, data and each phase, in
a fixed order). Rank 0's online thread waits for a block to be complete (or ``online_wait_blocks``
blocks late: the missing ranks are named), builds a steps table with one row per rank and block,
runs :func:`telemetry.analysis.detectors.analyze` on the latest ``online_window`` blocks (by default 200,
and 500,000 // ranks beyond 2,500 ranks: :func:`.detector.online_window`), and hands new
findings and straggler scores to the sinks as an :class:`~telemetry.pipeline.records.OnlineResult`
(run store: ``RUN_DIR/findings.jsonl``; Prometheus: ``train_straggler_score{scored_rank}``,
``train_findings{kind}``, with rank 0's own ``rank`` label). Store keys of analyzed blocks are deleted. The training thread never
waits for any of this.

At 10,000 ranks a rank still makes one ``set`` per block; rank 0 asks the store in batches of
``CHUNK`` keys (``check`` and ``multi_get``: about 2 requests per 1,000 ranks and block), builds the
table from numpy matrices, and deletes the read keys from a background thread (the store has no
batched delete: one ``delete_key`` per key, on a connection of its own).

One module per concern:

- :mod:`.wire`: the summary vector's fields, the store keys (each written once), the per-rank
  :class:`~.wire.BlockSummarizer`, and a block's raw values parsed into a :class:`~.wire.Block`;
- :mod:`.reads`: rank 0's batched reads of the store (``CHUNK``, halving) and the background deleter;
- :mod:`.table`: each rank's phase names and the steps table built from the blocks' matrices;
- :mod:`.detector`: :class:`OnlineDetector` (posting on every rank; rank 0's thread and analysis);
  lost ranks come from :mod:`telemetry.analysis.detectors.lost`, fed with the blocks;
- :mod:`.starter`: the job's store (``default_store``) and :class:`OnlineStarter`.
"""

from .detector import OnlineDetector
from .starter import OnlineStarter, default_store

__all__ = ["OnlineDetector", "OnlineStarter", "default_store"]

"""The run-store sink (format 2): per rank, a live tail of JSON lines sealed into columnar segments.

Every pipeline tick (default 0.5 s) the tick's records are appended to this rank's tail
(``rank-N.tail-SEQ.jsonl``: a header object, then one JSON array per step, the record's fields in
order) and flushed to the operating system: readable while the job runs, and a SIGKILL loses at
most the last tick. Every ``SEAL_RECORDS`` records (or ``SEAL_INTERVAL_S`` seconds) and at
shutdown the records held since the last seal are written as two Parquet files, the step columns
(``rank-N.seg-SEQ.parquet``) and the spans apart (``rank-N.spans-SEQ.parquet``), each to a temporary
name and renamed; then the tail is deleted and the next one opened. A tail left by a crash is
sealed by the next session of that rank (a restart) before it writes; readers read tails as they
are. A torn last line is skipped by the reader. For a (rank, step) seen twice the reader keeps the
one in the later file (a restarted job's re-run steps win). A seal that fails (disk full) leaves
the tail as it is: nothing is lost, the failure is logged once and counted (``seal_failures``).
"""

from __future__ import annotations

import glob
import json
import logging
import os
import time
from typing import Any, Sequence

from ..logonce import LogOnce
from ..pipeline.records import OnlineResult, Progress, StepRecord
from ..pipeline.sinks import Sink
from . import layout
from .segments import TAIL_FORMAT, TailEncoder, recover_tails, write_segment

log = logging.getLogger("telemetry")
SEAL_RECORDS = 2048  # records per segment (a bound on what the sink holds in memory, too)
SEAL_INTERVAL_S = 300.0  # ... or a tail this old is sealed at the next write


class RunStoreSink(Sink):
    name = "store"

    def __init__(self, config: Any, ctx: Any, run_info: dict[str, Any]) -> None:
        self.run_dir = config.run_dir
        self.rank = ctx.rank
        self.world_size = ctx.world_size
        self.lines = 0
        self.bytes = 0
        self.seal_failures = 0
        self.segments = 0
        self._once = LogOnce()
        self._session = {"format": TAIL_FORMAT, "fields": list(StepRecord._fields), "session": run_info["session"],
                         "rank": self.rank, "start_time_s": run_info["start_time_s"]}
        try:
            os.makedirs(os.path.join(self.run_dir, layout.RANKS_DIR), exist_ok=True)
            # a tail a crashed session of this rank left is sealed first, so that files stay in order
            self._seq = recover_tails(self.run_dir, self.rank) + 1
            self._open_tail()
        except OSError as exc:
            raise OSError(f"cannot write run directory {self.run_dir!r}: {exc.strerror or exc}") from None
        self._pending: list[StepRecord] = []
        self._meta = {
            "job": config.job, "rank": ctx.rank, "local_rank": ctx.local_rank,
            "world_size": ctx.world_size, "local_world_size": ctx.local_world_size,
            "node_rank": ctx.node_rank, "node": ctx.node, "launcher": ctx.launcher,
            "pid": os.getpid(), "start_time_s": run_info["start_time_s"],
            "device": run_info.get("device", {}),
        }
        layout.write_json_atomic(layout.rank_meta_path(self.run_dir, self.rank), self._meta)
        if ctx.rank == 0:
            self._run_meta = {
                "job": config.job, "world_size": ctx.world_size, "config": config.as_dict(),
                "versions": run_info.get("versions", {}), "start_time_s": run_info["start_time_s"],
                "session": run_info["session"], "hosts": {str(ctx.rank): ctx.node},
                "format": 2,
            }
            layout.write_json_atomic(os.path.join(self.run_dir, layout.META), self._run_meta)

    def _open_tail(self) -> None:
        self._tail = layout.tail_path(self.run_dir, self.rank, self._seq)
        self._file = open(self._tail, "a", encoding="utf-8")
        self._encoder = TailEncoder()  # each tail names its own shapes
        self._file.write(json.dumps(self._session) + "\n")
        self._file.flush()
        self._opened = time.monotonic()

    def write(self, records: Sequence[StepRecord]) -> None:
        text = "".join([self._encoder.lines(r) for r in records])
        self._file.write(text)
        self.lines += len(records)
        self.bytes += len(text)
        if self._pending is not None:
            self._pending.extend(records)
            if len(self._pending) >= SEAL_RECORDS or time.monotonic() - self._opened >= SEAL_INTERVAL_S:
                self._seal()

    def _seal(self, reopen: bool = True) -> None:
        """The held records -> a segment; then the next tail. On failure the tail keeps them."""
        if not self._pending:
            return
        self._file.flush()
        try:
            write_segment(self.run_dir, self.rank, self._seq, self._pending, durable=not reopen)
        except OSError as exc:
            self.seal_failures += 1
            self._once("seal", "telemetry: run store: a segment could not be written (%s); the records stay in "
                       "%s, readable; further failures counted", exc, self._tail)
            if len(self._pending) >= 4 * SEAL_RECORDS:  # stop holding them: the tail has them all
                self._pending = None
            return
        self.segments += 1
        self._file.close()
        try:
            os.remove(self._tail)
        except OSError:
            pass  # the reader prefers the segment over a tail of the same number
        self._seq += 1
        self._pending = []
        if reopen:
            self._open_tail()

    def flush(self, timeout_s: float) -> None:
        self._file.flush()

    def progress(self, progress: Progress) -> None:
        layout.write_json_atomic(layout.progress_path(self.run_dir, self.rank), progress._asdict())

    def findings(self, result: OnlineResult) -> None:
        if self.rank != 0 or not result.findings:
            return
        with open(os.path.join(self.run_dir, layout.FINDINGS), "a", encoding="utf-8") as f:
            f.write("".join(json.dumps(x, default=str) + "\n" for x in result.findings))

    def close(self, timeout_s: float) -> None:
        self._file.flush()
        if self._pending:
            self._seal(reopen=False)  # the last records into a segment, and no tail left
        elif self._pending is not None and not self._file.closed:
            self._file.close()  # nothing since the last seal: the tail holds only its header
            try:
                os.remove(self._tail)
            except OSError:
                pass
        if not self._file.closed:  # sealing failed: the tail keeps the records
            try:
                os.fsync(self._file.fileno())
            except OSError:
                pass
            self._file.close()
        if self.rank == 0:
            # Every rank wrote its identity at start; gather the hosts now.
            hosts = {}
            for path in glob.glob(os.path.join(self.run_dir, layout.RANKS_DIR, "rank-*[0-9].json")):
                try:
                    with open(path, encoding="utf-8") as f:
                        m = json.load(f)
                    hosts[str(m["rank"])] = m["node"]
                except (OSError, ValueError, KeyError):
                    continue
            self._run_meta["hosts"] = dict(sorted(hosts.items(), key=lambda kv: int(kv[0])))
            self._run_meta["end_time_s"] = time.time()
            layout.write_json_atomic(os.path.join(self.run_dir, layout.META), self._run_meta)

    def stats(self) -> dict[str, Any]:
        return {"lines": self.lines, "bytes": self.bytes, "segments": self.segments,
                "seal_failures": self.seal_failures}

    def describe(self) -> str | None:
        return f"run directory {self.run_dir}" if self.rank == 0 else None


"""The run-store sink (format 2, :class:`RunStoreSink`): per rank, a live tail of JSON lines sealed into
columnar segments.

Every pipeline tick the tick's records are appended to this rank's tail (``rank-N.tail-SEQ.jsonl``),
opened, written and closed again: readable while the job runs, no file held open between ticks. Every
``SEAL_RECORDS`` records (or ``SEAL_INTERVAL_S``) and at shutdown they are sealed into a step-columns and
a spans Parquet file, each written to a temporary name and renamed, then compacted (:mod:`.compact`).
A crash's tail is sealed by the rank's next session; for a (rank, step) seen twice the later file
wins. A directory that cannot be written costs no training: records wait in memory (at most
``MAX_UNWRITTEN``), what is never written is counted. The rules: docs/runs.md, docs/faults.md.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Sequence

from pyarrow import ArrowException

from .. import provenance
from ..config import tag_dict
from ..hooks.groups import known as group_instances
from ..logonce import LogOnce
from ..pipeline.records import OnlineResult, Progress, StepRecord
from ..pipeline.sinks import TRACE_SAMPLER, Sink
from . import compact, layout
from .ended import ranges_text
from .seal import recover_tails, write_segment
from .tails import TAIL_FORMAT, TailEncoder

if TYPE_CHECKING:
    from ..config import Config
    from ..rank import RankContext

log = logging.getLogger("telemetry")
SEAL_RECORDS = 2048  # records per segment (a bound on what the sink holds in memory, too)
SEAL_INTERVAL_S = 300.0  # ... or a tail this old is sealed at the next write
SEAL_RETRY_S = 10.0  # a seal that failed is tried again after this long
MAX_UNWRITTEN = 2048  # records held while the tail cannot be written; older ones are dropped, counted
MAX_LOST_RANGES = 64  # lost steps are said as ranges; past this many, only counted


class _Entry:
    """Bytes for the tail not yet written: a record's line (after its shape line, if new), or a
    header. ``started``: part of it is in the file already (it must be completed, not dropped)."""

    __slots__ = ("record", "data", "head_len", "started")

    def __init__(self, record: StepRecord | None, data: bytes, head_len: int) -> None:
        self.record, self.data, self.head_len, self.started = record, data, head_len, False


class RunStoreSink(Sink):
    name = "store"

    def __init__(self, config: Config, ctx: RankContext, run_info: dict[str, Any]) -> None:
        self.run_dir = config.run_dir
        self.rank = ctx.rank
        self.world_size = ctx.world_size
        self.lines = 0
        self.bytes = 0
        self.seal_failures = 0
        self.write_failures = 0  # ticks whose records the tail could not take (all or some)
        self.other_failures = 0  # heartbeats, findings, metadata not written
        self._groups: dict[str, tuple[str, list[int]]] = {}  # kept in RUN_DIR/ranks/rank-N.groups.json
        self.dropped = 0  # records never written (held past MAX_UNWRITTEN, or still held at shutdown)
        self.segments = 0
        self.compactions = 0  # compacted segments written
        self.compact_failures = 0
        self._sealed: list[int] = []  # sealed segments not yet compacted, consecutive
        self._lost: list[list[int]] = []  # the dropped records' steps, as [first, last] ranges
        self._error = ""  # the last write error, for the shutdown warning
        self._once = LogOnce()
        self._queue: deque[_Entry] = deque()
        self._unwritten = 0  # records in _queue
        self._seal_after = 0.0
        self._session = {
            "format": TAIL_FORMAT,
            "fields": list(StepRecord._fields),
            "session": run_info["session"],
            "rank": self.rank,
            "start_time_s": run_info["start_time_s"],
        }
        self._pending: list[StepRecord] | None = []
        try:
            os.makedirs(os.path.join(self.run_dir, layout.RANKS_DIR), exist_ok=True)
            # a tail a crashed session of this rank left is sealed first, so that files stay in order;
            # what a stopped compaction left goes, and the segments since the last compaction are next
            self._seq = recover_tails(self.run_dir, self.rank) + 1
            compact.tidy(self.run_dir, self.rank)
            waiting = compact.groups(self.run_dir, self.rank, size=1 << 30, least=1)
            self._sealed = waiting[-1] if waiting and waiting[-1][-1] == self._seq - 1 else []
            self._open_tail()
            if not self._drain(log_failure=False):
                raise OSError(self._error)
        except OSError as exc:
            raise OSError(f"cannot write run directory {self.run_dir!r}: {exc.strerror or exc}") from None
        self._meta = {
            "job": config.job,
            "rank": ctx.rank,
            "local_rank": ctx.local_rank,
            "world_size": ctx.world_size,
            "local_world_size": ctx.local_world_size,
            "node_rank": ctx.node_rank,
            "node": ctx.node,
            "launcher": ctx.launcher,
            **ctx.placement_labels(),
            "pid": os.getpid(),
            "start_time_s": run_info["start_time_s"],
            "device": run_info.get("device", {}),
        }
        layout.write_json_atomic(layout.rank_meta_path(self.run_dir, self.rank), self._meta)
        if ctx.rank == 0:
            self._run_meta = {
                "job": config.job,
                "world_size": ctx.world_size,
                "config": config.as_dict(),
                "versions": run_info.get("versions", {}),
                "code": provenance.code_state(),  # the training code's commit (telemetry history)
                "tags": tag_dict(config.tags),
                "start_time_s": run_info["start_time_s"],
                "session": run_info["session"],
                "hosts": {str(ctx.rank): ctx.node},
                "format": 2,
            }
            layout.write_json_atomic(os.path.join(self.run_dir, layout.META), self._run_meta)
        # Rank 0, once its OTLP sink has started (it may start after this one): the meta says that
        # steps were traced, and how they were chosen, so that findings can list their traces.
        self._run_info = run_info
        self._traces = {"job": config.job, "every": config.otlp_sample_every} if ctx.rank == 0 else None

    def _note_traces(self) -> None:
        self._run_meta["traces"], self._traces = self._traces, None
        try:
            layout.write_json_atomic(os.path.join(self.run_dir, layout.META), self._run_meta)
        except OSError as exc:
            self._other(os.path.join(self.run_dir, layout.META), exc)

    # -- the tail ------------------------------------------------------------------------------

    def _open_tail(self) -> None:
        """Start tail ``self._seq``: its header is the first thing queued for it."""
        self._tail = layout.tail_path(self.run_dir, self.rank, self._seq)
        self._encoder = TailEncoder()  # each tail names its own shapes
        header = (json.dumps(self._session) + "\n").encode()
        self._queue.append(_Entry(None, header, len(header)))
        self._opened = time.monotonic()

    def _drain(self, log_failure: bool = True) -> bool:
        """Append what is queued to the tail; True when all of it was written. On a failure (disk
        full, read-only) what was written stays written and the rest stays queued, in order."""
        if not self._queue:
            return True
        data = b"".join(e.data for e in self._queue)
        view = memoryview(data)
        written = 0
        ok = True
        try:
            fd = os.open(self._tail, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                while written < len(data):
                    written += os.write(fd, view[written:])
            finally:
                os.close(fd)
        except OSError as exc:
            ok = False
            self.write_failures += 1
            self._error = exc.strerror or str(exc)
            if log_failure:
                self._log_failure(self._tail, self._error)
        self.bytes += written
        while written and self._queue:
            e = self._queue[0]
            if written >= len(e.data):
                written -= len(e.data)
                self._queue.popleft()
                if e.record is not None:
                    self._unwritten -= 1
            else:  # a line cut short by the full disk: the rest of it goes first, next time
                e.data, e.head_len, e.started = e.data[written:], max(0, e.head_len - written), True
                written = 0
        return ok

    def _shed(self, keep: int) -> None:
        """Drop the oldest held records beyond ``keep`` (their shape lines stay queued: later
        records name them), counted as lost, and not sealed either."""
        excess = self._unwritten - keep
        if excess <= 0:
            return
        kept: deque[_Entry] = deque()
        shed: list[StepRecord] = []
        for e in self._queue:
            if excess > 0 and e.record is not None and not e.started:
                shed.append(e.record)
                excess -= 1
                if e.head_len:
                    kept.append(_Entry(None, e.data[: e.head_len], e.head_len))
            else:
                kept.append(e)
        self._queue = kept
        self._unwritten -= len(shed)
        self._lose(shed)
        if self._pending:
            gone = {id(r) for r in shed}
            self._pending = [r for r in self._pending if id(r) not in gone]

    def _lose(self, records: Sequence[StepRecord]) -> None:
        self.dropped += len(records)
        for r in records:
            if self._lost and r.step == self._lost[-1][1] + 1:
                self._lost[-1][1] = r.step
            elif len(self._lost) < MAX_LOST_RANGES:
                self._lost.append([r.step, r.step])

    def lost_steps(self) -> str:
        """The steps of the records never written, e.g. ``120-199`` (empty when none)."""
        text = ranges_text(self._lost)
        return text + (", ..." if len(self._lost) >= MAX_LOST_RANGES else "")

    # -- the sink ------------------------------------------------------------------------------

    def write(self, records: Sequence[StepRecord]) -> None:
        if self._traces is not None and TRACE_SAMPLER in self._run_info:
            self._note_traces()
        if len(group_instances) != len(self._groups):
            self._keep_groups()
        for r in records:
            head, body = self._encoder.parts(r)
            hb = head.encode()
            self._queue.append(_Entry(r, hb + body.encode(), len(hb)))
        self._unwritten += len(records)
        self.lines += len(records)
        if self._pending is not None:
            self._pending.extend(records)
            if len(self._pending) >= SEAL_RECORDS or time.monotonic() - self._opened >= SEAL_INTERVAL_S:
                self._seal()
        if not self._drain():
            self._shed(MAX_UNWRITTEN)

    def _keep_groups(self) -> None:
        """The group instances this rank's collectives were called in, with their ranks: once per run, not
        on every record (RUN_DIR/ranks/rank-N.groups.json; a span names its instance by ``gid``)."""
        self._groups.update(dict(group_instances))  # the training thread adds a group as it first calls in it
        try:
            layout.write_json_atomic(
                layout.rank_groups_path(self.run_dir, self.rank),
                {gid: {"label": label, "ranks": ranks} for gid, (label, ranks) in self._groups.items()},
            )
        except OSError as exc:
            self._other(layout.rank_groups_path(self.run_dir, self.rank), exc)

    def _seal(self, reopen: bool = True) -> bool:
        """The held records -> a segment; then the next tail. On failure the tail keeps them."""
        if not self._pending:
            return False
        if reopen and time.monotonic() < self._seal_after:
            return False
        try:
            write_segment(self.run_dir, self.rank, self._seq, self._pending, durable=not reopen)
        except OSError as exc:
            self.seal_failures += 1
            self._seal_after = time.monotonic() + SEAL_RETRY_S
            self._once(
                "io",
                "telemetry: run store: a segment could not be written (%s); the records stay in "
                "%s, readable; further run-store failures are counted, not logged",
                exc.strerror or exc,
                self._tail,
            )
            if len(self._pending) >= 4 * SEAL_RECORDS:  # stop holding them: the tail has them
                self._pending = None
            return False
        self.segments += 1
        try:
            os.remove(self._tail)
        except OSError:
            pass  # the reader prefers the segment over a tail of the same number
        self._queue.clear()  # whatever the tail had not taken yet is in the segment
        self._unwritten = 0
        self._sealed.append(self._seq)
        self._seq += 1
        self._pending = []
        if reopen:
            self._open_tail()
        if len(self._sealed) >= compact.COMPACT_SEGMENTS:
            self._compact()
        return True

    def _compact(self) -> None:
        """The segments sealed since the last compaction -> one compacted segment. On failure they
        stay as they are (readable), counted and said once."""
        group, self._sealed = self._sealed, []
        if len(group) < 2:
            return
        try:
            compact.merge(self.run_dir, self.rank, group)
            self.compactions += 1
        except (OSError, ValueError, ArrowException) as exc:
            self.compact_failures += 1
            self._once(
                "compact",
                "telemetry: run store: segments %d-%d of rank %d could not be compacted (%s); they stay "
                "as they are, readable; further compaction failures are counted, not logged",
                group[0],
                group[-1],
                self.rank,
                getattr(exc, "strerror", None) or exc,
            )

    def flush(self, timeout_s: float) -> None:
        self._drain()

    def _log_failure(self, what: str, error: str) -> None:
        self._once(
            "io",
            "telemetry: run store: cannot write %s (%s); training goes on; up to %d step records "
            "the run directory does not take are held in memory and written when it takes them again "
            "(older ones are dropped, and what is lost is counted and said at shutdown); further "
            "run-store failures are counted, not logged",
            what,
            error,
            MAX_UNWRITTEN,
        )

    def _other(self, what: str, exc: OSError) -> None:
        self.other_failures += 1
        self._log_failure(what, exc.strerror or str(exc))

    def progress(self, progress: Progress) -> None:
        if len(group_instances) != len(self._groups):  # a rank hung in its first call writes no record
            self._keep_groups()
        try:
            layout.write_json_atomic(layout.progress_path(self.run_dir, self.rank), progress._asdict())
        except OSError as exc:
            self._other(layout.progress_path(self.run_dir, self.rank), exc)

    def findings(self, result: OnlineResult) -> None:
        if self.rank != 0 or not result.findings:
            return
        try:
            with open(os.path.join(self.run_dir, layout.FINDINGS), "a", encoding="utf-8") as f:
                f.write("".join(json.dumps(x, default=str) + "\n" for x in result.findings))
        except OSError as exc:
            self._other(os.path.join(self.run_dir, layout.FINDINGS), exc)

    def close(self, timeout_s: float) -> None:
        if len(group_instances) != len(self._groups):
            self._keep_groups()
        self._drain()
        sealed = self._seal(reopen=False)  # the last records into a segment, and no tail left
        self._compact()  # and what was sealed since the last compaction, merged
        if not sealed and self._pending == [] and self._unwritten == 0:
            try:  # nothing since the last seal: the tail holds only its header
                os.remove(self._tail)
            except OSError:
                pass
        elif not sealed:
            if self._unwritten:  # the tail never took them, nor did a segment: lost
                self._lose([e.record for e in self._queue if e.record is not None])
                self._unwritten = 0
            self._queue.clear()
            try:  # the tail keeps the records: on the disk itself, not only handed to the OS
                fd = os.open(self._tail, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError:
                pass
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
            try:
                layout.write_json_atomic(os.path.join(self.run_dir, layout.META), self._run_meta)
            except OSError as exc:
                self._other(os.path.join(self.run_dir, layout.META), exc)

    def stats(self) -> dict[str, Any]:
        out = {
            "lines": self.lines,
            "bytes": self.bytes,
            "segments": self.segments,
            "seal_failures": self.seal_failures,
            "compactions": self.compactions,
            "compact_failures": self.compact_failures,
            "write_failures": self.write_failures,
            "failures": self.write_failures + self.seal_failures + self.other_failures + self.compact_failures,
            "unwritten": self._unwritten,
            "dropped": self.dropped,
            "lost_steps": self.lost_steps(),
        }
        if self.dropped:
            out["dropped_detail"] = (
                f"{self.dropped} step record(s) not written to {self.run_dir} "
                f"(steps {self.lost_steps()}): {self._error or 'the run directory failed'}"
            )
        return out

    def describe(self) -> str | None:
        return f"run directory {self.run_dir}"  # every rank's: its start line otherwise said no sink ran

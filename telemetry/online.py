"""Online detection: every K steps each rank posts a small fixed-size summary; rank 0 runs the
same detectors as offline on the summaries and reports findings while the job runs.

No collective and no process group of its own (a gloo group is a full mesh, impossible at 10,000
ranks): each rank's pipeline thread writes its summary of a block of K steps to the job's
rendezvous store (torch.distributed's TCPStore, under the prefix ``telemetry/``) as one packed
array of float64 (block, steps, then medians of step time, compute, comm, data and each phase, in
a fixed order). Rank 0's online thread waits for a block to be complete (or ``online_wait_blocks``
blocks late: the missing ranks are named), builds a steps table with one row per rank and block,
runs :func:`telemetry.analysis.detectors.analyze` on the latest ``online_window`` blocks, and hands new
findings and straggler scores to the sinks as an :class:`~telemetry.pipeline.records.OnlineResult`
(run store: ``RUN_DIR/findings.jsonl``; Prometheus: ``train_straggler_score{scored_rank}``,
``train_findings{kind}``, with rank 0's own ``rank`` label). Store keys of analyzed blocks are deleted. The training thread never
waits for any of this.

``telemetry.init`` may run before ``init_process_group``: then :class:`OnlineStarter` looks for the
process group on every pipeline tick and starts detection when it appears.
"""

from __future__ import annotations

import collections
import logging
import queue
import sys
import threading
import time
from datetime import timedelta
from typing import Any, Callable, Sequence

import numpy as np

from .logonce import LogOnce
from .pipeline.records import OnlineResult, StepRecord

log = logging.getLogger("telemetry")
FIXED = ("block", "steps", "duration_s", "compute_s", "comm_s", "data_s")


_store_once = LogOnce(level=logging.INFO)


def default_store() -> Any | None:
    """The rendezvous store of the initialized default process group, or None. Cheap when there
    is none (it is asked on every pipeline tick until there is): torch is not imported here."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None  # nobody imported torch.distributed: no process group can exist
    try:
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return None
        store = dist.distributed_c10d._get_default_store()
        prefixed = dist.PrefixStore("telemetry/", store)
        prefixed.set_timeout(timedelta(seconds=5))
        return prefixed
    except Exception as exc:  # noqa: BLE001 - a private API: never fatal
        _store_once("store", "telemetry: online detection off (no rendezvous store: %s)", exc)
        return None


class BlockSummarizer:
    """Per rank: step records -> one summary vector per block of K steps. The phases are those of
    the first block (posted once by name, so that rank 0 can read the vectors)."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.phases: tuple[str, ...] | None = None
        self._open: dict[int, list] = collections.defaultdict(list)

    def add(self, records: list) -> list[np.ndarray]:
        done = []
        if self.phases is None and records:
            self.phases = tuple(sorted({p for r in records for p in r.phases} - {"data"}))
        for r in records:
            block = r.step // self.every
            self._open[block].append(r)
            if len(self._open[block]) >= self.every:
                done.append(self._pack(block, self._open.pop(block)))
        for b in [b for b in self._open if b < (records[-1].step // self.every if records else 0) - 1]:
            done.append(self._pack(b, self._open.pop(b)))  # a block that will not fill (skipped steps)
        return done

    def _pack(self, block: int, recs: list) -> np.ndarray:
        def med(values: list[float]) -> float:
            v = [x for x in values if x is not None and np.isfinite(x)]
            return float(np.median(v)) if v else float("nan")

        duration = med([r.duration_s for r in recs])
        comm = med([r.comm_s for r in recs])
        row = [block, len(recs), duration, med([r.duration_s - r.comm_s for r in recs]), comm,
               med([r.phases.get("data", 0.0) for r in recs])]
        for p in self.phases:
            row.append(med([r.phases.get(p, 0.0) - r.phase_comm.get(p, 0.0) for r in recs]))
        return np.asarray(row, dtype=np.float64)


class OnlineDetector:
    """A pipeline listener (see :class:`telemetry.pipeline.thread.Listener`): every rank posts its
    summaries; rank 0 also runs the analysis thread."""

    def __init__(self, store: Any, rank: int, world: int, every: int, window: int, wait_blocks: int,
                 min_interval_s: float = 5.0) -> None:
        self.store = store
        self.rank = rank
        self.world = world
        self.every = every
        self.window = window
        self.wait_blocks = wait_blocks
        self.min_interval_s = min_interval_s
        self.summarizer = BlockSummarizer(every)
        self._phases_posted = False
        self._phase_names: dict[int, list[str]] = {}
        self._last_analysis = 0.0
        self._dirty = False
        self.posted = 0
        self.failures = 0
        self.bad_summaries = 0  # store values that were not a summary vector (skipped)
        self._once = LogOnce()
        self.analyses = 0
        self.analysis_s = 0.0  # rank 0: seconds spent building tables and analyzing, in all
        self.analysis_max_s = 0.0
        self._results: queue.Queue = queue.Queue()  # OnlineResult, for the pipeline to hand on
        self._inbox: queue.Queue = queue.Queue()
        self._seen: set[tuple] = set()
        self._rows: collections.OrderedDict = collections.OrderedDict()  # block -> {rank: vector}
        self._stop = threading.Event()
        self._thread = None
        if rank == 0:
            # Import the analyzer (pandas, the detectors: about 0.5 s here) now, inside init, rather
            # than in the online thread mid-run, where it would hold the GIL against rank 0's
            # training thread and make rank 0 a straggler of its own telemetry's making.
            from .analysis import detectors  # noqa: F401

            self._thread = threading.Thread(target=self._run, name="telemetry-online", daemon=True)
            self._thread.start()

    # ---- every rank, pipeline thread --------------------------------------------------
    def poll(self) -> list[OnlineResult]:
        out = []
        while True:
            try:
                out.append(self._results.get_nowait())
            except queue.Empty:
                return out

    def on_records(self, records: Sequence[StepRecord]) -> None:
        for vec in self.summarizer.add(records):
            try:
                if not self._phases_posted:
                    self.store.set(f"phases/{self.rank}", ",".join(self.summarizer.phases or ()))
                    self._phases_posted = True
                self.store.set(f"s/{int(vec[0])}/{self.rank}", vec.tobytes())
                self.posted += 1
                if self.rank == 0:
                    self._inbox.put(int(vec[0]))
            except Exception as exc:  # noqa: BLE001 - a dead store costs only online detection
                self.failures += 1
                self._once("post", "telemetry: online summary not posted (%s); further failures counted", exc)

    # ---- rank 0, online thread ----------------------------------------------------------
    def _run(self) -> None:
        pending: list[int] = []
        while not self._stop.is_set():
            try:
                pending.append(self._inbox.get(timeout=0.5))
            except queue.Empty:
                pass
            newest = max(pending) if pending else -1
            ready = []
            for block in sorted(set(pending)):
                keys = [f"s/{block}/{r}" for r in range(self.world)]
                try:
                    complete = self.store.check(keys)
                except Exception:  # noqa: BLE001
                    complete = False
                if complete or newest - block >= self.wait_blocks:
                    ready.append(block)
            for block in ready:
                pending = [b for b in pending if b != block]
                self._collect(block)
                self._dirty = True
            if self._dirty and time.monotonic() - self._last_analysis >= self.min_interval_s:
                self._dirty = False
                if self._analyze():  # too few blocks yet: try again with the next, not in 5 s
                    self._last_analysis = time.monotonic()

    def _collect(self, block: int) -> None:
        rows = {}
        for r in range(self.world):
            key = f"s/{block}/{r}"
            try:
                if self.store.check([key]):
                    raw = self.store.get(key)
                    self.store.delete_key(key)
                else:
                    continue
            except Exception:  # noqa: BLE001
                continue
            vec = _summary_vector(raw, block)
            if vec is None:
                self.bad_summaries += 1
                self._once("bad-summary", "telemetry: [online] rank %d's summary of block %d is not a "
                           "summary vector (%d bytes); skipped, further cases counted", r, block, len(raw))
                continue
            rows[r] = vec
        self._rows[block] = rows
        while len(self._rows) > self.window:
            self._rows.popitem(last=False)

    def _names(self, rank: int) -> list[str]:
        if rank not in self._phase_names:
            try:
                raw = self.store.get(f"phases/{rank}").decode()
                self._phase_names[rank] = [p for p in raw.split(",") if p]
            except Exception:  # noqa: BLE001
                return []
        return self._phase_names[rank]

    def _table(self):
        import pandas as pd

        out = []
        for block, rows in self._rows.items():
            for rank, v in rows.items():
                # per-phase values are compute (comm inside the phase removed): comm.* columns say so
                rec = {"rank": rank, "step": block * self.every, "start_s": float(block), "duration_s": v[2],
                       "comm_s": v[4], "data_s": v[5]}
                for i, p in enumerate(self._names(rank)[: len(v) - len(FIXED)]):
                    rec[f"{p}_s"] = v[len(FIXED) + i]
                    rec[f"comm.{p}_s"] = 0.0
                out.append(rec)
        return pd.DataFrame(out)

    def _analyze(self) -> bool:
        """One analysis of the window; False when there were too few blocks to analyze."""
        from .analysis.detectors import analyze

        t0 = time.perf_counter()
        try:
            table = self._table()
            if table.empty or table["step"].nunique() < 4:
                return False
            result = analyze(table, step_resolution=False)
            self.analyses += 1
            took = time.perf_counter() - t0
            self.analysis_s += took
            self.analysis_max_s = max(self.analysis_max_s, took)
            missing = {b: sorted(set(range(self.world)) - set(rows)) for b, rows in self._rows.items()}
            latest = max(self._rows)
            new = []
            for f in result.findings:
                key = (f.kind, tuple(f.ranks), f.phase)
                if key in self._seen or f.severity == "info":
                    continue
                self._seen.add(key)
                d = f.to_dict()
                # Each summary row is a block of K steps, numbered by its first step: first_step,
                # last_step and the evidence all use those numbers (one source), and block_steps
                # says that a step number stands for the K steps from it.
                d["block_steps"] = self.every
                d["online"] = True
                d["time_s"] = time.time()
                new.append(d)
                log.warning("telemetry: [online] %s %s: %s", f.severity, f.kind, f.evidence)
            if missing.get(latest):
                log.warning("telemetry: [online] ranks %s did not report steps %d-%d", missing[latest],
                            latest * self.every, (latest + 1) * self.every - 1)
            streaks = missing_streaks({b: set(rows) for b, rows in self._rows.items()}, self.world, self.wait_blocks)
            for rank, first in streaks.items():
                if ("rank_lost", (rank,), None) in self._seen:
                    continue
                self._seen.add(("rank_lost", (rank,), None))
                d = lost_rank_finding(rank, first, latest, self.every)
                new.append(d)
                log.warning("telemetry: [online] %s rank_lost: %s", d["severity"], d["evidence"])
            counts = dict(result.summary.get("by_kind", {}))
            if streaks:
                counts["rank_lost"] = len(streaks)
            self._results.put(OnlineResult(new, result.summary.get("straggler_score", {}), counts))
        except Exception:  # noqa: BLE001
            self.failures += 1
            self._once("analysis", "telemetry: online analysis failed (further failures counted)", exc_info=True)
        return True  # a failed analysis waits its interval too: no retry storm

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)

    def stats(self) -> dict[str, Any]:
        return {"summaries_posted": self.posted, "analyses": self.analyses, "online_failures": self.failures,
                "online_bad_summaries": self.bad_summaries,
                "analysis_s": round(self.analysis_s, 4), "analysis_max_s": round(self.analysis_max_s, 4)}


def missing_streaks(rows: dict[int, set[int]], world: int, at_least: int) -> dict[int, int]:
    """Ranks missing from each of the latest ``at_least`` (or more) blocks that other ranks reported:
    rank -> the first block of that run of missing blocks."""
    blocks = sorted(b for b, seen in rows.items() if seen)
    out = {}
    for r in range(world):
        run = 0
        for b in reversed(blocks):
            if r in rows[b]:
                break
            run += 1
        if at_least <= run < len(blocks):  # it reported before: not a rank that never started
            out[r] = blocks[len(blocks) - run]
    return out


def lost_rank_finding(rank: int, first_block: int, latest_block: int, every: int) -> dict[str, Any]:
    """Online detection's ``rank_lost``: a rank that stopped posting while its peers went on."""
    from .analysis.findings import Finding

    first, last = first_block * every, (latest_block + 1) * every - 1
    d = Finding(kind="rank_lost", ranks=[rank], phase=None, first_step=first, last_step=last, severity="critical",
                slowdown=1.0, evidence=(f"rank {rank} posted no summary for steps {first}-{last} while its peers "
                                        "did (online detection on rank 0): its process died, stopped responding or "
                                        "left the job"),
                details={"missing_blocks": latest_block - first_block + 1}).to_dict()
    d.update(block_steps=every, online=True, time_s=time.time())
    return d


def _summary_vector(raw: Any, block: int) -> np.ndarray | None:
    """The float64 vector a rank posted for ``block``, or None when ``raw`` is not one: a length
    that is not whole float64s, fewer than the fixed fields, or another block's number."""
    if not isinstance(raw, (bytes, bytearray)) or len(raw) % 8 or len(raw) < 8 * len(FIXED):
        return None
    vec = np.frombuffer(raw, dtype=np.float64)
    return vec if vec[0] == block else None


class OnlineStarter:
    """A pipeline listener that starts online detection once the default process group exists.

    ``telemetry.init`` usually runs after ``init_process_group``, and detection starts at once; when
    it ran first, each pipeline tick checks (one cheap call) until the group appears. Starting on
    rank 0 imports the analyzer there (about 0.5 s, once). If the job ends with no group, that is
    said once at shutdown.
    """

    def __init__(self, make: Callable[[Any], OnlineDetector], find_store: Callable[[], Any | None] | None = None) -> None:
        self._make = make
        self._find_store = find_store or default_store
        self.detector: OnlineDetector | None = None
        self._failed = False
        self.try_start()

    def try_start(self) -> bool:
        if self.detector is None and not self._failed:
            store = self._find_store()
            if store is not None:
                try:
                    self.detector = self._make(store)
                except Exception as exc:  # noqa: BLE001 - online detection is optional; training is not
                    self._failed = True
                    log.warning("telemetry: online detection off (%s)", exc)
        return self.detector is not None

    def on_records(self, records: Sequence[StepRecord]) -> None:
        if self.try_start():
            self.detector.on_records(records)

    def poll(self) -> list[OnlineResult]:
        return self.detector.poll() if self.detector is not None else []

    def stats(self) -> dict[str, Any]:
        return self.detector.stats() if self.detector is not None else {"online_started": False}

    def stop(self) -> None:
        if self.detector is not None:
            self.detector.stop()
        elif not self._failed:
            log.info("telemetry: online detection never started: no torch.distributed process group "
                     "appeared (init_process_group) while telemetry ran")

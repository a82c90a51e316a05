"""The online detector: every rank posts its block summaries to the store; rank 0's online thread
reads the blocks, builds the window's steps table and runs the offline detectors on it.

Rank 0's thread waits for a block to be complete (or ``online_wait_blocks`` blocks late: the missing
ranks are named), keeps the latest ``online_window`` blocks (by default 200, fewer beyond 2,500 ranks:
:func:`online_window`), runs
:func:`telemetry.analysis.detectors.analyze` on them at most every ``online_interval_s``, and hands
new findings and straggler scores to the sinks as an :class:`~telemetry.pipeline.records.OnlineResult`.
A rank missing from the latest blocks while its peers go on is ``rank_lost``
(:mod:`telemetry.analysis.detectors.lost`, from the blocks). Every online finding is marked
``online`` with ``block_steps`` (K: a step number stands for the K steps from it) and ``time_s``.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import queue
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence, cast

import numpy as np

from ..analysis.detectors.blocks import analyze_blocks
from ..analysis_options import AnalysisOptions
from ..logonce import LogOnce
from ..pipeline.records import OnlineResult, StepRecord, TraceRoots
from .reads import StoreReads
from .table import PhaseNames, block_table
from .wire import (
    Block,
    BlockSummarizer,
    decode_phases,
    encode_phases,
    parse_block,
    phases_key,
    rank_of,
    summary_key,
    trace_roots,
)

if TYPE_CHECKING:
    import pandas as pd
    from torch._C._distributed_c10d import Store  # torch.distributed.Store

    from ..analysis.detectors.utilization import UtilizationParams
    from ..analysis.findings import Finding
    from .capture import Captures

log = logging.getLogger("telemetry")
LATE_ROOTS_S = 10.0  # how long a block's trace roots wait for its late ranks' extents
# The window online_window="auto" keeps: WINDOW_BLOCKS blocks, or WINDOW_ROWS rows (ranks x blocks)
# where that is fewer, never under WINDOW_MIN_BLOCKS. Rank 0's table and analysis grow with the rows
# (the time per block at 10,000 ranks: bench/RESULTS.md, "Online detection at scale").
WINDOW_BLOCKS = 200
WINDOW_ROWS = 500_000
WINDOW_MIN_BLOCKS = 20  # low_utilization needs 20 blocks; a persistent straggler shows after about 7


def online_window(setting: int | str, world: int) -> int:
    """The blocks rank 0 keeps for analysis: ``setting`` (the ``online_window`` setting) when it is a
    number, as given; for "auto" (the default), 200 up to 2,500 ranks, then 500,000 // ``world`` (50 at
    10,000 ranks), at least 20: a window of rows, so that the gather, table and analysis of a block stay
    bounded whatever the world size (bench/RESULTS.md, "Online detection at scale")."""
    if setting != "auto":
        return int(setting)
    return min(WINDOW_BLOCKS, max(WINDOW_MIN_BLOCKS, WINDOW_ROWS // max(1, world)))


def online_finding(finding: Finding, every: int) -> dict[str, Any]:
    """A finding of online detection as a findings-JSON dict: each summary row is a block of K
    (``every``) steps, numbered by its first step: first_step, last_step and the evidence all use
    those numbers (one source), and ``block_steps`` says that a step number stands for the K steps
    from it; ``online`` is True and ``time_s`` when it was found."""
    d = finding.to_dict()
    d.update(block_steps=every, online=True, time_s=time.time())
    return d


def further_rise(
    table: pd.DataFrame, f: Finding, since: int = -1, utilization: UtilizationParams | None = None
) -> Finding | None:
    """A further rise inside the ongoing job-wide finding ``f``, or None. A job-wide change that lasts
    hides a second one after it: the regression search merges adjacent raised segments into one
    finding of the same key, never new again. So ``f``'s own stretch (from its first step, or from
    ``since``, the latest rise found in it) is searched again with its level as the base: the costliest
    job-wide finding there at warning or above that begins after that step is the rise, a new finding
    (``details['within']`` names ``f``; the evidence says so), captured as one."""
    from ..analysis.traces.captures import JOB_WIDE
    from ..steptable.matrix import MIN_WINDOWS

    if f.ranks or f.kind not in JOB_WIDE or f.first_step is None:
        return None
    start = max(int(f.first_step), since)
    part = cast("pd.DataFrame", table[table["step"] >= start])
    steps = np.unique(part["step"].to_numpy())
    if len(steps) < 2 * MIN_WINDOWS:
        return None
    # a rise has a stretch of f's own level before it: at least a segment's worth of rows
    rises = [
        g
        for g in analyze_blocks(part, utilization, warm_up=False).findings
        if not g.ranks and g.kind in JOB_WIDE and g.severity != "info" and g.first_step is not None
        if g.first_step >= steps[MIN_WINDOWS]
    ]
    if not rises:
        return None
    g = max(rises, key=lambda g: g.slowdown)
    return dataclasses.replace(
        g,
        details={**g.details, "within": {"kind": f.kind, "phase": f.phase, "first_step": f.first_step}},
        evidence=f"{g.evidence} (a further rise inside the {f.kind} from step {f.first_step})",
    )


class OnlineDetector:
    """A pipeline listener (see :class:`telemetry.pipeline.thread.Listener`): every rank posts its
    summaries; rank 0 also runs the analysis thread, which reads the store through
    :class:`~.reads.StoreReads` (batched, see :mod:`telemetry.online.reads`).
    """

    def __init__(
        self,
        store: Store,
        rank: int,
        world: int,
        every: int,
        window: int | str,
        wait_blocks: int,
        min_interval_s: float = 5.0,
        options: AnalysisOptions | None = None,
        trace_sampler: Callable[[], Callable[[StepRecord], bool]] | None = None,
        captures: Captures | None = None,
    ) -> None:
        self.store = store
        self.captures = captures  # online/capture.py's Captures: profiler captures on findings
        self.options = options or AnalysisOptions()  # the settings the analysis of each window runs with
        self.rank = rank
        self.world = world
        self.every = every
        self.window = online_window(window, world)  # "auto": from the world size
        if rank == 0 and self.window < WINDOW_BLOCKS and window == "auto":
            log.info(
                "telemetry: online detection analyzes the last %d blocks at %d ranks (online_window=auto; "
                "set online_window to choose)",
                self.window,
                world,
            )
        self.wait_blocks = wait_blocks
        self.min_interval_s = min_interval_s
        # With traces exported (the OTLP sink's sampler factory), each block also carries the extents
        # of this rank's traced steps: rank 0 builds each step's trace root from every rank's.
        self.summarizer = BlockSummarizer(every, trace_sampler() if trace_sampler is not None else None)
        self._phases_posted = False
        self.names = PhaseNames(world)
        self._last_analysis = 0.0
        self._dirty = False
        self.posted = 0
        self.failures = 0
        self.bad_summaries = 0  # store values that were not a summary vector (skipped)
        self._once = LogOnce()
        self.reads = StoreReads(store, world, self._once)
        self.analyses = 0
        self.analysis_s = 0.0  # rank 0: seconds spent building tables and analyzing, in all
        self.analysis_max_s = 0.0
        self._results: queue.Queue[OnlineResult | TraceRoots] = queue.Queue()  # for the pipeline to hand on
        self._inbox: queue.Queue = queue.Queue()
        self._seen: set[tuple] = set()
        self._rises: dict[tuple, int] = {}  # an ongoing job-wide finding's key -> its latest further rise's step
        self._rows: collections.OrderedDict = collections.OrderedDict()  # block -> Block
        self._pending: dict[int, int] = {}  # rank 0: block -> how many of its chunks are known complete
        # rank 0, traces on: blocks read before every rank posted -> (deadline, Block so far, missing keys)
        self._late_roots: dict[int, tuple[float, Block, list[str]]] = {}
        self._next_requests = 0.0
        self._stop = threading.Event()
        self._thread = None
        if rank == 0:
            # Import the analyzer (pandas, the detectors: a noticeable pause) now, inside init, rather
            # than in the online thread mid-run, where it would hold the GIL against rank 0's
            # training thread and make rank 0 a straggler of its own telemetry's making.
            from ..analysis import detectors  # noqa: F401 - imported for its cost, paid here

            self._thread = threading.Thread(target=self._run, name="telemetry-online", daemon=True)
            self._thread.start()

    # ---- every rank, pipeline thread --------------------------------------------------
    def poll(self) -> list[OnlineResult | TraceRoots]:
        out = []
        while True:
            try:
                out.append(self._results.get_nowait())
            except queue.Empty:
                return out

    def on_records(self, records: Sequence[StepRecord]) -> None:
        vectors = self.summarizer.add(records)
        self._post(vectors)
        if vectors and self.captures is not None:
            self.captures.poll()  # a capture planned that names this rank: arm it

    def _post(self, vectors: list) -> None:
        for vec in vectors:
            try:
                if not self._phases_posted:
                    self.store.set(phases_key(self.rank), encode_phases(self.summarizer.phases))
                    self._phases_posted = True
                self.store.set(summary_key(int(vec[0]), self.rank), vec.tobytes())
                self.posted += 1
                if self.rank == 0:
                    self._inbox.put(int(vec[0]))
            except Exception as exc:  # noqa: BLE001 - a dead store costs only online detection
                self.failures += 1
                self._once("post", "telemetry: online summary not posted (%s); further failures counted", exc)

    # ---- rank 0, online thread ----------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            self._receive(0.5)
            self._collect_ready()
            if self._late_roots:
                self._late_extents()
            if self.captures is not None and self._rows and time.monotonic() >= self._next_requests:
                self._next_requests = time.monotonic() + 2.0  # captures asked for by hand: looked for every 2 s
                latest = max(self._rows)
                self.captures.requests(latest, self._rows[latest])
            if self._dirty and time.monotonic() - self._last_analysis >= self.min_interval_s:
                self._dirty = False
                if self._analyze():  # too few blocks yet: try again with the next, not in 5 s
                    self._last_analysis = time.monotonic()

    def _receive(self, timeout_s: float) -> None:
        """Rank 0's own posted blocks into ``_pending`` (waiting up to ``timeout_s`` for the first)."""
        try:
            block = self._inbox.get(timeout=timeout_s) if timeout_s > 0 else self._inbox.get_nowait()
            self._pending.setdefault(block, 0)
            while True:
                self._pending.setdefault(self._inbox.get_nowait(), 0)
        except queue.Empty:
            pass

    def _collect_ready(self, force: bool = False) -> None:
        """Collect the pending blocks that are complete, or ``wait_blocks`` late (every one: ``force``)."""
        pending = self._pending
        newest = max(pending) if pending else -1
        ready = []
        for block in sorted(pending):
            pending[block] = self.reads.complete_chunks(block, pending[block])
            if force or pending[block] == self.reads.n_chunks() or newest - block >= self.wait_blocks:
                ready.append(block)
        for block in ready:
            self._collect(block, pending.pop(block))
            self._dirty = True

    def finish(self, budget_s: float) -> list[OnlineResult | TraceRoots]:
        """At shutdown, after the last records, with traces exported: every rank posts its last,
        unfilled block; rank 0 stops its thread and collects the blocks still pending, waiting up to
        ``budget_s`` for the other ranks' last blocks (then takes what is there), so that the last
        steps' trace roots cover every rank too. No analysis runs. Returns the results for the sinks."""
        if self.summarizer.sampler is None:
            return []  # no traces exported: the last blocks would serve no root, and no analysis runs
        deadline = time.monotonic() + budget_s
        self._post(self.summarizer.flush())
        if self._thread is None:
            return []
        self._stop.set()
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            return self.poll()
        try:
            self._receive(0)
            while self._pending and time.monotonic() < deadline:
                self._collect_ready()
                if self._pending:
                    time.sleep(0.02)  # the other ranks' last blocks are on their way: ask again shortly
            self._collect_ready(force=True)
            while self._late_roots and time.monotonic() < deadline:
                self._late_extents()
                if self._late_roots:
                    time.sleep(0.02)
            self._late_extents(force=True)
        except Exception:  # noqa: BLE001 - the last blocks cost only their trace roots
            self.failures += 1
            self._once("finish", "telemetry: online detection's last blocks not read", exc_info=True)
        return self.poll()

    def _collect(self, block: int, complete_chunks: int) -> None:
        """Read ``block`` (its first ``complete_chunks`` chunks known complete) into the window."""
        got = self.reads.read_block(block, complete_chunks)
        traced = self.summarizer.sampler is not None
        late = traced and len(got) < self.world
        self.reads.done(block, got, self.wait_blocks, keep_late=late)
        self._rows[block], rejected = parse_block(block, got)
        if late:  # the trace roots wait for the late ranks' extents (up to LATE_ROOTS_S)
            have = {r for r, _, _ in got}
            missing = [summary_key(block, r) for r in range(self.world) if r not in have]
            self._late_roots[block] = (time.monotonic() + LATE_ROOTS_S, self._rows[block], missing)
        elif traced:
            self._put_roots(block, self._rows[block])
        for r, nbytes in rejected:
            self.bad_summaries += 1
            self._once(
                "bad-summary",
                "telemetry: [online] rank %d's summary of block %d is not a "
                "summary vector (%d bytes); skipped, further cases counted",
                r,
                block,
                nbytes,
            )
        while len(self._rows) > self.window:
            self._rows.popitem(last=False)

    def _put_roots(self, block: int, blk: Block) -> None:
        roots = trace_roots(block, blk, self.every)
        if roots:
            self._results.put(TraceRoots(roots))

    def _late_extents(self, force: bool = False) -> None:
        """Blocks collected before every rank posted (``wait_blocks`` late): read the late ranks'
        vectors when they come, and hand on the trace roots once every rank's extents are in, or at
        ``LATE_ROOTS_S`` (``force``: now) with what came; then the keys still missing are deleted."""
        now = time.monotonic()
        for block in list(self._late_roots):
            deadline, blk, missing = self._late_roots[block]
            present = self.reads.present(missing) if missing else []
            if present:
                got = [(rank_of(k), k, raw) for k, raw in zip(present, self.reads.read(present)) if raw is not None]
                more, _ = parse_block(block, got)
                blk = Block(blk.parts + more.parts)
                self.reads.delete(present)
                missing = [k for k in missing if k not in set(present)]
            if missing and now < deadline and not force:
                self._late_roots[block] = (deadline, blk, missing)
                continue
            del self._late_roots[block]
            self.reads.delete(missing)  # blind, once: a rank later still would leave its key behind
            self._put_roots(block, blk)

    def _table(self):
        """The steps table of the window (see :func:`~.table.block_table`); the phase names of ranks
        not seen before are read first, batched (a rank whose names are not there yet is asked
        again at the next table)."""
        blocks = [(b, blk) for b, blk in self._rows.items() if len(blk.ranks)]
        unnamed = self.names.unnamed(blk for _, blk in blocks)
        if unnamed:
            for rank, raw in self.reads.read_phase_names(unnamed):
                names = decode_phases(raw)
                if names is not None:
                    self.names.learn(rank, names)
        return block_table(blocks, self.names, self.every)

    def _analyze(self) -> bool:
        """One analysis of the window; False when there were too few blocks to analyze."""
        from ..analysis.detectors import settings
        from ..analysis.detectors.lost import lost_rank_of_blocks, missing_streaks

        t0 = time.perf_counter()
        try:
            table = self._table()
            if table.empty or table["step"].nunique() < 4:
                return False
            util = settings(self.options)["utilization"]
            result = analyze_blocks(table, util)
            self.analyses += 1
            took = time.perf_counter() - t0
            self.analysis_s += took
            self.analysis_max_s = max(self.analysis_max_s, took)
            latest = max(self._rows)
            missing = np.setdiff1d(np.arange(self.world), self._rows[latest].ranks).tolist()
            new = []
            ongoing = []  # job-wide findings seen in an earlier analysis, still there
            for f in result.findings:
                key = (f.kind, tuple(f.ranks), f.phase)
                if f.severity == "info":
                    continue
                if key in self._seen:
                    ongoing.append(f)
                    continue
                self._seen.add(key)
                new.append(online_finding(f, self.every))
                log.warning("telemetry: [online] %s %s: %s", f.severity, f.kind, f.evidence)
            for f in self._further_rises(table, ongoing, util):
                new.append(online_finding(f, self.every))
                log.warning("telemetry: [online] %s %s: %s", f.severity, f.kind, f.evidence)
            if missing:  # late data, not a problem to act on: a rank that stays away is rank_lost (below)
                log.info(
                    "telemetry: [online] ranks %s did not report steps %d-%d",
                    missing,
                    latest * self.every,
                    (latest + 1) * self.every - 1,
                )
            streaks = missing_streaks({b: blk.ranks for b, blk in self._rows.items()}, self.world, self.wait_blocks)
            for rank, first in streaks.items():
                if ("rank_lost", (rank,), None) in self._seen:
                    continue
                self._seen.add(("rank_lost", (rank,), None))
                d = online_finding(lost_rank_of_blocks(rank, first, latest, self.every), self.every)
                new.append(d)
                log.warning("telemetry: [online] %s rank_lost: %s", d["severity"], d["evidence"])
            if self.captures is not None:  # a capture for a new finding, or else (once) the run's baseline
                self.captures.consider(new, latest, self._rows[latest])
            counts = dict(result.summary.get("by_kind", {}))
            if streaks:
                counts["rank_lost"] = len(streaks)
            scores = result.summary.get("straggler_score", {})
            self._results.put(OnlineResult(new, scores, counts, straggler_costs(result.findings, scores)))
        except Exception:  # noqa: BLE001 - a failed analysis costs only this analysis (logged once, counted)
            self.failures += 1
            self._once("analysis", "telemetry: online analysis failed (further failures counted)", exc_info=True)
        return True  # a failed analysis waits its interval too: no retry storm

    def _further_rises(
        self, table: pd.DataFrame, ongoing: list[Finding], util: UtilizationParams | None
    ) -> list[Finding]:
        """Each ongoing job-wide finding searched again from its own first step (or from the latest
        further rise found in it): :func:`further_rise`. One more analysis of those blocks, only while
        such a finding lasts."""
        out = []
        for f in ongoing:
            key = (f.kind, (), f.phase)
            g = further_rise(table, f, self._rises.get(key, -1), util)
            if g is not None:
                self._rises[key] = int(cast(int, g.first_step))  # further_rise's have steps
                out.append(g)
        return out

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        self.reads.stop(1.0)

    def stats(self) -> dict[str, Any]:
        return {
            "summaries_posted": self.posted,
            "analyses": self.analyses,
            "online_failures": self.failures,
            "online_bad_summaries": self.bad_summaries,
            "analysis_s": round(self.analysis_s, 4),
            "analysis_max_s": round(self.analysis_max_s, 4),
            **(self.captures.stats() if self.captures is not None else {}),
        }


def straggler_costs(findings: list, scores: dict[int, float]) -> dict[int, float]:
    """Per scored rank, the what-if of the straggler finding naming it in this window (the share of the
    covered steps' time its healing would save; a slow node's finding counts for each of its ranks; at
    any severity: the alert, not the finding, decides what pages), 0 for the rest. The largest, when
    several findings name a rank."""
    out = {int(r): 0.0 for r in scores}
    for f in findings:
        if f.kind == "straggler":
            for r in f.ranks:
                out[int(r)] = max(out.get(int(r), 0.0), float(f.slowdown))
    return out

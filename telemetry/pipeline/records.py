"""The immutable records the pipeline hands to every sink.

A :class:`StepRecord` is one (rank, step): what the steps table holds, plus the exact intervals
(spans) that the trace exporters need. A :class:`Progress` is a heartbeat: what a rank is doing now,
for hang detection while the job runs. An :class:`OnlineResult` is one analysis by online detection
(rank 0): its new findings and the scores behind them. :class:`TraceRoots` are the job's step
extents across ranks, for the trace root that covers every rank's span of a step (rank 0). Field names carry units (``_s`` seconds, ``_bytes``).
Dict fields are not to be mutated by sinks.
"""

from __future__ import annotations

from typing import Any, NamedTuple

# Span kinds in StepRecord.spans
SPAN_PHASE = "phase"
SPAN_COLLECTIVE = "collective"
SPAN_DATA = "data"
SPAN_CHECKPOINT = "checkpoint"  # name: "save", "load", or "save.async" (an async save's upload)
IO_KEYS = ("checkpoint_s", "checkpoint_async_s", "checkpoint_bytes", "checkpoint_io_s", "checkpoint_saves")
# the input's: bytes read from storage in the step (rank and workers), 1/0 every batch already waiting
INPUT_IO_KEYS = ("read_bytes", "input_ready")


class OpStats(NamedTuple):
    """Per collective op within one step."""

    count: int  # pyright: ignore[reportIncompatibleMethodOverride] - the steps table's name (op.<name>.count); tuple.count unused
    duration_s: float  # op time, issue to completion
    blocked_s: float  # time the caller was blocked in it
    bytes: int
    bus_bytes: float  # bytes x busbw factor, for busbw = bus_bytes / duration_s


class Span(NamedTuple):
    kind: str  # SPAN_PHASE, SPAN_COLLECTIVE, SPAN_DATA, SPAN_CHECKPOINT
    name: str
    start_s: float
    end_s: float
    ok: bool = True
    nbytes: int = 0
    group: str = ""  # a collective's process group label (its parallel dimension: hooks/groups.py)
    gid: str = ""  # a collective's group instance (hooks/groups.py:instance; its ranks: RUN/ranks/rank-N.groups.json)
    seq: int = -1  # a collective's call number in that instance, the same on each of its ranks (-1: unknown)


class StepRecord(NamedTuple):
    rank: int
    step: int
    start_s: float  # epoch seconds
    duration_s: float  # the step's wall time (on device timing: GPU time, start to end event)
    ok: bool  # False when user code raised inside the step
    phases: dict[str, float]  # seconds per phase name (data wait included as "data")
    phase_comm: dict[str, float]  # seconds blocked in collectives inside each phase
    comm_s: float  # seconds blocked in collectives during the step
    ops: dict[str, OpStats]
    tokens: int | None
    samples: int | None
    scalars: dict[str, Any]  # last value logged per name in the step
    spans: tuple[Span, ...]
    spans_dropped: int = 0
    device: dict[str, float] | None = None  # latest host/GPU reading at the step's end
    mfu: float | None = None  # model FLOPs utilization of the step, when FLOPs and peak are known
    host_duration_s: float | None = None  # on device timing: the host's wall time of the step
    # per process group's label (its parallel dimension: dp, tp, pp, ..., world, g<hash>): seconds
    # blocked in its collectives during the step, and their bytes
    comm_groups: dict[str, tuple[float, int]] | None = None
    # checkpoints whose blocking part returned in this step (or between the last step and this one),
    # or whose async upload ended in it: IO_KEYS -> seconds blocked, seconds of async upload, bytes,
    # seconds of this rank's own storage writes or reads, saves returned (the steps table's io.* columns);
    # and INPUT_IO_KEYS: bytes read from storage by the rank and its workers (from the first storage
    # reading on), 1.0 / 0.0 every batch taken in the step was already waiting (only with a watched loader)
    io: dict[str, float] | None = None


class Progress(NamedTuple):
    """What one rank is doing now; written by the pipeline every tick."""

    rank: int
    time_s: float  # when this was observed (epoch seconds)
    last_step: int | None  # last completed step
    last_step_end_s: float | None
    open_step: int | None  # step in progress, if any
    open_step_since_s: float | None
    phase: str | None  # innermost open phase
    collective: str | None  # collective the training thread is blocked in, if any
    collective_since_s: float | None
    finished: bool = False  # shutdown() ran
    device: dict[str, float] | None = None  # latest host/GPU reading
    # that collective's group instance and its call number there (hooks/groups.py; None: unknown): "in
    # all_reduce #1234 of group instance g1a2b3c4d", whose label and ranks are in RUN/ranks/rank-N.groups.json
    collective_gid: str | None = None
    collective_seq: int | None = None


class OnlineResult(NamedTuple):
    """One online analysis of the job's recent blocks of steps (rank 0 only)."""

    findings: list[dict[str, Any]]  # new findings, as findings-JSON dicts (with "online": true)
    straggler_scores: dict[int, float]  # per scored rank
    counts: dict[str, int]  # findings in the analyzed window, by kind
    # per scored rank: what it costs the job, the what-if share of the step time of its straggler finding
    # in the analyzed window (0 for a rank no straggler finding names)
    straggler_costs: dict[int, float] | None = None


class TraceRoots(NamedTuple):
    """The extents of traced steps across the ranks that traced them, as rank 0's online thread read
    them from the ranks' block summaries: one ``(step, start_s, end_s, ranks)`` per step, where
    ``ranks`` is how many ranks' spans the extent covers. The OTLP sink builds each step's
    ``train.step`` root from it (see :mod:`telemetry.exporters.otlp`)."""

    roots: list[tuple[int, float, float, int]]


def span_extent(r: StepRecord) -> tuple[float, float]:
    """The interval a rank's step span covers: the step from its start to its end, widened to hold
    every recorded interval of the step (the data wait comes before the step starts: the store
    times a step from the batch's arrival)."""
    start, end = r.start_s, r.start_s + r.duration_s
    for s in r.spans:
        if s.start_s < start:
            start = s.start_s
        if s.end_s > end:
            end = s.end_s
    return start, end

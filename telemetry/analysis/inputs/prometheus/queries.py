"""The PromQL of one load: one ``query_range`` per metric family (step = the window ``W``,
``increase(...[W])``), each returning every rank of the job at once, and the labels that key each
answer's series. Metric names come from :mod:`telemetry.metrics.names`."""

from __future__ import annotations

import json
import math
from typing import cast

from ....metrics import names as N
from .client import STEPS

# The progress gauges: sample name -> the heartbeat's key.
PROGRESS = {
    N.LAST_STEP.name: "last_step",
    N.LAST_STEP_TIMESTAMP.name: "last_step_end_s",
    N.STEP_IN_PROGRESS.name: "in_progress",
    N.BLOCKED_IN_COLLECTIVE.name: "blocked",
}
# The gauges read at each window's end: progress, and every device reading (counters included).
_GAUGES = "|".join(
    s
    for m in (
        *(cast(N.Metric, N.by_series(name)) for name in PROGRESS),  # our own names: each is one of ours
        *N.DEVICE.values(),
        *(f[0] for f in N.DEVICE_FAMILIES.values()),
    )
    for s in m.series
)

# The labels that key each query's series (the first is the rank).
KEYS = {
    "n": ("rank",),
    "dur": ("rank",),
    "phase": ("rank", "phase"),
    "phase_comm": ("rank", "phase"),
    "data": ("rank",),
    "comm": ("rank",),
    "tokens": ("rank",),
    "samples": ("rank",),
    "calls": ("rank", "op"),
    "bytes": ("rank", "op"),
    "op_s": ("rank", "op"),
    "busbw": ("rank", "op"),
    "factor": ("rank", "op"),
    "mfu": ("rank",),
    "input_steps": ("rank",),
    "input_ready": ("rank",),
    "read_bytes": ("rank",),
    "last_step": ("rank",),
    "last_end": ("rank",),
    "seen": ("rank",),
}
# The labels that tell a device family's readings apart (type, reason, direction, counter)
FAMILY_LABELS = tuple(dict.fromkeys(label for _, label, _ in N.DEVICE_FAMILIES.values()))
GAUGE_KEYS = ("rank", "__name__", "gpu", "local_rank", *FAMILY_LABELS)  # the "gauges" query's


def quote(s: str) -> str:
    """A PromQL string literal (Go escapes, which JSON's are)."""
    return json.dumps(s)


def queries(sel: str, w: str) -> dict[str, str]:
    """Every range query of one load, by name: ``sel`` selects the job's series (``job="..."``),
    ``w`` is the window (a PromQL duration)."""

    def inc(metric: str, by: str = "rank") -> str:
        return f"sum by ({by}) (increase({metric}{{{sel}}}[{w}]))"

    busbw, algbw = N.COLLECTIVE_BUSBW.name, N.COLLECTIVE_ALGBW.name

    return {
        "n": inc(N.STEP_DURATION.count),
        "dur": inc(N.STEP_DURATION.sum),
        "phase": inc(N.PHASE_DURATION.sum, "rank, phase"),
        "phase_comm": inc(N.PHASE_BLOCKED.total, "rank, phase"),
        "data": inc(N.DATALOADER_WAIT.sum),
        "comm": inc(N.COLLECTIVE_BLOCKED.total),
        "tokens": inc(N.TOKENS.total),
        "samples": inc(N.SAMPLES.total),
        "calls": inc(N.COLLECTIVE_CALLS.total, "rank, op"),
        "bytes": inc(N.COLLECTIVE_BYTES.total, "rank, op"),
        "op_s": inc(N.COLLECTIVE_DURATION.sum, "rank, op"),
        # bus bytes: the op's bus factor (busbw / algbw of its latest step) x its bytes; without the
        # algbw gauge, the latest busbw x the op's time
        "busbw": f"max by (rank, op) (last_over_time({busbw}{{{sel}}}[{w}]))",
        "factor": f"max by (rank, op) (last_over_time({busbw}{{{sel}}}[{w}]) / last_over_time({algbw}{{{sel}}}[{w}]))",
        "mfu": f"max by (rank) (avg_over_time({N.MFU.name}{{{sel}}}[{w}]))",
        # the input: steps with a watched batch, those whose batch was waiting, bytes read from storage
        "input_steps": inc(N.INPUT_STEPS.total),
        "input_ready": inc(N.INPUT_READY_STEPS.total),
        "read_bytes": inc(N.INPUT_READ_BYTES.total),
        # each window's last step and when it ended: the latest within the window, so a finished job's
        # last window has them too (at the window's end its gauges are already stale)
        "last_step": f"max by (rank) (last_over_time({N.LAST_STEP.name}{{{sel}}}[{w}]))",
        "last_end": f"max by (rank) (last_over_time({N.LAST_STEP_TIMESTAMP.name}{{{sel}}}[{w}]))",
        # when each rank was last scraped (its heartbeat), and the latest gauges at each window's end
        "seen": f"max by (rank) (timestamp({STEPS}{{{sel}}}))",
        "gauges": f'{{__name__=~"{_GAUGES}",{sel}}}',
    }


def ranks_of_job(sel: str) -> str:
    """The series-API match of the job's ranks (one :data:`STEPS` series per rank)."""
    return f"{STEPS}{{{sel}}}"


def raw_samples(sel: str, rank: str, span_s: float) -> str:
    """One rank's raw :data:`STEPS` samples of the last ``span_s`` seconds (a range vector)."""
    return f"{STEPS}{{{sel},rank={quote(rank)}}}[{int(math.ceil(span_s * 1000))}ms]"

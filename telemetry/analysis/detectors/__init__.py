"""Detectors: pure functions from the steps table (and, for hangs, progress heartbeats) to findings.

Each detector is one line of :data:`DETECTORS`, called the same way (``detect(matrix, ctx)``, see
:mod:`.context`), in order: each explains part of the time and passes on what is left (stragglers,
then data stalls, stage and moving imbalance, lasting changes, memory growth, low utilization,
utilization regressions; lost ranks and hangs from the heartbeats; slow checkpoints and the checkpoint
budget). A new detector is one module with a ``detect`` function and one line in the table.

>>> from telemetry.analysis.detectors import analyze
>>> result = analyze(table)                   # doctest: +SKIP
>>> result.to_json()["findings"][0]["kind"]   # doctest: +SKIP
'straggler'
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import pandas as pd

from ...analysis_options import AnalysisOptions
from ...steptable.matrix import StepMatrix, from_table
from ..findings import SEVERITIES, Finding, severity_for
from . import checkpoint, hang, imbalance, lost, memory, regression, stall, straggler, utilization, utilization_drop
from .causes import attach_causes
from .checkpoint import CheckpointParams
from .context import Context, Detector, Found, Params
from .imbalance import ImbalanceParams
from .regression import RegressionParams
from .replay import reprice
from .straggler import detect_stragglers, straggler_scores
from .stretch import StragglerParams
from .summary import WAITS, covered_seconds, goodput_split, settle_ended, share_of_run, summarize, uptime
from .utilization import UtilizationParams

log = logging.getLogger("telemetry")


# The detectors, in the order they run: each reads the shift and findings of those before it.
DETECTORS: tuple[Detector, ...] = (
    Detector("straggler", straggler.detect),
    Detector("data_stall", stall.detect),
    Detector("stage_imbalance", imbalance.detect_stage),
    Detector("imbalance", imbalance.detect_moving),
    Detector("regression", regression.detect),
    Detector("memory_growth", memory.detect),
    Detector("low_utilization", utilization.detect),
    Detector("utilization_regression", utilization_drop.detect),
    Detector("rank_lost", lost.detect, reads="heartbeats"),
    Detector("hang", hang.detect, reads="heartbeats"),
    Detector("slow_checkpoint", checkpoint.detect_slow),
    Detector("checkpoint_budget", checkpoint.detect_budget),
)


@dataclass
class Analysis:
    """An analysis: its findings and summary (:meth:`to_json`: the findings JSON), and what else the
    front door kept that is not in the JSON: the (rank x step) matrix and the what-if's shift, the input
    read (the last window's, for a run read in windows), the line saying how a long run was read, and the
    block table a long run was analyzed from."""

    findings: list[Finding]
    summary: dict[str, Any]
    matrix: StepMatrix | None = field(default=None, repr=False)
    # (ranks x steps) what healing the findings' culprits would save: the what-if's own (not in the JSON)
    shift: np.ndarray | None = field(default=None, repr=False)
    # the RunInput read (telemetry.analysis.inputs.load; Any: the detectors may not import the loader)
    input: Any = field(default=None, repr=False)
    note: str | None = None  # how a long run was read: windows, blocks, a kept summary
    blocks: pd.DataFrame | None = field(default=None, repr=False)  # the block table of a long run

    @property
    def warnings(self) -> list[str]:
        """What reading the input skipped or lacks (the report's warnings)."""
        return self.input.warnings if self.input is not None else []

    def to_json(self) -> dict[str, Any]:
        return {"findings": [f.to_dict() for f in self.findings], "summary": self.summary}


def settings(options: AnalysisOptions) -> dict[str, Any]:
    """The keyword arguments of :func:`analyze` that an AnalysisOptions sets: the hang bound, the
    utilization bounds, the checkpoint advice's failure rate."""
    return {
        "hang_bound_s": options.hang_after_s,
        "utilization": UtilizationParams(bound=options.busy_bound, warn_bound=options.warn_bound),
        "checkpoint": CheckpointParams(failure_rate_per_hour=options.failure_rate_per_hour),
    }


def analyze(
    table: pd.DataFrame,
    progress: Mapping[int, Mapping[str, Any]] | None = None,
    world_size: int | None = None,
    hang_bound_s: float | None = None,
    straggler: StragglerParams | None = None,
    imbalance: ImbalanceParams | None = None,
    regression: RegressionParams | None = None,
    step_resolution: bool = True,
    utilization: UtilizationParams | None = None,
    ops: pd.DataFrame | None = None,
    base: pd.DataFrame | None = None,
    base_name: str = "the base run",
    gaps: bool | None = None,
    checkpoint: CheckpointParams | None = None,
) -> Analysis:
    """Every detector of :data:`DETECTORS` over ``table`` (and the heartbeats ``progress``), then the
    causes, the summary and, with ``ops``, the what-ifs repriced on the trace.

    ``step_resolution=False`` for tables whose rows summarize blocks of steps (online detection):
    moving imbalance is then not looked for, since a block's median averages away the work that
    moves from step to step and what is left between blocks is noise, not imbalance; nor are the
    gaps between steps (a block's rows carry no start time). ``ops``: the per-operation trace the
    table was made from; its findings are then costed by replaying the trace's dependencies
    (:mod:`.replay`). ``base``: a baseline run's steps table (``analyze RUN --base BASE``), whose busy
    share and device signals this run's are held against (``utilization_regression``). ``gaps``: whether
    the time between rows' steps is the job's (default: ``step_resolution``); a live job's windows read
    from Prometheus are blocks of steps whose start times say it."""
    gaps = step_resolution if gaps is None else gaps
    m = from_table(table) if len(table) else None
    sp = straggler or StragglerParams()
    ctx = Context(
        Params(sp, imbalance, regression, utilization, checkpoint, hang_bound_s),
        progress=progress,
        world_size=world_size,
        first_start_s=float(table["start_s"].min()) if len(table) else None,
        step_resolution=step_resolution,
        gaps=gaps,
        base_name=base_name,
        ops=ops,
    )
    if m is not None and m.n_steps:
        ctx.live = _after_warmup(m, sp)
        mb = from_table(base) if base is not None and len(base) else None
        if mb is not None:
            ctx.base, ctx.base_live = mb, _after_warmup(mb, sp)
        ctx.uptime = uptime(m)  # the checkpoint advice's failures and wall time, and the summary's uptime
    for d in DETECTORS:
        if d.applies(m, ctx):
            ctx.add(d.detect(m, ctx))
    findings = ctx.findings
    if m is not None and m.n_steps:
        findings = [settle_ended(m, f) for f in findings]
    failed_causes = attach_causes(m, findings) if m is not None and m.n_steps else (0, None)
    summary = summarize(m, findings, ctx.shift, utilization, gaps, ctx.uptime)
    if ctx.advice:
        summary["checkpoint_advice"] = ctx.advice
    if failed_causes[0]:  # counted in the summary, said once per analysis; never silently "no causes"
        summary["cause_failures"] = {"findings": failed_causes[0], "first": failed_causes[1]}
        log.warning(
            "telemetry: the causes of %d finding(s) could not be worked out (first: %s); those findings "
            "are reported without causes",
            *failed_causes,
        )
    if ops is not None:
        findings = reprice(findings, summary, ops, m, ctx.shift)
    findings.sort(key=lambda f: (-SEVERITIES.index(f.severity), -f.slowdown))
    return Analysis(findings, summary, m, ctx.shift)


def _after_warmup(m: StepMatrix, sp: StragglerParams) -> np.ndarray:
    live = np.zeros(m.n_steps, dtype=bool)
    live[sp.warmup(m.n_steps) :] = True
    return live


__all__ = [
    "DETECTORS",
    "Analysis",
    "Context",
    "Detector",
    "Found",
    "CheckpointParams",
    "Finding",
    "ImbalanceParams",
    "RegressionParams",
    "StepMatrix",
    "StragglerParams",
    "UtilizationParams",
    "WAITS",
    "analyze",
    "covered_seconds",
    "detect_stragglers",
    "from_table",
    "goodput_split",
    "settings",
    "settle_ended",
    "share_of_run",
    "uptime",
    "severity_for",
    "straggler_scores",
]

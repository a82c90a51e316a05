"""The one interface of every detector: ``detect(matrix, ctx) -> Found``.

:class:`Context` holds what a detector reads besides the (rank x step) matrix: the settings, the
warm-up mask, the what-if's shift so far, the findings so far, the heartbeats, the world size, the base
run and the per-operation records. :class:`Found` is what each returns: its findings and what healing
their culprits adds to the shift. :class:`Detector` is one line of the ordered table in
:mod:`telemetry.analysis.detectors`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np

from ...steptable.matrix import StepMatrix
from ..findings import Finding

if TYPE_CHECKING:
    import pandas as pd

    from .params import CheckpointParams, ImbalanceParams, RegressionParams, UtilizationParams
    from .stretch import StragglerParams


@dataclass(frozen=True)
class Params:
    """The detectors' settings (None: each detector's defaults)."""

    straggler: StragglerParams
    imbalance: ImbalanceParams | None = None
    regression: RegressionParams | None = None
    utilization: UtilizationParams | None = None
    checkpoint: CheckpointParams | None = None
    hang_bound_s: float | None = None


@dataclass
class Context:
    """What a detector reads besides the matrix; the loop in ``analyze`` adds each detector's findings
    and shift before the next one runs."""

    params: Params
    live: np.ndarray | None = None  # (S,) the steps after warm-up
    shift: np.ndarray | None = None  # (R, S) what healing the culprits found so far would save
    findings: list[Finding] = field(default_factory=list)  # the findings so far, in detection order
    progress: Mapping[int, Mapping[str, Any]] | None = None  # the heartbeats, by rank
    world_size: int | None = None
    first_start_s: float | None = None  # the table's first step start (a rank lost before it: never began)
    step_resolution: bool = True  # rows are single steps (False: blocks of steps, as online detection's)
    gaps: bool = True  # the time between rows' steps is the job's
    base: StepMatrix | None = None  # a baseline run's matrix (analyze --base)
    base_live: np.ndarray | None = None
    base_name: str = "the base run"
    ops: pd.DataFrame | None = None  # a per-operation trace's own rows
    uptime: dict[str, Any] | None = None  # the run's wall time split (detectors.uptime)
    advice: dict[str, Any] | None = None  # the checkpoint interval advice (the summary's)

    def add(self, got: Found) -> None:
        self.findings += got.findings
        if got.shift is not None:
            self.shift = got.shift if self.shift is None else self.shift + got.shift


@dataclass
class Found:
    """A detector's findings, and what healing their culprits adds to the what-if's shift (None: nothing)."""

    findings: list[Finding] = field(default_factory=list)
    shift: np.ndarray | None = None


@dataclass(frozen=True)
class Detector:
    """One line of the detectors' table: a name and ``detect(matrix, ctx)``; ``reads`` what it needs to
    run: ``matrix`` (a table with steps) or ``heartbeats`` (the progress heartbeats)."""

    name: str
    detect: Callable[[StepMatrix | None, Context], Found]
    reads: str = "matrix"

    def applies(self, m: StepMatrix | None, ctx: Context) -> bool:
        if self.reads == "heartbeats":
            return bool(ctx.progress)
        return m is not None and bool(m.n_steps)

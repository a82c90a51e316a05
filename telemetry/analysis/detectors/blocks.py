"""Analysis of a steps table whose rows are blocks of steps: a row per rank and block of K steps, its
values the block's medians (online detection's window, and the run store's coarse level read by
:mod:`telemetry.analysis.longrun.coarse`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from . import Analysis
    from .utilization import UtilizationParams


def analyze_blocks(
    table: pd.DataFrame, utilization: UtilizationParams | None = None, warm_up: bool = True, **more: Any
) -> Analysis:
    """Analysis of a table of blocks (a row per rank and block of K steps, numbered by its first step).
    Each row is a median of K steps, so a regression is held to the bar the live view holds its
    windows to (segments of 5 blocks, z 3.5), not a single step's (8 rows, z 6, which a change 15
    blocks into the window could never reach); moving imbalance and the gaps between steps are not
    looked for (``step_resolution=False``). ``more``: the rest of :func:`~.analyze`'s arguments."""
    from ...steptable.matrix import MIN_WINDOWS
    from . import analyze
    from .regression import RegressionParams
    from .stretch import StragglerParams

    blocks = RegressionParams(min_segment=MIN_WINDOWS, min_persist_steps=MIN_WINDOWS, z_min=RegressionParams.z_windows)
    straggler = None if warm_up else StragglerParams(warmup_steps=0)  # a stretch past the run's warm-up
    more.setdefault("straggler", straggler)
    return analyze(table, step_resolution=False, utilization=utilization, regression=blocks, **more)

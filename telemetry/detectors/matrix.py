"""The steps table as dense (rank x step) arrays, the shape every detector works on.

Missing (rank, step) cells are NaN. ``compute`` is the time a rank was not blocked in collectives
during the step (``duration_s - comm_s``); per phase, compute is the phase time less the time
blocked in collectives inside it when the table has ``comm.<phase>_s`` columns.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..table import phase_names


@dataclass(frozen=True)
class StepMatrix:
    ranks: np.ndarray  # (R,) rank ids
    steps: np.ndarray  # (S,) step ids
    start: np.ndarray  # (R, S) start_s
    duration: np.ndarray  # (R, S)
    comm: np.ndarray | None  # (R, S) or None when the table has no comm_s
    phases: dict[str, np.ndarray]  # name -> (R, S) seconds in the phase
    phase_compute: dict[str, np.ndarray]  # name -> (R, S) phase time not blocked in collectives
    tokens: np.ndarray | None
    samples: np.ndarray | None

    @property
    def n_ranks(self) -> int:
        return len(self.ranks)

    @property
    def n_steps(self) -> int:
        return len(self.steps)

    @property
    def compute(self) -> np.ndarray:
        if self.comm is None:
            return self.duration
        return self.duration - np.nan_to_num(self.comm)

    def step_time(self) -> np.ndarray:
        """The job's time per step: the median over ranks (a synchronous step ends together)."""
        return nanmedian(self.duration, axis=0)


def nanmedian(a: np.ndarray, axis: int | None = None) -> np.ndarray:
    """np.nanmedian without the all-NaN warnings (an all-NaN slice gives NaN, silently)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(a, axis=axis)


def from_table(table: pd.DataFrame) -> StepMatrix:
    ranks, r_idx = np.unique(table["rank"].to_numpy(), return_inverse=True)
    steps, s_idx = np.unique(table["step"].to_numpy(), return_inverse=True)
    shape = (len(ranks), len(steps))

    def grid(col: str) -> np.ndarray:
        out = np.full(shape, np.nan)
        out[r_idx, s_idx] = table[col].to_numpy(dtype=float, na_value=np.nan)
        return out

    comm = grid("comm_s") if "comm_s" in table.columns else None
    phases = {p: grid(f"{p}_s") for p in phase_names(table)}
    phase_compute = {}
    for p, arr in phases.items():
        col = f"comm.{p}_s"
        phase_compute[p] = arr - np.nan_to_num(grid(col)) if col in table.columns else arr
    return StepMatrix(
        ranks=ranks, steps=steps, start=grid("start_s"), duration=grid("duration_s"), comm=comm,
        phases=phases, phase_compute=phase_compute,
        tokens=grid("tokens") if "tokens" in table.columns else None,
        samples=grid("samples") if "samples" in table.columns else None)

"""The steps table as dense (rank x step) arrays, the shape every detector works on.

Missing (rank, step) cells are NaN. ``compute`` is the time a rank was busy with its own work:
``duration_s - comm_s`` when the table says how much of each phase was spent blocked in
collectives (``comm.<phase>_s``, as this library writes), else the sum of its phases but the data
wait (tables whose phases are pure compute, such as converted per-operation traces), else
``duration_s - comm_s``. ``groups`` are the peer groups: the pipeline stage when the table has a
``stage`` (or ``pp_rank``) column, else one group.
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
    compute: np.ndarray  # (R, S) busy time, see the module doc
    groups: np.ndarray  # (R,) peer group id (pipeline stage), 0 when unknown
    extra: dict[str, np.ndarray]  # other numeric columns (dev.*, mfu), (R, S)

    @property
    def n_ranks(self) -> int:
        return len(self.ranks)

    @property
    def n_steps(self) -> int:
        return len(self.steps)

    @property
    def data(self) -> np.ndarray:
        d = self.phases.get("data")
        return np.zeros_like(self.duration) if d is None else np.nan_to_num(d)

    @property
    def has_layout(self) -> bool:
        return len(np.unique(self.groups)) > 1

    def step_time(self) -> np.ndarray:
        """The job's time per step, data wait included: the median over ranks of duration + data
        (a synchronous step ends together; the wait before it delays the next one)."""
        return nanmedian(self.duration + self.data, axis=0)


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
    per_phase_comm = False
    for p, arr in phases.items():
        col = f"comm.{p}_s"
        if col in table.columns:
            per_phase_comm = True
            phase_compute[p] = arr - np.nan_to_num(grid(col))
        else:
            phase_compute[p] = arr
    duration = grid("duration_s")
    busy = [v for k, v in phases.items() if k != "data"]
    if comm is not None and (per_phase_comm or not busy):
        compute = duration - np.nan_to_num(comm)
    elif busy:
        compute = np.nansum(np.stack(busy), axis=0)
        compute[np.isnan(duration)] = np.nan
    else:
        compute = duration.copy()
    gcol = "stage" if "stage" in table.columns else ("pp_rank" if "pp_rank" in table.columns else None)
    if gcol is not None:
        per_rank = table.groupby("rank")[gcol].first().reindex(ranks)
        groups = pd.to_numeric(per_rank, errors="coerce").fillna(-1).to_numpy(dtype=int)
    else:
        groups = np.zeros(len(ranks), dtype=int)
    extra = {c: grid(c) for c in table.columns
             if isinstance(c, str) and (c.startswith("dev.") or c == "mfu") and pd.api.types.is_numeric_dtype(table[c])}
    return StepMatrix(
        ranks=ranks, steps=steps, start=grid("start_s"), duration=duration, comm=comm,
        phases=phases, phase_compute=phase_compute,
        tokens=grid("tokens") if "tokens" in table.columns else None,
        samples=grid("samples") if "samples" in table.columns else None,
        compute=compute, groups=groups, extra=extra)

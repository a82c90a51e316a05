"""The rank x step grid as the views draw it: which steps a range selects, and how many steps a
chart can hold before consecutive steps are grouped into blocks. No Streamlit here."""

from __future__ import annotations

from typing import cast

import numpy as np
import pandas as pd

from telemetry.steptable.matrix import StepMatrix, nanmax_runs, nanmedian

MAX_HEATMAP_COLUMNS = 400  # steps are grouped into at most this many blocks (block medians)
MAX_LINE_POINTS = 2000  # steps per line chart, beyond which consecutive steps are grouped
# ranks are grouped into at most this many bands (each cell the band's highest: a slow rank shows), so
# that a 10,000-rank heatmap is a picture a page can hold (1,024 rows were 0.7 px each) and a browser draws
MAX_HEATMAP_ROWS = 256
# ... and, banded, into no more bands than keep the cells at this many (at least 64 bands): a browser's
# time to draw a heatmap grows with its cells (bench/RESULTS.md, "Dashboard in headless Chromium"), and
# 256 bands of a 720 px chart are under 3 px each; 10,000 ranks x 157 columns are 64 bands of 157
MAX_HEATMAP_CELLS = 10_000
MIN_HEATMAP_BANDS = 64


def _blocks(n: int, at_most: int) -> tuple[int, int]:
    """(steps per block, whole blocks) that group ``n`` steps into at most ``at_most`` blocks; the
    last few steps that do not fill a block are left out of the picture."""
    width = -(-n // at_most)
    return width, n // width


def step_columns(m: StepMatrix, steps: tuple[int, int] | None) -> np.ndarray:
    """A mask over ``m.steps``: the steps from ``steps[0]`` to ``steps[1]`` (all when None)."""
    if steps is None:
        return np.ones(m.n_steps, dtype=bool)
    return (m.steps >= steps[0]) & (m.steps <= steps[1])


def grid_cells(
    m: StepMatrix,
    a: np.ndarray,
    ranks: list[int] | None = None,
    steps: tuple[int, int] | None = None,
    max_columns: int = MAX_HEATMAP_COLUMNS,
    max_rows: int = MAX_HEATMAP_ROWS,
    last: np.ndarray | None = None,
) -> pd.DataFrame:
    """An (R, S) array of ``m``'s shape as long-format cells (``rank``, ``step``, ``value``) over the
    chosen ranks and steps. Beyond ``max_columns`` steps, consecutive steps are grouped and each cell
    is the block's median (labelled by the block's first step), so one slow rank still stands out at
    10,000 steps. Beyond ``max_rows`` ranks, consecutive ranks (in rank order) are grouped into bands
    (at most ``max_rows``, fewer where the cells would pass ``MAX_HEATMAP_CELLS``, but at least
    ``MIN_HEATMAP_BANDS``) and each cell is the band's highest (``rank``: the band's first rank, ``last_rank`` its last), so
    one slow rank still stands out at 10,000 ranks. ``last``: ``m``'s rows are already such bands (a long
    run's picture, telemetry.analysis.longrun.kept_picture), each ending at this rank; they are grouped further, a
    whole number of them to a band, where there are more than the cells allow."""
    cols = step_columns(m, steps)
    rows = np.ones(m.n_ranks, dtype=bool) if ranks is None or last is not None else np.isin(m.ranks, ranks)
    a, step_ids, rank_ids = a[rows][:, cols], m.steps[cols], m.ranks[rows]
    if a.shape[1] > max_columns:
        width, nb = _blocks(a.shape[1], max_columns)
        a = nanmedian(a[:, : nb * width].reshape(a.shape[0], nb, width), axis=2)
        step_ids = step_ids[: nb * width : width]
    if last is not None or a.shape[0] > max_rows:
        order = np.argsort(rank_ids, kind="stable")
        a, rank_ids = a[order], rank_ids[order]
        ends = rank_ids if last is None else np.asarray(last)[order]
        bands = min(max_rows, max(MIN_HEATMAP_BANDS, MAX_HEATMAP_CELLS // max(a.shape[1], 1)))
        height = -(-a.shape[0] // bands)
        starts = np.arange(0, a.shape[0], height)
        a = nanmax_runs(a, starts)  # a band with no value at a step (NaN only): NaN there, drawn empty
        last = ends[np.minimum(starts + height, len(rank_ids)) - 1]
        rank_ids = rank_ids[starts]
    grid = pd.DataFrame(a, index=rank_ids, columns=step_ids)
    grid.index.name, grid.columns.name = "rank", "step"
    cells = grid.stack(future_stack=True).rename("value").reset_index()
    if last is not None:
        cells["last_rank"] = cells["rank"].map(dict(zip(rank_ids.tolist(), last.tolist())))
    return cells


def rank_bands(cells: pd.DataFrame) -> tuple[list[tuple[int, int]], int]:
    """The bands of cells :func:`grid_cells` grouped by rank (a ``last_rank`` column): each band's first
    and last rank, in rank order, and the ranks a band holds."""
    b = cast(pd.DataFrame, cells[["rank", "last_rank"]]).drop_duplicates().sort_values("rank")
    pairs = list(zip(b["rank"].astype(int).tolist(), b["last_rank"].astype(int).tolist()))
    return pairs, pairs[0][1] - pairs[0][0] + 1

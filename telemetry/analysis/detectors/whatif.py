"""What-if replay of a synchronous step: how long would the steps take with the culprit healthy?

In data-parallel training a step ends when the slowest rank's work ends (everyone waits for it at
the collective), so step time ~ max over ranks of (data wait + compute) + the collective's own time.
Removing a culprit's excess (``shift``, seconds per rank and step) shortens a step by
``max(work) - max(work - shift)``; healthy ranks' noise still sets the pace, so the estimate never
credits more than the culprit actually cost. With pipeline parallelism the other stages' time is
also on the critical path, so the same replay over-estimates a stage's cost (see docs/detectors.md). A
per-operation trace's findings are costed by replaying its dependencies instead (:mod:`.replay`).
"""

from __future__ import annotations

import warnings

import numpy as np

from ...steptable.matrix import StepMatrix, nan_to_zero

TOP = 8


def _work(m: StepMatrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(work, per-step max, top-8 rank indices per step), cached: work = data wait + compute."""
    cached = m.cache.get("work")
    if cached is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            work = m.compute + m.data
            filled = np.where(np.isnan(work), -np.inf, work) if np.isnan(work).any() else work
            k = min(TOP, work.shape[0])
            top = (
                np.argpartition(-filled, k - 1, axis=0)[:k]
                if k < work.shape[0]
                else np.broadcast_to(np.arange(work.shape[0])[:, None], work.shape)
            )
            cached = m.cache["work"] = (work, np.nanmax(work, axis=0), np.asarray(top))
    return cached


def step_savings(m: StepMatrix, shift: np.ndarray | None) -> np.ndarray:
    """Seconds saved per step when each rank's work is reduced by ``shift`` (R x S, >= 0).

    When only a few ranks are shifted (stragglers), the others' max comes from a cached top-8 per
    step, so costing a finding does not touch the whole matrix."""
    if shift is None or not shift.any():
        return np.zeros(m.n_steps)
    work, before, top = _work(m)
    rows = np.flatnonzero(shift.any(axis=1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if len(rows) < top.shape[0]:
            vals = np.take_along_axis(work, top, axis=0)  # (k, S)
            vals = np.where(np.isin(top, rows) | np.isnan(vals), -np.inf, vals)
            others = vals.max(axis=0)  # the largest unshifted rank is among the top k
            mine = np.nanmax(work[rows] - nan_to_zero(shift[rows]), axis=0)
            after = np.fmax(others, mine)
        else:
            after = np.nanmax(work - nan_to_zero(shift), axis=0)
    saving = nan_to_zero(before - after)
    return np.clip(saving, 0.0, nan_to_zero(m.step_time()))


def slowdown(m: StepMatrix, shift: np.ndarray, step_mask: np.ndarray | None = None) -> float:
    """``1 - ideal / actual`` over the masked steps (all steps when no mask)."""
    t = nan_to_zero(m.step_time())
    saving = step_savings(m, shift)
    if step_mask is not None:
        t, saving = t[step_mask], saving[step_mask]
    actual = float(t.sum())
    if actual <= 0:
        return 0.0
    return float(saving.sum() / actual)

"""What-if replay of a synchronous step: how long would the steps take with the culprit healthy?

In data-parallel training a step ends when the slowest rank's work ends (everyone waits for it at
the collective), so step time ~ max over ranks of (data wait + compute) + the collective's own time.
Removing a culprit's excess (``shift``, seconds per rank and step) shortens a step by
``max(work) - max(work - shift)``; healthy ranks' noise still sets the pace, so the estimate never
credits more than the culprit actually cost. With pipeline parallelism the other stages' time is
also on the critical path, so the same replay over-estimates a stage's cost (see README).
"""

from __future__ import annotations

import warnings

import numpy as np

from .matrix import StepMatrix, nan_to_zero


def step_savings(m: StepMatrix, shift: np.ndarray) -> np.ndarray:
    """Seconds saved per step when each rank's compute is reduced by ``shift`` (R x S, >= 0)."""
    before = m.cache.get("work_max")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        c = m.compute + m.data
        if before is None:
            before = m.cache["work_max"] = np.nanmax(c, axis=0)
        if shift is None or not shift.any():
            return np.zeros(m.n_steps)
        after = np.nanmax(c - nan_to_zero(shift), axis=0)
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

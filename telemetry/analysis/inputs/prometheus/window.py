"""The window rule: how long a step of a live job is, and the windows of a load.

Unless ``window_s`` is given, ``W = max(15 s, 4 x the scrape interval, range / 300)``, rounded up to
a whole second: at most about 300 windows, each holding at least 4 scrapes. The scrape interval is
the median spacing of one rank's ``train_steps_total`` samples. Given or not, ``W`` is then raised
where needed so that one query returns at most 11,000 points per series (Prometheus's own limit) and
one load holds at most 250,000 (rank, window) cells; a warning says so. The range
``[now - minutes, now]`` is cut into ``n = max(1, floor(range / W))`` windows that end at ``now``
(:class:`Grid`).
"""

from __future__ import annotations

import math
from typing import overload

import numpy as np

from ....steptable.table import TableError
from .client import Api
from .queries import raw_samples

MAX_POINTS = 11_000  # per series in one range query: Prometheus refuses more
MAX_CELLS = 250_000  # (rank, window) cells in one load: bounds the answer's size and the records
MIN_WINDOW_S = 15.0
TARGET_WINDOWS = 300
SCRAPES_PER_WINDOW = 4
INTERVAL_LOOKBACK_S = 900.0  # how far back one rank's raw samples are read for the scrape interval


class Grid:
    """``n`` windows of ``w_ms`` ms; window ``k`` ends at ``first_ms + k * w_ms`` (epoch ms)."""

    def __init__(self, first_ms: int, w_ms: int, n: int) -> None:
        self.first_ms, self.w_ms, self.n = first_ms, w_ms, n

    @classmethod
    def ending(cls, now: float, range_s: float, w: float) -> "Grid":
        """The windows of ``w`` seconds (in whole ms) that end at ``now`` and fit in ``range_s``."""
        w_ms = int(math.ceil(w * 1000 - 1e-6))
        n = max(1, int((range_s * 1000) // w_ms))
        end_ms = int(math.floor(now * 1000))
        return cls(end_ms - (n - 1) * w_ms, w_ms, n)

    @property
    def end_ms(self) -> int:
        return self.first_ms + (self.n - 1) * self.w_ms

    @overload
    def start_s(self, k: np.ndarray) -> np.ndarray: ...

    @overload
    def start_s(self, k: np.integer) -> np.float64: ...

    def start_s(self, k: np.ndarray | np.integer) -> np.ndarray | np.float64:
        return (self.first_ms + (k - 1) * self.w_ms) / 1000.0

    def index(self, t: np.ndarray) -> np.ndarray:
        """The window that ends at each time ``t`` (epoch s; a sample of a range query's step)."""
        return np.rint((t * 1000 - self.first_ms) / self.w_ms).astype(np.int64)


def range_s(minutes: float) -> float:
    try:
        m = float(minutes)
    except (TypeError, ValueError):
        m = math.nan
    if not (math.isfinite(m) and m > 0):
        raise TableError(f"minutes={minutes!r}; accepted: a number of minutes above 0")
    return m * 60.0


def scrape_interval(api: Api, sel: str, rank: str, now: float, range_s: float) -> float | None:
    """Median spacing of one rank's raw train_steps_total samples (the last 15 min, else the range)."""
    spans = [min(range_s, INTERVAL_LOOKBACK_S)]
    if range_s > spans[0]:
        spans.append(range_s)
    for span in spans:
        best: list[float] = []
        for _, points in api.query(raw_samples(sel, rank, span), now):
            if len(points) > len(best):
                best = [t for t, _ in points]
        if len(best) >= 3:
            gaps = np.diff(np.sort(best))
            gaps = gaps[gaps > 0]
            if len(gaps):
                return float(np.median(gaps))
    return None


def window(range_s: float, window_s: float | None, interval: float | None, n_ranks: int, warnings: list[str]) -> float:
    """The window length in seconds (see the module doc)."""
    if window_s is None:
        # whole seconds; a scrape interval measured a few ms long does not add one
        w = float(math.ceil(max(MIN_WINDOW_S, SCRAPES_PER_WINDOW * (interval or 0.0), range_s / TARGET_WINDOWS) - 0.05))
    else:
        try:
            w = float(window_s)
        except (TypeError, ValueError):
            w = math.nan
        if not (math.isfinite(w) and w >= 0.001):
            raise TableError(f"window_s={window_s!r}; accepted: seconds, at least 0.001")
        if interval and w < 2 * interval:
            warnings.append(
                f"windows of {w:g} s hold fewer than 2 scrapes (every {interval:g} s): windows "
                "without two samples of a rank show no steps"
            )
    bound = max(range_s / MAX_POINTS, range_s * n_ranks / MAX_CELLS)
    if w < bound:
        raised = float(math.ceil(bound))
        warnings.append(
            f"windows of {w:g} s would give {range_s / w * n_ranks:,.0f} (rank, window) cells; "
            f"raised to {raised:g} s (at most {MAX_POINTS:,} windows and {MAX_CELLS:,} cells)"
        )
        w = raised
    return w

"""A live job from Prometheus, opened over the whole job or its last ``--last`` seconds: what
``telemetry analyze --prometheus`` and the dashboard's Prometheus source both read
(:func:`telemetry.analysis.run.analyze_live` analyzes it), so that the two say the same thing.

Until the job has :data:`NEED_WINDOWS` windows in which it made steps, the window-based detectors
have too little to decide (a straggler needs its warm-up and then :attr:`StragglerParams.min_run`
windows): the result then holds no such finding and ``summary.collecting`` says what is missing
(``{"have": H, "need": N, "window_s": W}``). What the heartbeats alone show, a hang or a rank that
stopped reporting, is reported from the first load.

The range: ``last_s`` seconds, or by default the whole job, from its first sample (found to within
:data:`START_RESOLUTION_S`) up to now, at most :data:`MAX_RANGE_S` (24 h)."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

from ....steptable.table import TableError
from .client import STEPS, Api
from .queries import quote
from .source import open_prometheus
from .window import MIN_WINDOW_S

if TYPE_CHECKING:
    from ..load import RunInput

NEED_WINDOWS = 8  # windows with steps before the window-based detectors run: 2 of warm-up, 5 to find, 1 spare
MAX_RANGE_S = 24 * 3600.0
START_RESOLUTION_S = 60  # the job's first sample is found to within this (a subquery's step)
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0, "y": 365 * 86400.0}
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")


def parse_duration(text: str) -> float:
    """A Prometheus duration (``30m``, ``2h``, ``1h30m``, ``90s``) in seconds; ValueError with a sentence."""
    s = str(text).strip()
    parts = _DURATION.findall(s)
    if not s or "".join(n + u for n, u in parts) != s:
        raise ValueError(f"--last {text!r}; accepted: a Prometheus duration such as 30m, 2h or 1h30m")
    seconds = sum(int(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise ValueError(f"--last {text!r}; accepted: a duration above 0")
    return seconds


def job_span_s(url: str, job: str | None, now: float, timeout_s: float = 10.0) -> float:
    """Seconds from the job's first ``train_steps_total`` sample (within the last 24 h) to ``now``, plus
    the search's resolution as margin and at least one window; :data:`MAX_RANGE_S` when the server
    cannot say (the load that follows then says why)."""
    api = Api(url, timeout_s)
    sel = f"job={quote(job)}" if job is not None else ""
    res = START_RESOLUTION_S
    # A subquery: whether the job had a sample, at every whole minute of the last 24 h; the job began
    # at most a minute before the first such minute. A job younger than the last whole minute has none:
    # then the same every second over the last two minutes.
    for span, step in ((int(MAX_RANGE_S), res), (2 * res, 1)):
        try:
            answer = api.query(f"min(timestamp({STEPS}{{{sel}}}))[{span}s:{step}s]", now)
        except TableError:
            return MAX_RANGE_S
        firsts = [points[0][0] for _, points in answer if points]
        if firsts:
            return float(min(MAX_RANGE_S, max(MIN_WINDOW_S, now - min(firsts) + step)))
    return MAX_RANGE_S


def collecting(run: RunInput) -> dict[str, Any] | None:
    """``{"have", "need", "window_s"}`` while the job has fewer than :data:`NEED_WINDOWS` windows with
    steps; None once it has enough."""
    have = int(run.table["step"].nunique()) if len(run.table) else 0
    if have >= NEED_WINDOWS:
        return None
    return {"have": have, "need": NEED_WINDOWS, "window_s": run.meta.get("window_s")}


def open_live(
    url: str,
    job: str | None = None,
    *,
    last_s: float | None = None,
    window_s: float | None = None,
    now: float | None = None,
    timeout_s: float = 10.0,
):
    """The job over ``last_s`` seconds (default: the whole job, at most 24 h) as a RunInput."""
    now = time.time() if now is None else float(now)
    span = last_s if last_s is not None else job_span_s(url, job, now, timeout_s)
    run = open_prometheus(url, job, minutes=span / 60.0, window_s=window_s, now=now, timeout_s=timeout_s)
    if run.meta["windows"] < NEED_WINDOWS:
        run.warnings.append(
            f"the range holds {run.meta['windows']} windows of {run.meta['window_s']:g} s; the detectors need "
            f"{NEED_WINDOWS} with steps: widen it (--last) to at least {NEED_WINDOWS * run.meta['window_s']:g} s"
            if last_s is not None
            else f"the job is {span:.0f} s old: {run.meta['windows']} window(s) of {run.meta['window_s']:g} s so far"
        )
    return run

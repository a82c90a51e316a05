"""The loader of a live job: :func:`open_prometheus` (a job's last minutes, as a
:class:`~telemetry.analysis.inputs.load.RunInput`) and :func:`list_jobs`; which job and which ranks are
read, and every step of a load put together (see :mod:`telemetry.analysis.inputs.prometheus`)."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from ....steptable.table import TableError, validate
from ..load import RunInput, _coverage
from .client import STEPS, Api, run_queries
from .queries import GAUGE_KEYS, KEYS, queries, quote, ranks_of_job
from .reshape import arrays, as_int, split_gauges
from .steps import build, progress
from .window import Grid, range_s, scrape_interval, window

PROMETHEUS = "prometheus"  # RunInput.kind

MAX_RANKS = 4096
MAX_NAMES = 20  # job names listed in a message


def list_jobs(url: str, timeout_s: float = 5.0, *, minutes: float | None = None) -> list[str]:
    """The ``job`` label values that have ``train_steps_total`` series on the server, sorted; with
    ``minutes``, only those with samples in the last ``minutes``. Raises :class:`TableError`
    when the server cannot be read."""
    api = Api(url, timeout_s)
    if minutes is None:
        return api.jobs()
    now = time.time()
    return api.jobs(now - range_s(minutes), now)


def open_prometheus(
    url: str,
    job: str | None = None,
    *,
    minutes: float = 30.0,
    window_s: float | None = None,
    now: float | None = None,
    timeout_s: float = 10.0,
) -> RunInput:
    """The last ``minutes`` (up to ``now``, epoch seconds; default: the current time) of ``job`` on
    the Prometheus server at ``url`` (its base URL, e.g. ``http://localhost:9090``), as a
    :class:`RunInput` of kind :data:`PROMETHEUS` (see :mod:`telemetry.analysis.inputs.prometheus` for what
    a step is, and :mod:`.window` for the window rule). ``job`` may be left out when the server
    holds exactly one training job in the range. ``timeout_s`` bounds each wait on the server, and
    a request's answer is read within :data:`~.client.ANSWER_TIMEOUTS` x ``timeout_s``; the first
    failed query ends the load. Raises :class:`TableError` with a sentence for the user: server
    unreachable or silent, not a Prometheus API, no training job, unknown or ambiguous job, more
    than :data:`MAX_RANKS` ranks."""
    api = Api(url, timeout_s)
    span_s = range_s(minutes)
    now = time.time() if now is None else float(now)
    if not math.isfinite(now):
        raise TableError(f"now={now!r}; accepted: epoch seconds")
    job = _choose_job(api, job, now - span_s, now, minutes)
    sel = f"job={quote(job)}"
    ranks, rank_labels = _ranks(api, sel, job, now - span_s, now, minutes)
    warnings: list[str] = []
    interval = scrape_interval(api, sel, rank_labels[min(rank_labels)], now, span_s)
    w = window(span_s, window_s, interval, len(ranks), warnings)
    grid = Grid.ending(now, span_s, w)
    first_ms, w_ms, end_ms = grid.first_ms, grid.w_ms, grid.end_ms

    results = run_queries(api, queries(sel, f"{w_ms}ms"), first_ms, end_ms, w_ms)
    for x in dict.fromkeys(x for _, warn in results.values() for x in warn):
        warnings.append(f"Prometheus: {x}")
    with np.errstate(all="ignore"):  # absurd values (1e308 + 1e308) become inf, then are dropped
        g = {name: arrays(grid, series, KEYS[name]) for name, (series, _) in results.items() if name != "gauges"}
        gauges = arrays(grid, results["gauges"][0], GAUGE_KEYS, add=False)
        progress_g, device_g = split_gauges(gauges, ranks)
        table, records = build(grid, g, device_g, ranks, warnings)
    table = validate(table, source=f"Prometheus {api.url} job {job}", owned=True)
    beats = progress(ranks, g["seen"], progress_g, device_g, grid.start_s(np.int64(0)))
    meta: dict[str, Any] = {
        "job": job,
        "world_size": len(ranks),
        "window_s": w_ms / 1000,
        "windows": grid.n,
        "source": PROMETHEUS,
        "url": api.url,
        "start_time_s": (first_ms - w_ms) / 1000,
        "end_time_s": end_ms / 1000,
        "scrape_interval_s": interval,
        "hosts": {str(r): info["node"] for r, info in ranks.items() if info.get("node") is not None},
    }
    return RunInput(
        api.url,
        PROMETHEUS,
        table,
        meta=meta,
        ranks=ranks,
        progress=beats,
        records=records,
        warnings=warnings + _coverage(table),
    )


# ---- the job and its ranks ----------------------------------------------------------------------
def _names(names: list[str]) -> str:
    shown = ", ".join(names[:MAX_NAMES])
    return shown + (f" and {len(names) - MAX_NAMES} more" if len(names) > MAX_NAMES else "")


def _nothing(url: str) -> TableError:
    return TableError(
        f"Prometheus at {url} holds no {STEPS} series: is the training job's /metrics "
        "scraped? telemetry writes each job's targets for file_sd_configs to its prometheus_sd_dir "
        "(default: prometheus_targets/ beside the run directory); scrape <that dir>/*.json with "
        "honor_labels: true"
    )


def _choose_job(api: Api, job: str | None, start: float, end: float, minutes: float) -> str:
    recent = api.jobs(start, end)
    span = f"the last {minutes:g} min"
    if job is not None:
        if job in recent:
            return job
        every = api.jobs()
        if job in every:
            raise TableError(
                f"job {job!r} has no {STEPS} sample in {span} on {api.url} (it has older ones: widen the time range)"
            )
        if not every:
            raise _nothing(api.url)
        raise TableError(f"no job {job!r} on {api.url}; the training jobs there: {_names(every)}")
    if len(recent) == 1:
        return recent[0]
    if recent:
        raise TableError(
            f"{api.url} holds {len(recent)} training jobs in {span} ({_names(recent)}): choose one with --job"
        )
    every = api.jobs()
    if not every:
        raise _nothing(api.url)
    raise TableError(
        f"no training job on {api.url} has samples in {span}; older ones: {_names(every)} "
        "(choose one with --job and widen the time range)"
    )


def _ranks(
    api: Api, sel: str, job: str, start: float, end: float, minutes: float
) -> tuple[dict[int, dict[str, Any]], dict[int, str]]:
    """{rank: {"node", "local_rank"}} and each rank's label value, from the series API."""
    ranks: dict[int, dict[str, Any]] = {}
    labels: dict[int, str] = {}
    for s in api.series(ranks_of_job(sel), start, end):
        r = as_int(s.get("rank"))
        if r is None or r < 0:
            continue
        ranks[r] = {"node": s.get("node"), "local_rank": as_int(s.get("local_rank"))}
        labels[r] = s["rank"]
        if len(ranks) > MAX_RANKS:
            raise TableError(
                f"job {job!r} on {api.url} has more than {MAX_RANKS} ranks; this view reads at most "
                f"{MAX_RANKS} (query Prometheus with recording rules that aggregate across ranks)"
            )
    if not ranks:
        raise TableError(
            f"job {job!r} on {api.url} has no {STEPS} series with a rank label in the last {minutes:g} min"
        )
    return dict(sorted(ranks.items())), labels

"""A live job read from a Prometheus server's HTTP API, as the loader's :class:`~.load.RunInput`.

What our exporter (``exporters/prometheus.py``) publishes per rank, scraped by Prometheus, becomes
a steps table, progress heartbeats and per-step records, so the detectors and the dashboard show
a live job as they show a run directory. Only the standard library speaks HTTP here (urllib).

A step here is a window of time. The range ``[now - minutes, now]`` is cut into ``n`` windows of
``W`` seconds that end at ``now``: window ``k`` (``k = 0 .. n-1``, ``n = max(1, floor(range / W))``)
is ``(now - (n-k) W, now - (n-1-k) W]``. One row per (rank, window) in which the rank completed
steps: ``step = k``, ``start_s`` = the window's start (epoch s), ``duration_s`` = the mean step
wall time in it (increase of ``train_step_duration_seconds_sum`` / increase of its ``_count``),
``<phase>_s`` = each phase's mean time per step (phase sum increase / step count increase; a phase
that did not run in the window took 0), ``data_s`` the data-loader wait likewise, ``comm_s`` =
increase of ``train_collective_blocked_seconds_total`` / step count increase, ``tokens`` and
``samples`` per step where the job counts them, ``comm_bytes`` per step, ``mfu`` (mean of the
gauge) and ``dev.<signal>`` (the latest device reading at the window's end). A window in which a
rank made no step has no row (never a false zero). One ``query_range`` per metric family (step =
``W``, ``increase(...[W])``) returns every rank at once.

``records`` (one per row, shaped like the run store's step records, per step as they are):
``rank``, ``step``, ``start_s``, ``duration_s``, ``comm_s``, ``device`` (the latest readings at the
window's end, named as in the run store: ``gpu_utilization_ratio``, ``process_cpu_seconds``, ...;
a rank's GPU readings from its own GPU, label ``gpu`` = its local rank, when it exports several)
and ``ops`` (``{op: [count, duration_s, blocked_s, bytes, bus_bytes]}`` per step, as ``OpStats``:
calls and bytes from the counters' increase, duration from the collective histogram's sum,
``blocked_s = duration_s``, bus bytes = bytes x the op's bus factor (busbw / algbw gauges), else
busbw x duration; NaN when not known). ``progress``: a heartbeat per rank in the run store's
format, from the rank's latest samples: ``time_s`` is when it was last scraped (a rank no longer
scraped goes silent; a finished job is not live), ``last_step`` / ``last_step_end_s`` from
``train_last_step`` / ``train_last_step_timestamp_seconds``, an open step (``last_step + 1``)
since ``time_s - train_step_in_progress_seconds`` when that is above 0, ``collective`` =
``"a collective"`` while ``train_blocked_in_collective`` is 1 (the metric names no op), no
``phase`` (not exported), ``finished`` False, ``device`` the latest readings.

Window rule: unless ``window_s`` is given, ``W = max(15 s, 4 x the scrape interval, range / 300)``,
rounded up to a whole second: at most about 300 windows, each holding at least 4 scrapes. The
scrape interval is the median spacing of one rank's ``train_steps_total`` samples. Given or not,
``W`` is then raised where needed so that one query returns at most 11,000 points per series
(Prometheus's own limit) and one load holds at most 250,000 (rank, window) cells; a warning says so.

The exporter does not say in which phase collectives ran, so phase times include the time blocked
in collectives inside them. The table therefore carries ``comm.<phase>_s`` columns of NaN (not
known): with them, the detectors take a rank's compute as ``duration_s - comm_s`` (as for a run
directory) instead of summing the phases, which here include waiting.

>>> run = open_prometheus("http://localhost:9090", job="exp1", minutes=30)   # doctest: +SKIP
>>> run.kind, run.meta["window_s"], run.world_size                            # doctest: +SKIP
('prometheus', 15.0, 8)
"""

from __future__ import annotations

import http.client
import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any

import numpy as np
import pandas as pd

from ..metrics import names as N
from .load import RunInput, _coverage
from .table import TableError, validate

PROMETHEUS = "prometheus"  # RunInput.kind

MAX_RANKS = 4096
MAX_POINTS = 11_000  # per series in one range query: Prometheus refuses more
MAX_CELLS = 250_000  # (rank, window) cells in one load: bounds the answer's size and the records
MIN_WINDOW_S = 15.0
TARGET_WINDOWS = 300
SCRAPES_PER_WINDOW = 4
INTERVAL_LOOKBACK_S = 900.0  # how far back one rank's raw samples are read for the scrape interval
MAX_NAMES = 20  # job names listed in a message
WORKERS = 4  # queries in flight at once
ANSWER_TIMEOUTS = 3  # a request's answer is read within this many timeouts (each read waits at most one)
COLLECTIVE = "a collective"  # train_blocked_in_collective names no op

_PROGRESS = {
    N.LAST_STEP.name: "last_step",
    N.LAST_STEP_TIMESTAMP.name: "last_step_end_s",
    N.STEP_IN_PROGRESS.name: "in_progress",
    N.BLOCKED_IN_COLLECTIVE.name: "blocked",
}
# The gauges read at each window's end: progress, and every device reading (counters included).
_GAUGES = "|".join(
    s
    for m in (
        *(N.by_series(name) for name in _PROGRESS),
        *N.DEVICE.values(),
        *(f[0] for f in N.DEVICE_FAMILIES.values()),
    )
    for s in m.series
)
# A device metric's sample name -> the run store's reading name (families: the prefix and label).
_READINGS = {m.series[0]: reading for reading, m in N.DEVICE.items()}
_FAMILIES = {m.series[0]: (prefix, label, suffix) for prefix, (m, label, suffix) in N.DEVICE_FAMILIES.items()}
STEPS = N.STEPS.total
_NOT_PHASES = frozenset({"start", "duration", "comm", "data"})  # columns of their own
_USUAL_ORDER = ("forward", "backward", "optimizer")  # phase columns in this order, then the others by name


# ---- public -------------------------------------------------------------------------------------
def list_jobs(url: str, timeout_s: float = 5.0, *, minutes: float | None = None) -> list[str]:
    """The ``job`` label values that have ``train_steps_total`` series on the server, sorted; with
    ``minutes``, only those with samples in the last ``minutes``. Raises :class:`TableError`
    when the server cannot be read."""
    api = _Api(url, timeout_s)
    if minutes is None:
        return api.jobs()
    now = time.time()
    return api.jobs(now - _range_s(minutes), now)


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
    :class:`RunInput` of kind :data:`PROMETHEUS` (see the module doc for what a step is and the
    window rule). ``job`` may be left out when the server holds exactly one training job in the
    range. ``timeout_s`` bounds each wait on the server, and a request's answer is read within
    :data:`ANSWER_TIMEOUTS` x ``timeout_s``; the first failed query ends the load. Raises
    :class:`TableError` with a sentence for the user: server unreachable or silent, not a
    Prometheus API, no training job, unknown or ambiguous job, more than :data:`MAX_RANKS` ranks."""
    api = _Api(url, timeout_s)
    range_s = _range_s(minutes)
    now = time.time() if now is None else float(now)
    if not math.isfinite(now):
        raise TableError(f"now={now!r}; accepted: epoch seconds")
    job = _choose_job(api, job, now - range_s, now, minutes)
    sel = f"job={_quote(job)}"
    ranks, rank_labels = _ranks(api, sel, job, now - range_s, now, minutes)
    warnings: list[str] = []
    interval = _scrape_interval(api, sel, rank_labels[min(rank_labels)], now, range_s)
    w = _window(range_s, window_s, interval, len(ranks), warnings)
    w_ms = int(math.ceil(w * 1000 - 1e-6))
    n = max(1, int((range_s * 1000) // w_ms))
    end_ms = int(math.floor(now * 1000))
    first_ms = end_ms - (n - 1) * w_ms
    grid = _Grid(first_ms, w_ms, n)

    results = _run_queries(api, _queries(sel, f"{w_ms}ms"), first_ms, end_ms, w_ms)
    for x in dict.fromkeys(x for _, warn in results.values() for x in warn):
        warnings.append(f"Prometheus: {x}")
    with np.errstate(all="ignore"):  # absurd values (1e308 + 1e308) become inf, then are dropped
        g = {name: grid.arrays(series, _KEYS[name]) for name, (series, _) in results.items() if name != "gauges"}
        gauges = grid.arrays(
            results["gauges"][0], ("rank", "__name__", "gpu", "type", "reason", "direction", "local_rank"), add=False
        )
        progress_g, device_g = _split_gauges(gauges, ranks)
        table, records = _build(grid, g, device_g, ranks)
    table = validate(table, source=f"Prometheus {api.url} job {job}", owned=True)
    progress = _progress(ranks, g["seen"], progress_g, device_g, grid.start_s(np.int64(0)))
    meta: dict[str, Any] = {
        "job": job,
        "world_size": len(ranks),
        "window_s": w_ms / 1000,
        "windows": n,
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
        progress=progress,
        records=records,
        warnings=warnings + _coverage(table),
    )


# ---- the HTTP API -------------------------------------------------------------------------------
class _Api:
    def __init__(self, url: str, timeout_s: float) -> None:
        self.url = _base_url(url)
        self.timeout_s = float(timeout_s)

    def get(self, path: str, params: dict[str, Any]) -> tuple[Any, list[str]]:
        """``data`` of a successful answer and its warnings; TableError otherwise."""
        q = urllib.parse.urlencode({k: _param(v) for k, v in params.items()})
        where = f"{self.url}/api/v1/{path}"
        req = urllib.request.Request(f"{where}?{q}", headers={"Accept": "application/json"})
        status, code = None, 200
        deadline = time.monotonic() + ANSWER_TIMEOUTS * self.timeout_s
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                body = _read_by(resp, deadline)
        except urllib.error.HTTPError as exc:
            status, code = f"HTTP {exc.code} {exc.reason}", exc.code
            try:
                body = exc.read()
            except (OSError, http.client.HTTPException):
                body = b""
        except urllib.error.URLError as exc:
            raise TableError(f"cannot reach Prometheus at {self.url}: {_reason(exc.reason)}") from None
        except (OSError, http.client.HTTPException, ValueError) as exc:  # timeouts, resets, bad URLs
            raise TableError(f"cannot reach Prometheus at {self.url}: {_reason(exc)}") from None
        doc = _json(body)
        if not isinstance(doc, dict) or doc.get("status") not in ("success", "error"):
            if code >= 500 or code == 429:
                raise TableError(
                    f"Prometheus at {self.url} answered {status} to GET /api/v1/{path} "
                    "(starting, overloaded, or a proxy in front of it failed)"
                )
            got = status or "an answer that is not Prometheus API JSON"
            raise TableError(
                f"{self.url} is not a Prometheus server's HTTP API (GET /api/v1/{path} gave {got}); "
                "give the server's base URL, e.g. http://localhost:9090"
            )
        if doc["status"] == "error":
            raise TableError(
                f"Prometheus at {self.url} refused a query ({doc.get('errorType', status)}: "
                f"{doc.get('error')}): GET /api/v1/{path} {params.get('query', '')}".rstrip()
            )
        warn = doc.get("warnings")
        return doc.get("data"), [str(x) for x in warn] if isinstance(warn, list) else []

    def jobs(self, start: float | None = None, end: float | None = None) -> list[str]:
        params: dict[str, Any] = {"match[]": STEPS}
        if start is not None:
            params.update(start=start, end=end)
        data, _ = self.get("label/job/values", params)
        if data is None:
            data = []
        if not isinstance(data, list):
            raise TableError(f"{self.url}: the label values API gave no list; is this a Prometheus server?")
        return sorted({x for x in data if isinstance(x, str)})

    def series(self, match: str, start: float, end: float) -> list[dict[str, str]]:
        data, _ = self.get("series", {"match[]": match, "start": start, "end": end})
        if data is None:
            data = []
        if not isinstance(data, list):
            raise TableError(f"{self.url}: the series API gave no list; is this a Prometheus server?")
        return [d for d in data if isinstance(d, dict)]

    def query_range(self, expr: str, start_ms: int, end_ms: int, step_ms: int) -> tuple[list, list[str]]:
        data, warn = self.get(
            "query_range", {"query": expr, "start": start_ms / 1000, "end": end_ms / 1000, "step": step_ms / 1000}
        )
        return _series_of(data, "matrix", self.url), warn

    def query(self, expr: str, at: float) -> list:
        data, _ = self.get("query", {"query": expr, "time": at})
        return _series_of(data, "matrix", self.url)


def _read_by(resp: Any, deadline: float) -> bytes:
    """The answer's body, read in chunks; TimeoutError once ``deadline`` (monotonic) has passed, so a
    server that trickles its answer cannot hold a load forever (each read waits at most the timeout)."""
    chunks = []
    while True:
        chunk = resp.read1(1 << 16)  # what has arrived (read() would wait for the whole chunk)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        if time.monotonic() > deadline:
            raise TimeoutError("the answer took too long (timed out)")


def _base_url(url: str) -> str:
    url = str(url).strip()
    if "://" not in url:
        url = "http://" + url
    url = url.rstrip("/")
    for tail in ("/api/v1", "/graph"):
        if url.endswith(tail):
            url = url[: -len(tail)]
    return url


def _param(v: Any) -> str:
    return repr(v) if isinstance(v, float) else str(v)


def _reason(exc: Any) -> str:
    if isinstance(exc, TimeoutError) or "timed out" in str(exc):
        return "timed out"
    text = getattr(exc, "strerror", None) or str(exc)
    return text or type(exc).__name__


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None


def _series_of(data: Any, kind: str, url: str) -> list[tuple[dict, list]]:
    """[(labels, [(t, value), ...])] of a query answer; malformed entries and non-finite values
    (NaN, +Inf) skipped."""
    if not isinstance(data, dict) or data.get("resultType") != kind or not isinstance(data.get("result"), list):
        raise TableError(f"{url}: a query answer of the wrong shape (expected a {kind}); is this a Prometheus server?")
    out = []
    for s in data["result"]:
        if not isinstance(s, dict) or not isinstance(s.get("metric"), dict) or not isinstance(s.get("values"), list):
            continue
        points = []
        for p in s["values"]:
            try:
                t, v = float(p[0]), float(p[1])
            except (TypeError, ValueError, IndexError, KeyError):
                continue
            if math.isfinite(t) and math.isfinite(v):
                points.append((t, v))
        out.append(({str(k): str(v) for k, v in s["metric"].items()}, points))
    return out


def _quote(s: str) -> str:
    """A PromQL string literal (Go escapes, which JSON's are)."""
    return json.dumps(s)


# ---- job, ranks, window -------------------------------------------------------------------------
def _range_s(minutes: float) -> float:
    try:
        m = float(minutes)
    except (TypeError, ValueError):
        m = math.nan
    if not (math.isfinite(m) and m > 0):
        raise TableError(f"minutes={minutes!r}; accepted: a number of minutes above 0")
    return m * 60.0


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


def _choose_job(api: _Api, job: str | None, start: float, end: float, minutes: float) -> str:
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
    api: _Api, sel: str, job: str, start: float, end: float, minutes: float
) -> tuple[dict[int, dict[str, Any]], dict[int, str]]:
    """{rank: {"node", "local_rank"}} and each rank's label value, from the series API."""
    ranks: dict[int, dict[str, Any]] = {}
    labels: dict[int, str] = {}
    for s in api.series(f"{STEPS}{{{sel}}}", start, end):
        r = _int(s.get("rank"))
        if r is None or r < 0:
            continue
        ranks[r] = {"node": s.get("node"), "local_rank": _int(s.get("local_rank"))}
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


def _int(v: Any) -> int | None:
    try:
        return int(str(v))
    except (TypeError, ValueError):
        return None


def _scrape_interval(api: _Api, sel: str, rank: str, now: float, range_s: float) -> float | None:
    """Median spacing of one rank's raw train_steps_total samples (the last 15 min, else the range)."""
    spans = [min(range_s, INTERVAL_LOOKBACK_S)]
    if range_s > spans[0]:
        spans.append(range_s)
    for span in spans:
        expr = f"{STEPS}{{{sel},rank={_quote(rank)}}}[{int(math.ceil(span * 1000))}ms]"
        best: list[float] = []
        for _, points in api.query(expr, now):
            if len(points) > len(best):
                best = [t for t, _ in points]
        if len(best) >= 3:
            gaps = np.diff(np.sort(best))
            gaps = gaps[gaps > 0]
            if len(gaps):
                return float(np.median(gaps))
    return None


def _window(range_s: float, window_s: float | None, interval: float | None, n_ranks: int, warnings: list[str]) -> float:
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


# ---- queries ------------------------------------------------------------------------------------
_KEYS = {
    "n": ("rank",),
    "dur": ("rank",),
    "phase": ("rank", "phase"),
    "data": ("rank",),
    "comm": ("rank",),
    "tokens": ("rank",),
    "samples": ("rank",),
    "calls": ("rank", "op"),
    "bytes": ("rank", "op"),
    "op_s": ("rank", "op"),
    "busbw": ("rank", "op"),
    "factor": ("rank", "op"),
    "mfu": ("rank",),
    "seen": ("rank",),
}


def _queries(sel: str, w: str) -> dict[str, str]:
    def inc(metric: str, by: str = "rank") -> str:
        return f"sum by ({by}) (increase({metric}{{{sel}}}[{w}]))"

    busbw, algbw = N.COLLECTIVE_BUSBW.name, N.COLLECTIVE_ALGBW.name

    return {
        "n": inc(N.STEP_DURATION.count),
        "dur": inc(N.STEP_DURATION.sum),
        "phase": inc(N.PHASE_DURATION.sum, "rank, phase"),
        "data": inc(N.DATALOADER_WAIT.sum),
        "comm": inc(N.COLLECTIVE_BLOCKED.total),
        "tokens": inc(N.TOKENS.total),
        "samples": inc(N.SAMPLES.total),
        "calls": inc(N.COLLECTIVE_CALLS.total, "rank, op"),
        "bytes": inc(N.COLLECTIVE_BYTES.total, "rank, op"),
        "op_s": inc(N.COLLECTIVE_DURATION.sum, "rank, op"),
        # bus bytes: the op's bus factor (busbw / algbw of its latest step) x its bytes; without the
        # algbw gauge, the latest busbw x the op's time
        "busbw": f"max by (rank, op) (last_over_time({busbw}{{{sel}}}[{w}]))",
        "factor": f"max by (rank, op) (last_over_time({busbw}{{{sel}}}[{w}]) / last_over_time({algbw}{{{sel}}}[{w}]))",
        "mfu": f"max by (rank) (avg_over_time({N.MFU.name}{{{sel}}}[{w}]))",
        # when each rank was last scraped (its heartbeat), and the latest gauges at each window's end
        "seen": f"max by (rank) (timestamp({STEPS}{{{sel}}}))",
        "gauges": f'{{__name__=~"{_GAUGES}",{sel}}}',
    }


def _run_queries(
    api: _Api, queries: dict[str, str], first_ms: int, end_ms: int, w_ms: int
) -> dict[str, tuple[list, list[str]]]:
    """Every query's answer; the first failure is raised at once, the queries not started are
    cancelled (a server that stopped answering costs one request's timeout, not one per query)."""
    pool = ThreadPoolExecutor(max_workers=WORKERS)
    try:
        futures = {name: pool.submit(api.query_range, expr, first_ms, end_ms, w_ms) for name, expr in queries.items()}
        wait(futures.values(), return_when=FIRST_EXCEPTION)
        return {name: f.result() for name, f in futures.items()}
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # those in flight end within their timeout


class _Grid:
    """Window ends ``first_ms + k * w_ms`` (k < n) and the series of an answer as arrays over them."""

    def __init__(self, first_ms: int, w_ms: int, n: int) -> None:
        self.first_ms, self.w_ms, self.n = first_ms, w_ms, n

    def start_s(self, k: np.ndarray) -> np.ndarray:
        return (self.first_ms + (k - 1) * self.w_ms) / 1000.0

    def arrays(self, series: list, keys: tuple[str, ...], add: bool = True) -> dict[tuple, np.ndarray]:
        """{(rank, other key labels...): (n,) values, NaN where none}. Series with one key (labels
        that are not keys differ) are summed (``add``), else the first one's gaps are filled."""
        out: dict[tuple, np.ndarray] = {}
        for labels, points in series:
            r = _int(labels.get("rank"))
            if r is None or r < 0 or not points:
                continue
            a = np.full(self.n, np.nan)
            t = np.array([p[0] for p in points])
            k = np.rint((t * 1000 - self.first_ms) / self.w_ms).astype(np.int64)
            ok = (k >= 0) & (k < self.n)
            a[k[ok]] = np.array([p[1] for p in points])[ok]
            key = (r,) + tuple(labels.get(x) for x in keys[1:])
            prev = out.get(key)
            if prev is None:
                out[key] = a
            else:
                out[key] = np.where(np.isnan(prev), a, np.where(np.isnan(a), prev, prev + a) if add else prev)
        return out


# ---- gauges: progress and device readings -------------------------------------------------------
def _device_key(name: str, gpu: str | None, kind: str | None, reason: str | None, direction: str | None) -> str | None:
    """A device metric's sample name -> the run store's reading name (telemetry.metrics.names.DEVICE)."""
    if name in _READINGS:
        return _READINGS[name]
    family = _FAMILIES.get(name)
    if family is None:
        return None
    prefix, label, suffix = family
    value = {"type": kind, "reason": reason, "direction": direction}[label]
    return f"{prefix}{value}{suffix}" if value else None


def _split_gauges(
    gauges: dict[tuple, np.ndarray], ranks: dict[int, dict[str, Any]]
) -> tuple[dict[tuple, np.ndarray], dict[int, dict[str, np.ndarray]]]:
    """({(rank, progress key): values}, {rank: {device reading: values}}). A rank's GPU readings
    come from its own GPU (label gpu = its local rank) when it exports several, else the lowest."""
    progress: dict[tuple, np.ndarray] = {}
    device: dict[tuple, list[tuple[int, str, np.ndarray]]] = {}
    for (r, name, gpu, kind, reason, direction, _local), a in gauges.items():
        if name in _PROGRESS:
            key = (r, _PROGRESS[name])
            prev = progress.get(key)
            progress[key] = a if prev is None else np.where(np.isnan(a), prev, a)
            continue
        reading = _device_key(name or "", gpu, kind, reason, direction)
        if reading is None:
            continue
        own = (ranks.get(r) or {}).get("local_rank")
        pref = 0 if gpu is None or (own is not None and gpu == str(own)) else 1
        device.setdefault((r, reading), []).append((pref, gpu or "", a))
    out: dict[int, dict[str, np.ndarray]] = {}
    for (r, reading), cands in device.items():
        cands.sort(key=lambda c: (c[0], _int(c[1]) if _int(c[1]) is not None else math.inf, c[1]))
        a = cands[0][2].copy()
        for _, _, b in cands[1:]:  # a reading's gaps filled from the next preferred series
            a = np.where(np.isnan(a), b, a)
        out.setdefault(r, {})[reading] = a
    return progress, out


def _last(a: np.ndarray | None) -> float | None:
    if a is None:
        return None
    idx = np.flatnonzero(np.isfinite(a))
    return float(a[idx[-1]]) if len(idx) else None


def _progress(
    ranks: dict[int, dict[str, Any]],
    seen: dict[tuple, np.ndarray],
    gauges: dict[tuple, np.ndarray],
    device: dict[int, dict[str, np.ndarray]],
    range_start_s: float,
) -> dict[int, dict[str, Any]]:
    """Each rank's heartbeat. Its time is when the rank was last scraped (so a rank that is no
    longer scraped goes silent, and a finished job is not live); a rank with no sample at any
    window's end was last seen before the range started."""
    out = {}
    for r in ranks:
        latest = {k: _last(gauges.get((r, k))) for k in _PROGRESS.values()}
        dev = {k: v for k, v in ((k, _last(a)) for k, a in device.get(r, {}).items()) if v is not None}
        seen_s = _last(seen.get((r,)))
        out[r] = _heartbeat(r, seen_s if seen_s is not None else float(range_start_s), latest, dev)
    return out


def _heartbeat(rank: int, time_s: float, g: dict[str, float | None], device: dict[str, float]) -> dict[str, Any]:
    """One rank's progress in the run store's format, from its latest samples."""
    last = g.get("last_step")
    last = int(last) if last is not None else None
    open_s = g.get("in_progress")
    is_open = open_s is not None and open_s > 0
    blocked = g.get("blocked")
    return {
        "rank": rank,
        "time_s": time_s,
        "last_step": last,
        "last_step_end_s": g.get("last_step_end_s"),
        "open_step": (last + 1 if last is not None else 0) if is_open else None,
        "open_step_since_s": time_s - open_s if is_open else None,
        "phase": None,
        "collective": COLLECTIVE if blocked is not None and blocked >= 0.5 else None,
        "collective_since_s": None,
        "finished": False,
        "device": device or None,
    }


# ---- the steps table and the records ------------------------------------------------------------
def _per_step(a: np.ndarray | None, idx: np.ndarray, count: np.ndarray, missing: float = np.nan) -> np.ndarray:
    if a is None:
        return np.full(len(idx), missing)
    v = a[idx] / count
    return np.where(np.isfinite(v), v, missing)


def _build(
    grid: _Grid,
    g: dict[str, dict[tuple, np.ndarray]],
    device: dict[int, dict[str, np.ndarray]],
    ranks: dict[int, dict[str, Any]],
) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    phases = sorted(
        {k[1] for k in g["phase"] if k[1] and k[1] not in _NOT_PHASES},
        key=lambda p: (_USUAL_ORDER.index(p) if p in _USUAL_ORDER else len(_USUAL_ORDER), p),
    )
    ops = sorted({k[1] for name in ("calls", "bytes", "op_s") for k in g[name] if k[1]})
    has = {name: bool(g[name]) for name in ("comm", "tokens", "samples", "mfu")}
    has_data = any(np.nansum(a) > 0 for a in g["data"].values())
    signals = sorted({s for d in device.values() for s in d})
    cols: dict[str, list[np.ndarray]] = {}
    records: list[dict[str, Any]] = []

    def add(name: str, values: np.ndarray) -> None:
        cols.setdefault(name, []).append(values)

    for r in sorted(set(ranks) | {k[0] for k in g["n"]}):
        cnt, dur = g["n"].get((r,)), g["dur"].get((r,))
        if cnt is None or dur is None:
            continue
        idx = np.flatnonzero(np.isfinite(cnt) & (cnt > 0) & np.isfinite(dur) & (dur >= 0))
        if not len(idx):
            continue
        c = cnt[idx]
        add("rank", np.full(len(idx), r, dtype=np.int64))
        add("step", idx.astype(np.int64))
        start = grid.start_s(idx)
        add("start_s", start)
        duration = dur[idx] / c
        add("duration_s", duration)
        if has_data:
            add("data_s", _per_step(g["data"].get((r,)), idx, c, 0.0))
        for p in phases:
            add(f"{p}_s", _per_step(g["phase"].get((r, p)), idx, c, 0.0))
        comm = _per_step(g["comm"].get((r,)), idx, c)
        if has["comm"]:
            add("comm_s", comm)
        for name in ("tokens", "samples"):
            if has[name]:
                add(name, _per_step(g[name].get((r,)), idx, c))
        op_rows = {}
        for op in ops:
            calls = _per_step(g["calls"].get((r, op)), idx, c, 0.0)
            nbytes = _per_step(g["bytes"].get((r, op)), idx, c, 0.0)
            secs = _per_step(g["op_s"].get((r, op)), idx, c, 0.0)
            busbw, factor = g["busbw"].get((r, op)), g["factor"].get((r, op))
            bus = secs * (busbw[idx] if busbw is not None else np.nan)
            if factor is not None:
                f = factor[idx]
                bus = np.where(np.isfinite(f) & (f > 0), nbytes * f, bus)
            op_rows[op] = (calls, secs, nbytes, bus)
        if ops:
            add("comm_bytes", sum(v[2] for v in op_rows.values()))
        if has["mfu"]:
            mfu = g["mfu"].get((r,))
            add("mfu", mfu[idx] if mfu is not None else np.full(len(idx), np.nan))
        dev = device.get(r, {})
        for s in signals:
            a = dev.get(s)
            add(f"dev.{s}", a[idx] if a is not None else np.full(len(idx), np.nan))
        for j, k in enumerate(idx.tolist()):
            rec_ops = {}
            for op, (calls, secs, nbytes, bus) in op_rows.items():
                if calls[j] > 0 or nbytes[j] > 0 or secs[j] > 0:
                    # [count, duration_s, blocked_s, bytes, bus_bytes] per step, as OpStats
                    rec_ops[op] = [float(calls[j]), float(secs[j]), float(secs[j]), float(nbytes[j]), float(bus[j])]
            rec_dev = {s: float(a[k]) for s, a in dev.items() if np.isfinite(a[k])}
            rec: dict[str, Any] = {
                "rank": r,
                "step": k,
                "start_s": float(start[j]),
                "duration_s": float(duration[j]),
                "device": rec_dev or None,
                "ops": rec_ops,
            }
            if has["comm"] and np.isfinite(comm[j]):
                rec["comm_s"] = float(comm[j])
            records.append(rec)
    if not cols:
        return pd.DataFrame(
            {
                "rank": pd.Series([], dtype="int64"),
                "step": pd.Series([], dtype="int64"),
                "start_s": pd.Series([], dtype="float64"),
                "duration_s": pd.Series([], dtype="float64"),
            }
        ), records
    table = pd.DataFrame({name: np.concatenate(parts) for name, parts in cols.items()})
    if has["comm"]:
        # Not known: the exporter does not say in which phase collectives ran (see the module doc).
        for p in phases:
            table[f"comm.{p}_s"] = np.nan
    return table, records

"""The Prometheus HTTP API, as the reader uses it: GET requests over the standard library (urllib),
each answer read within a bound, every failure a :class:`~telemetry.steptable.table.TableError`
with a sentence for the user; and the queries of one load run a few at a time."""

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

from ....metrics import names as N
from ....steptable.table import TableError

WORKERS = 4  # queries in flight at once
ANSWER_TIMEOUTS = 3  # a request's answer is read within this many timeouts (each read waits at most one)
STEPS = N.STEPS.total  # the series every training rank exports: what a training job is


class Api:
    """The HTTP API of the Prometheus server at ``url`` (its base URL), each wait bounded by
    ``timeout_s``."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self.url = base_url(url)
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
                body = read_by(resp, deadline)
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
        """The ``job`` label values of the :data:`STEPS` series (with samples from ``start`` to
        ``end``, when given), sorted."""
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
        return series_of(data, "matrix", self.url), warn

    def query(self, expr: str, at: float) -> list:
        data, _ = self.get("query", {"query": expr, "time": at})
        return series_of(data, "matrix", self.url)


def run_queries(
    api: Api, queries: dict[str, str], first_ms: int, end_ms: int, w_ms: int
) -> dict[str, tuple[list, list[str]]]:
    """Every query's answer (a range query each, :data:`WORKERS` at a time); the first failure is
    raised at once, the queries not started are cancelled (a server that stopped answering costs
    one request's timeout, not one per query)."""
    pool = ThreadPoolExecutor(max_workers=WORKERS)
    try:
        futures = {name: pool.submit(api.query_range, expr, first_ms, end_ms, w_ms) for name, expr in queries.items()}
        wait(futures.values(), return_when=FIRST_EXCEPTION)
        return {name: f.result() for name, f in futures.items()}
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # those in flight end within their timeout


def read_by(resp: http.client.HTTPResponse, deadline: float) -> bytes:
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


def base_url(url: str) -> str:
    url = str(url).strip()
    if "://" not in url:
        url = "http://" + url
    url = url.rstrip("/")
    for tail in ("/api/v1", "/graph"):
        if url.endswith(tail):
            url = url[: -len(tail)]
    return url


def _param(v: object) -> str:
    return repr(v) if isinstance(v, float) else str(v)


def _reason(exc: BaseException | str) -> str:
    if isinstance(exc, TimeoutError) or "timed out" in str(exc):
        return "timed out"
    text = getattr(exc, "strerror", None) or str(exc)
    return text or type(exc).__name__


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None


def series_of(data: Any, kind: str, url: str) -> list[tuple[dict, list]]:
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

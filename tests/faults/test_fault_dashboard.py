"""The dashboard under faults: its run deleted or cut while the page is open, its Prometheus gone
silent. The page says what happened (st.error / st.warning), never shows a traceback, never hangs.

Driven by Streamlit's AppTest (the app runs in this process, as tests/unit/telemetry/dashboards/test_app.py drives it)
on copies of the healthy gloo job's run directory, and on a real Prometheus server.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import time

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from telemetry.dashboards.serve import APP
from tests.helpers.apptest import run_app, show

pytestmark = pytest.mark.slow


def _page_text(at) -> str:
    return "\n".join(str(e.value) for kind in ("error", "warning", "caption", "info") for e in getattr(at, kind))


def _no_traceback(at) -> None:
    assert not at.exception, [e.value for e in at.exception]


def _copy(healthy_job, dst) -> str:
    shutil.copytree(healthy_job.run_dir, dst)
    return str(dst)


def _rerun(at) -> float:
    t0 = time.perf_counter()
    at.run()
    return time.perf_counter() - t0


def test_a_run_directory_deleted_while_the_page_is_open_is_a_message(healthy_job, fault_table, monkeypatch, tmp_path):
    run = _copy(healthy_job, tmp_path / "run")
    at = run_app(monkeypatch, run)
    assert any("2 ranks, 200 steps" in c.value for c in at.caption), _page_text(at)
    shutil.rmtree(run)
    took = _rerun(at)
    _no_traceback(at)
    [error] = [e.value for e in at.error]
    assert run in error and "does not exist" in error
    for view in ("ranks", "collectives"):  # deleted while another view is open (collectives reads records late)
        run = _copy(healthy_job, tmp_path / "run")
        at = show(run_app(monkeypatch, run), view)
        shutil.rmtree(run)
        at.run()
        _no_traceback(at)
        assert run in at.error[0].value and "does not exist" in at.error[0].value

    # Chosen among the runs under a root: the run vanishes, the page says so and shows another.
    root = tmp_path / "runs"
    a, b = _copy(healthy_job, root / "a"), _copy(healthy_job, root / "b")
    os.utime(b)  # b is the newest: the one shown first
    monkeypatch.delenv("TELEMETRY_DASHBOARD_PATH", raising=False)
    monkeypatch.setenv("TELEMETRY_DASHBOARD_ROOT", str(root))
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    _no_traceback(at)
    [box] = [s for s in at.sidebar.selectbox if s.label == "run"]
    assert box.value == b
    shutil.rmtree(b)
    at.run()
    _no_traceback(at)
    [gone] = [w.value for w in at.warning if b in w.value]
    assert "no longer there" in gone and "a" in gone
    assert [s for s in at.sidebar.selectbox if s.label == "run"][0].value == a
    shutil.rmtree(a)
    at.run()
    _no_traceback(at)
    assert any("No run directory under" in e.value for e in at.error)
    browser_s = _in_a_real_browser(healthy_job, tmp_path)
    fault_table.add(
        "dashboard",
        "the run directory deleted while its page is open (one run given; one of the "
        "runs under the root chosen in the page)",
        f"not involved (the dashboard only reads); the next rerun ({took:.2f} s) shows "
        '"Cannot show this run: RUN does not exist" whichever view was open (AppTest; and a real '
        f"server read by headless Chromium: {browser_s}); the run picker says the chosen run is no longer there "
        "and shows the next one; no traceback",
        "nothing the dashboard holds (the run's files were deleted by the fault)",
    )


def _in_a_real_browser(healthy_job, tmp_path) -> str:
    """`telemetry dashboard RUN` read by headless Chromium, RUN then deleted: the page drawn again
    by the real server says so. Returns what was seen, for the table."""
    import subprocess
    import sys

    from tests.helpers import browser
    from tests.helpers.servers import free_port, stop_group, wait_http

    if browser.chromium() is None:
        return "skipped, no chromium"
    run = _copy(healthy_job, tmp_path / "browser-run")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "telemetry", "dashboard", run, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_http(f"{url}/_stcore/health", timeout=60)
        dom = browser.dump_dom_until(url, "2 ranks, 200 steps", 'data-testid="stExpander"')
        assert "2 ranks, 200 steps" in dom and 'data-testid="stException"' not in dom
        shutil.rmtree(run)
        t0 = time.perf_counter()
        dom = browser.dump_dom_until(url, "does not exist")
        assert "does not exist" in dom and run in dom and 'data-testid="stException"' not in dom
        return f"the message, no stException element, page read in {time.perf_counter() - t0:.1f} s"
    finally:
        stop_group(proc)


def test_a_run_cut_while_the_page_is_open_shows_what_is_readable_and_warns(
    healthy_job, fault_table, monkeypatch, tmp_path
):
    run = _copy(healthy_job, tmp_path / "run")
    at = run_app(monkeypatch, run)
    ranks_dir = os.path.join(run, "ranks")
    data = sorted(
        glob.glob(os.path.join(ranks_dir, "rank-00001.*.parquet"))
        + glob.glob(os.path.join(ranks_dir, "rank-00001.tail-*.jsonl"))
    )
    assert data, os.listdir(ranks_dir)
    for path in data:  # every data file of rank 1 cut in half (a segment's footer lost, a tail torn)
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
    at.run()
    _no_traceback(at)
    warned = [w.value for w in at.warning]
    names = [os.path.basename(p) for p in data]
    assert any(n in w for n in names for w in warned), warned
    steps_1 = _steps_of(run, 1)  # a segment cut in half lost its footer: unreadable as a whole
    summary = [c.value for c in at.caption if " ranks, " in c.value]
    assert summary and summary[0].startswith(f"{1 + (steps_1 > 0)} ranks, 200 steps"), _page_text(at)
    for view in ("ranks", "findings", "collectives", "devices"):
        show(at, view)

    for path in glob.glob(os.path.join(ranks_dir, "rank-00001.*")):  # then rank 1's files removed
        os.remove(path)
    show(at, "overview")
    summary = [c.value for c in at.caption if " ranks, " in c.value]
    assert summary and summary[0].startswith("1 ranks, 200 steps"), _page_text(at)
    for view in ("ranks", "findings", "collectives", "devices"):
        show(at, view)
    tail_run, tail_steps, torn_steps = _a_tail_cut_in_half(monkeypatch, tmp_path)
    fault_table.add(
        "dashboard",
        f"the run cut while its page is open: rank 1's {', '.join(names)} truncated to "
        "half, then all of rank 1's files removed; a crashed run's live tail truncated to half",
        "not involved (the dashboard only reads); the page shows what is readable with a warning "
        "naming each damaged file, in every view; no traceback",
        f"what the fault destroyed and nothing more: rank 1's {steps_1} of 200 steps shown after its "
        "segment lost its footer (Parquet reads a segment whole or not at all), none after its files "
        f"were removed, rank 0's 200 throughout; the cut tail: {torn_steps} of {tail_steps} steps "
        "shown (those before the cut), the torn record skipped and said",
    )


def _a_tail_cut_in_half(monkeypatch, tmp_path) -> tuple[str, int, int]:
    """A run left by a crash (a live tail, no segment), its tail then cut in half under the page."""
    import telemetry
    from telemetry.analysis.inputs.load import open_input

    live, crashed = str(tmp_path / "live"), str(tmp_path / "crashed")
    telemetry.init(run_dir=live, job="tail", sinks=["store"], flush_interval_s=0.05, announce=False)
    try:
        for _ in range(100):
            with telemetry.step():
                time.sleep(0.0005)
        deadline = time.monotonic() + 20
        while len(open_input(live).table) < 100:
            assert time.monotonic() < deadline, "the tail never held the 100 steps"
            time.sleep(0.05)
        shutil.copytree(live, crashed)  # as the job left it: the tail, not yet sealed
    finally:
        telemetry.shutdown()
    [tail] = glob.glob(os.path.join(crashed, "ranks", "rank-00000.tail-*.jsonl"))
    at = run_app(monkeypatch, crashed)
    assert any(c.value.startswith("1 ranks, 100 steps") for c in at.caption), _page_text(at)
    with open(tail, "r+b") as f:
        f.truncate(os.path.getsize(tail) // 2)
    at.run()
    _no_traceback(at)
    assert any(os.path.basename(tail) in w.value and "torn" in w.value for w in at.warning), _page_text(at)
    shown = _steps_of(crashed, 0)
    assert 30 < shown < 70 and any(c.value.startswith(f"1 ranks, {shown} steps") for c in at.caption)
    return crashed, 100, shown


def _steps_of(run: str, rank: int) -> int:
    from telemetry.analysis.inputs.load import open_input

    t = open_input(run).table
    return int((t["rank"] == rank).sum())


# ---- Prometheus ---------------------------------------------------------------------------------
from tests.helpers.prometheus_backfill import backfilled  # noqa: E402,F401 - the real server, reused as a fixture


def _server_pid(url: str) -> int:
    import psutil

    port = int(url.rsplit(":", 1)[1])
    [pid] = {
        c.pid
        for c in psutil.net_connections("tcp")
        if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN
    }
    return pid


def test_a_prometheus_that_stops_answering_is_a_message_within_a_bound(
    backfilled,  # noqa: F811 - the fixture imported above
    fault_table,
    monkeypatch,
):
    from telemetry.dashboards import source as S

    url, _ = backfilled
    monkeypatch.setattr(S, "PROMETHEUS_REFRESH_S", 1.0)  # re-query at every rerun a second apart
    monkeypatch.setenv("TELEMETRY_DASHBOARD_PROMETHEUS", url)
    monkeypatch.setenv("TELEMETRY_DASHBOARD_JOB", "train-a")
    at = AppTest.from_file(APP, default_timeout=90)
    at.run()
    _no_traceback(at)
    assert any("straggler - rank 5" in e.label for e in at.expander)

    pid = _server_pid(url)
    os.kill(pid, signal.SIGSTOP)  # the server accepts (the kernel does) and never answers
    try:
        time.sleep(1.1)
        hung = _rerun(at)
        _no_traceback(at)
        [error] = [e.value for e in at.error]
        assert url in error and "timed out" in error and "trying again every 1 s" in error, error
        assert hung < 25, hung  # bounded: one request's timeout (10 s) and the slack of a busy machine

        # no --job: the job list is the first query
        monkeypatch.delenv("TELEMETRY_DASHBOARD_JOB")
        fresh = AppTest.from_file(APP, default_timeout=90)
        listing = _rerun(fresh)
        _no_traceback(fresh)
        assert url in fresh.error[0].value and "timed out" in fresh.error[0].value
        assert listing < 20, listing
    finally:
        os.kill(pid, signal.SIGCONT)
    monkeypatch.setenv("TELEMETRY_DASHBOARD_JOB", "train-a")
    time.sleep(1.1)
    at.run()  # the server answers again: the next refresh shows the job
    _no_traceback(at)
    assert not at.error and any("straggler - rank 5" in e.label for e in at.expander)

    # a server that is gone (nothing listens): refused at once
    gone = "http://127.0.0.1:" + str(_closed_port())
    monkeypatch.setenv("TELEMETRY_DASHBOARD_PROMETHEUS", gone)
    monkeypatch.setenv("TELEMETRY_DASHBOARD_JOB", "train-a")
    at = AppTest.from_file(APP, default_timeout=90)
    refused = _rerun(at)
    _no_traceback(at)
    assert gone in at.error[0].value and "refused" in at.error[0].value
    assert refused < 5, refused
    fault_table.add(
        "dashboard",
        "its Prometheus stops answering while the page is open (server SIGSTOPped: "
        "connections accepted, never answered), and a Prometheus that is gone (closed port)",
        f"not involved (the dashboard only reads); the page says \"Cannot show job 'train-a' from URL: "
        f'cannot reach Prometheus at URL: timed out; trying again every 15 s" after {hung:.1f} s (job '
        f'list: {listing:.1f} s; per-request timeout 10 s, 5 s for the job list), "refused" after '
        f"{refused:.2f} s; no traceback, never hung",
        "nothing (the page shows the job again at the next refresh once the server answers)",
    )


def _closed_port() -> int:
    from tests.helpers.servers import free_port

    return free_port()


class _Proxy:
    """A real HTTP proxy in front of the Prometheus server that answers everything but range
    queries: those it holds ("hang": never a byte) or trickles ("trickle": headers, then a byte
    every 0.2 s), as a stuck server or proxy does. ``with _Proxy(upstream, mode) as url:``."""

    def __init__(self, upstream: str, mode: str) -> None:
        import http.server
        import threading
        import urllib.request

        stop = self.stop = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.startswith("/api/v1/query_range"):
                    if mode == "hang":
                        stop.wait(60)
                        return
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", "1000000")
                    self.end_headers()
                    while not stop.wait(0.2):
                        try:
                            self.wfile.write(b" ")
                            self.wfile.flush()
                        except OSError:
                            return
                    return
                try:
                    with urllib.request.urlopen(upstream + self.path, timeout=10) as r:
                        code, body = r.status, r.read()
                except urllib.error.HTTPError as e:
                    code, body = e.code, e.read()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


def test_a_prometheus_that_stops_answering_mid_load_is_a_message_within_a_bound(
    backfilled,  # noqa: F811 - the fixture imported above
    fault_table,
    monkeypatch,
):
    from telemetry.analysis.inputs.prometheus import open_prometheus
    from telemetry.analysis.inputs.prometheus.queries import queries
    from telemetry.steptable.table import TableError

    url, _ = backfilled
    with _Proxy(url, "hang") as proxy:
        monkeypatch.setenv("TELEMETRY_DASHBOARD_PROMETHEUS", proxy)
        monkeypatch.setenv("TELEMETRY_DASHBOARD_JOB", "train-a")
        at = AppTest.from_file(APP, default_timeout=120)
        hung = _rerun(at)
        _no_traceback(at)
        assert proxy in at.error[0].value and "timed out" in at.error[0].value, _page_text(at)
        assert hung < 25, hung  # one request's timeout (10 s), not one per query (16 queries, 4 at a time)
    with _Proxy(url, "trickle") as proxy:
        import threading

        said: list[str] = []

        def load() -> None:
            try:
                open_prometheus(proxy, "train-a", timeout_s=1.0)
            except TableError as exc:
                said.append(str(exc))

        t0 = time.perf_counter()
        loader = threading.Thread(target=load, daemon=True)
        loader.start()
        loader.join(20)  # a regression fails here, not at the suite's timeout
        trickled = time.perf_counter() - t0
        assert not loader.is_alive(), "the load still reads a trickled answer after 20 s"
        assert said and "timed out" in said[0], said
        assert trickled < 10, trickled  # its answer is read within 3 timeouts
    n = len(queries("job='x'", "60s"))
    fault_table.add(
        "dashboard",
        f"its Prometheus (through a proxy) answers the job's metadata, then holds all "
        f"{n} range queries of the load, or trickles their answers a byte every 0.2 s",
        f'not involved (the dashboard only reads); the page says "cannot reach Prometheus at URL: '
        f'timed out" after {hung:.1f} s (the first failed query ends the load and cancels the rest); '
        f"a trickled answer is dropped after {trickled:.1f} s with timeout_s=1 (3 timeouts); no "
        "traceback, never hung",
        "nothing (the page shows the job again at the next refresh once the server answers)",
    )

"""The dashboard in headless Chromium (Debian's): how long each view takes to be on the screen, charts
drawn, from the moment a browser is started on its URL (the browser's own start included). Each view is
measured twice: first on a server that has just come up (``telemetry dashboard RUN`` started, its health
check answered: the first visitor), then in a fresh browser on that same server. Issue 27's target: every view's first render at most 3 s.

    python bench/dashboard_browser.py RUN [--out bench/RESULTS.md]

A view is drawn when its text holds ``--wait-for`` (default: the caption of a run drawn from its blocks)
and every chart (Vega) and table (Streamlit's data grid) the view shows has its canvas: how many it shows
is counted first, on a page left to settle (a server of its own, not timed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from helpers.browser import FLAGS, _text, chromium, dashboard  # noqa: E402 - after the sys.path set-up above
from results import update_section  # noqa: E402 - after the sys.path set-up above

VIEWS = ("overview", "ranks", "findings", "collectives", "devices", "compare")
STATE = """JSON.stringify({
  text: document.body ? document.body.innerText.includes(%s) : false,
  charts: document.querySelectorAll('.vega-embed').length,
  charts_drawn: document.querySelectorAll('.vega-embed canvas, .vega-embed svg.marks').length,
  tables: document.querySelectorAll('[data-testid="stDataFrame"]').length,
  tables_drawn: document.querySelectorAll('[data-testid="stDataFrame"] canvas').length})"""


@contextlib.contextmanager
def page(url: str):
    """A fresh headless Chromium on ``url``: yields a function that evaluates a JS expression there."""
    from websockets.sync.client import connect

    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.Popen(
            [chromium(), *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0", url],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 60
            port_file = os.path.join(profile, "DevToolsActivePort")  # written once the protocol listens
            while "\n" not in (said := _text(port_file)):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"headless Chromium never opened its DevTools port (exit {proc.poll()})")
                time.sleep(0.02)
            port = int(said.split()[0])
            pages = []
            while not pages:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                    pages = [t for t in json.load(r) if t.get("type") == "page" and "webSocketDebuggerUrl" in t]
                if time.monotonic() > deadline:
                    raise SystemExit("headless Chromium opened no page")
                time.sleep(0.02)
            with connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=30) as ws:
                n = [0]

                def evaluate(expression: str):
                    n[0] += 1
                    ask = {"expression": expression, "returnByValue": True}
                    ws.send(json.dumps({"id": n[0], "method": "Runtime.evaluate", "params": ask}))
                    while (reply := json.loads(ws.recv(timeout=60))).get("id") != n[0]:
                        pass
                    return reply.get("result", {}).get("result", {}).get("value")

                yield evaluate
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def state(evaluate, text: str) -> dict:
    got = evaluate(STATE % json.dumps(text))
    return json.loads(got) if got else {}


def settled(url: str, text: str, quiet_s: float = 4.0, timeout: float = 120.0) -> dict:
    """How many charts and tables the view shows: counted once its text is there and nothing changed
    for ``quiet_s`` seconds."""
    t0 = time.monotonic()
    with page(url) as evaluate:
        last, since = None, time.monotonic()
        while time.monotonic() - t0 < timeout:
            s = state(evaluate, text)
            if s != last:
                last, since = s, time.monotonic()
            elif s.get("text") and time.monotonic() - since >= quiet_s:
                return s
            time.sleep(0.2)
    raise SystemExit(f"{url}: the page never settled with {text!r} on it (last: {last})")


def drawn_in(url: str, text: str, want: dict, timeout: float = 120.0) -> float:
    """Seconds from starting a browser on ``url`` until the view's text and all ``want``'s charts and
    tables are drawn."""
    t0 = time.perf_counter()
    with page(url) as evaluate:
        while time.perf_counter() - t0 < timeout:
            s = state(evaluate, text)
            if s.get("text") and s["charts_drawn"] >= want["charts"] and s["tables_drawn"] >= want["tables"]:
                return time.perf_counter() - t0
            time.sleep(0.05)
    raise SystemExit(f"{url}: not drawn in {timeout:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--out")
    ap.add_argument("--wait-for", default="blocks of 64 steps", help="a text the view's page holds once drawn")
    args = ap.parse_args()
    if chromium() is None:
        raise SystemExit("no chromium here (Debian's `chromium` package)")
    want = {}
    with dashboard(args.run) as url:
        for v in VIEWS:
            want[v] = settled(f"{url}/?view={v}", args.wait_for)
    rows = []
    for v in VIEWS:
        with dashboard(args.run) as url:  # a server just up: the first visitor's view
            cold = drawn_in(f"{url}/?view={v}", args.wait_for, want[v])
            warm = drawn_in(f"{url}/?view={v}", args.wait_for, want[v])
        w = want[v]
        rows.append(
            f"| {v} | {w['charts']} charts, {w['tables']} tables | {cold:.2f} s ({'met' if cold <= 3 else 'MISSED'}) "
            f"| {warm:.2f} s ({'met' if warm <= 3 else 'MISSED'}) |"
        )
        print(rows[-1], flush=True)
    body = "\n".join(
        [
            f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()}, 2 cores, Python {platform.python_version()}, "
            f"Debian's headless Chromium (`python bench/dashboard_browser.py {args.run}`): from starting a browser on "
            "the view's URL (its start included) until the view's text and every chart and table it shows are drawn. "
            "First visitor: a server whose health check has just answered (it reads the run before it serves, "
            "20 s at most: dashboards/serve.py); then a fresh browser on the same server. Target: 3 s.",
            "",
            "| view | what it draws | first visitor | next visitor |",
            "|---|---|---|---|",
            *rows,
        ]
    )
    print(body)
    if args.out:
        update_section(
            args.out, f"Dashboard in headless Chromium (bench/dashboard_browser.py, {os.path.basename(args.run)})", body
        )


if __name__ == "__main__":
    main()

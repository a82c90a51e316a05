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
import json
import os
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from helpers.browser import chromium, dashboard, devtools_page  # noqa: E402 - after the sys.path set-up above
from results import update_section  # noqa: E402 - after the sys.path set-up above

VIEWS = ("overview", "ranks", "findings", "collectives", "devices", "compare")
STATE = """JSON.stringify({
  text: document.body ? document.body.innerText.includes(%s) : false,
  charts: document.querySelectorAll('.vega-embed').length,
  charts_drawn: document.querySelectorAll('.vega-embed canvas, .vega-embed svg.marks').length,
  tables: document.querySelectorAll('[data-testid="stDataFrame"]').length,
  tables_drawn: document.querySelectorAll('[data-testid="stDataFrame"] canvas').length})"""


def state(evaluate, text: str) -> dict:
    got = evaluate(STATE % json.dumps(text))
    return json.loads(got) if got else {}


def settled(url: str, text: str, quiet_s: float = 4.0, timeout: float = 120.0) -> dict:
    """How many charts and tables the view shows: counted once its text is there and nothing changed
    for ``quiet_s`` seconds."""
    t0 = time.monotonic()
    with devtools_page(url) as evaluate:
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
    with devtools_page(url) as evaluate:
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

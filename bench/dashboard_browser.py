"""The dashboard in headless Chromium (Debian's): how long each view takes to be on the screen, charts
drawn, from the moment a browser is started on its URL (the browser's own start included). Each view is
measured twice: first on a server that has just come up (``telemetry dashboard RUN`` started, its health
check answered: the first visitor), then in a fresh browser on that same server. Issue 27's target: every view's first render at most 3 s.

    python bench/dashboard_browser.py RUN [--out bench/RESULTS.md]

A view is drawn when its text holds ``--wait-for`` (default: the caption of a run drawn from its blocks)
and every chart (Vega) and table (Streamlit's data grid) the view shows has its canvas: how many it shows
is counted first, on a page left to settle (a server of its own, not timed).

For a long run (drawn from its blocks), a zoom as well: the Ranks view's link to 200 steps of every rank
(as many as ``ZOOM_ROWS`` allows) opened in a fresh browser, then a key pressed on the steps slider, timed
until the page has drawn the new range (target: 1 s, an interaction).
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

sys.path.insert(0, ROOT)

from helpers.browser import chromium, dashboard, devtools_page  # noqa: E402 - after the sys.path set-up above
from results import update_section  # noqa: E402 - after the sys.path set-up above

from telemetry.dashboards.source import ZOOM_ROWS  # noqa: E402 - after the sys.path set-up above

VIEWS = ("overview", "ranks", "findings", "collectives", "devices", "compare")
STATE = """JSON.stringify({
  text: document.body ? document.body.innerText.includes(%s) : false,
  charts: document.querySelectorAll('.vega-embed').length,
  charts_drawn: document.querySelectorAll('.vega-embed canvas, .vega-embed svg.marks').length,
  tables: document.querySelectorAll('[data-testid="stDataFrame"]').length,
  tables_drawn: document.querySelectorAll('[data-testid="stDataFrame"] canvas').length,
  running: !!document.querySelector('[data-testid="stStatusWidget"]'),
  stale: document.querySelectorAll('[data-stale="true"]').length})"""


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


SIGNATURE = """(() => { const c = document.querySelector('.vega-embed canvas'); if (!c) return '';
  const d = c.toDataURL(); let h = 0; for (let i = 0; i < d.length; i += 7) h = (h * 31 + d.charCodeAt(i)) | 0;
  return d.length + ':' + h; })()"""


def zoom_in_browser(url: str, steps: tuple[int, int], timeout: float = 120.0) -> tuple[float, float]:
    """A zoom in a browser: (seconds from starting a browser on the Ranks view's link to ``steps`` of every
    rank until its heatmap is drawn; seconds from a key pressed on the steps slider (its first step one on)
    until the page says the new range, nothing is running or stale and the heatmap is drawn anew)."""
    a, b = steps
    said = f"steps {a:,} to {b:,} of every rank"
    t0 = time.perf_counter()
    with devtools_page(f"{url}/?view=ranks&steps={a}-{b}") as evaluate:
        while not ((s := state(evaluate, said)).get("text") and s.get("charts_drawn")):
            if time.perf_counter() - t0 > timeout:
                raise SystemExit(f"the zoom's link was not drawn in {timeout:.0f} s")
            time.sleep(0.05)
        link = time.perf_counter() - t0
        time.sleep(2.0)  # settled: the slider's key press is an interaction on a page at rest
        before = evaluate(SIGNATURE)
        evaluate("""document.querySelector('[data-testid="stSlider"] input[type=range]').focus()""")
        t0 = time.perf_counter()
        for kind in ("rawKeyDown", "keyUp"):  # a key pressed, as a user would (a trusted event)
            evaluate.send(
                "Input.dispatchKeyEvent", type=kind, key="ArrowRight", code="ArrowRight", windowsVirtualKeyCode=39
            )
        now = f"steps {a + 1:,} to {b:,} of every rank"
        while time.perf_counter() - t0 < timeout:
            s = state(evaluate, now)
            if s.get("text") and not s["running"] and not s["stale"] and evaluate(SIGNATURE) != before:
                return link, time.perf_counter() - t0
            time.sleep(0.02)
    raise SystemExit(f"the zoom's key press was not drawn in {timeout:.0f} s")


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
    zoom = []
    b = _blocks(args.run)
    if b is not None:
        n = ZOOM_ROWS // b.ranks
        lo = (b.first + b.last) // 2
        with dashboard(args.run) as url:
            link, key = zoom_in_browser(url, (lo, lo + n - 1))
        zoom = [
            "",
            f"A zoom, on a server that has read the run: the Ranks view's link to steps {lo:,}-{lo + n - 1:,} of every rank "
            f"(`?view=ranks&steps={lo}-{lo + n - 1}`) drawn in a fresh browser in {link:.2f} s "
            f"({'met' if link <= 3 else 'MISSED'}: 3 s, a first render); then a key pressed on the steps slider (its "
            f"first step one on: {n - 1} steps) until the page says the new range, nothing is running or stale and "
            f"the heatmap is drawn anew: {key:.2f} s ({'met' if key <= 1 else 'MISSED'}: 1 s, an interaction).",
        ]
        print(zoom[-1], flush=True)
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
            *zoom,
        ]
    )
    print(body)
    if args.out:
        update_section(
            args.out, f"Dashboard in headless Chromium (bench/dashboard_browser.py, {os.path.basename(args.run)})", body
        )


def _blocks(run: str):
    """The run's Blocks when the dashboard draws it from its blocks of steps (a long run), else None."""
    from telemetry.dashboards.source import load_view

    return load_view(run).blocks


if __name__ == "__main__":
    main()

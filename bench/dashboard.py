"""The dashboard on a large run: 256 ranks x 10,000 steps (the vectorized table of
bench/detectors/scale.py, one forward straggler), timed through Streamlit's AppTest: the first render
of each view (load, analysis and charts; the load is cached after the first) and a later
interaction (the cached run, a view switched). Targets (issue 9): first render at most 3 s, later
interactions at most 1 s. Also checks that the straggler's rank is named on the Ranks view.

    python bench/dashboard.py [--out bench/RESULTS.md]

``--run-dir DIR``: a kept run directory instead (a long one, drawn from its blocks of steps:
``python bench/coarse.py --huge --keep DIR`` keeps a simulated 10,000 x 10,000 one as
DIR/sim-10000x10000; `telemetry compact DIR/sim-10000x10000` then keeps its analysis, which the
dashboard reads instead of every rank's files): the first render of every view, a view switched, and the two ways of zooming
in (every rank's steps for as many steps as ``ZOOM_ROWS`` allows, two ranks' every step), in the
section "Dashboard at 10^8 records".
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "detectors"))

from results import update_section  # noqa: E402 - after the sys.path set-up above
from scale import make_table  # noqa: E402 - after the sys.path set-up above

from telemetry.dashboards.serve import APP  # noqa: E402 - after the path set-up

VIEWS = ("overview", "ranks", "findings", "collectives", "devices", "compare")


def first_renders(out: dict, timeout: int):
    """The first render of each page, as a user who opens a link to it would see it: a new session and
    an empty cache (load, analysis and that page's charts), timed into ``out``; the last AppTest."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    at = None
    for view in VIEWS:
        st.cache_resource.clear()
        at = AppTest.from_file(APP, default_timeout=timeout)
        at.query_params["view"] = view
        t0 = time.perf_counter()
        at.run()
        out[f"first render, {view} (load + analysis + page)"] = time.perf_counter() - t0
        assert not at.exception, [e.value for e in at.exception]
    return at


def switch(at, view: str, out: dict) -> None:
    """Switch ``at`` to ``view`` (the run cached), timed into ``out``."""
    [radio] = [r for r in at.sidebar.radio if r.label == "view"]
    t0 = time.perf_counter()
    radio.set_value(view).run()
    out[f"switch to {view} (cached run)"] = time.perf_counter() - t0
    assert not at.exception, [e.value for e in at.exception]


def measure(ranks: int, steps: int) -> dict:

    from telemetry.dashboards.serve import warm_up

    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "large.parquet")
        make_table(ranks, steps).to_parquet(path, index=False)
        os.environ["TELEMETRY_DASHBOARD_PATH"] = path
        # What `telemetry dashboard`'s server process does before it serves (dashboards/serve.py).
        out["server start: imports and warm-up before serving (once, not a render)"] = warm_up()
        at = first_renders(out, 120)
        # Later interactions in one session: the run is cached, a view switched or a control moved.
        for view in VIEWS:
            switch(at, view, out)
            if view == "ranks":
                summary = at.dataframe[0].value
                named = summary.loc[summary["findings"].str.contains("straggler"), "rank"].tolist()
                out["straggler named on Ranks"] = named
                [series] = [s for s in at.selectbox if s.label == "series"]
                t0 = time.perf_counter()
                series.set_value("blocked").run()
                out["Ranks: heatmap series changed to blocked"] = time.perf_counter() - t0
            if view == "findings":
                [slider] = [s for s in at.sidebar.slider if s.label == "steps"]
                t0 = time.perf_counter()
                slider.set_value((1000, 5000)).run()
                out["Findings: step range changed"] = time.perf_counter() - t0
    return out


def measure_run_dir(path: str) -> tuple[dict, dict]:
    """(timings, facts) of the dashboard on the run directory ``path``."""
    import resource

    from telemetry.dashboards import source as S
    from telemetry.dashboards.serve import warm_up

    out: dict = {}
    os.environ["TELEMETRY_DASHBOARD_PATH"] = path
    # What `telemetry dashboard`'s server process does before it serves (dashboards/serve.py): not in the
    # first render a user waits for
    out["server start: imports and warm-up before serving (once, not a render)"] = warm_up()
    at = first_renders(out, 900)
    facts = {"captions": [c.value for c in at.caption if "blocks of" in c.value][:1]}
    for view in VIEWS:
        switch(at, view, out)
        if view == "ranks":
            summary = at.dataframe[0].value
            facts["straggler named on Ranks"] = summary.loc[
                summary["findings"].str.contains("straggler"), "rank"
            ].tolist()[:5]
    [radio] = [r for r in at.sidebar.radio if r.label == "view"]
    radio.set_value("ranks").run()
    view = S.load_view(path)  # its size, loaded once more beside the app's (in the peak memory too)
    b = view.blocks
    facts["blocks"] = (
        None if b is None else f"{b.ranks:,} ranks x {b.last - b.first + 1:,} steps, {len(view.run.table):,} block rows"
    )
    n = S.ZOOM_ROWS // b.ranks
    lo = (b.first + b.last) // 2
    [slider] = [s for s in at.sidebar.slider if s.label == "steps"]
    t0 = time.perf_counter()
    slider.set_value((lo, lo + n - 1)).run()
    took = time.perf_counter() - t0
    assert not at.exception, [e.value for e in at.exception]
    facts["zoom caption"] = [c.value for c in at.caption if c.value.startswith("Zoomed in")][:1]
    how = (
        "from the picture telemetry compact kept"
        if "from the picture" in str(facts["zoom caption"])
        else "read row by row"
    )
    out[f"Ranks: zoom to {n:,} steps of every rank ({how})"] = took
    wide = S.PICTURE_STEPS
    if wide > n and "from the picture" in how:  # a wider zoom, still step by step from the picture
        t0 = time.perf_counter()
        slider.set_value((lo, min(lo + wide - 1, b.last))).run()
        out[f"Ranks: zoom to {wide:,} steps of every rank (from the picture, grouped to 400 columns)"] = (
            time.perf_counter() - t0
        )
        assert not at.exception, [e.value for e in at.exception]
        slider.set_value((lo, lo + n - 1)).run()
    for view in ("overview", "devices"):  # the zoom's other views (its picture or rows read once)
        t0 = time.perf_counter()
        radio.set_value(view).run()
        out[f"{view.capitalize()} in that zoom (view switched)"] = time.perf_counter() - t0
        assert not at.exception, [e.value for e in at.exception]
    radio.set_value("ranks").run()
    slider.set_value((b.first, b.last)).run()
    [ranks] = [m for m in at.sidebar.multiselect if m.label.startswith("ranks")]
    t0 = time.perf_counter()
    ranks.set_value([0, b.ranks - 1]).run()
    out["Ranks: zoom to 2 ranks, every step (read row by row)"] = time.perf_counter() - t0
    assert not at.exception, [e.value for e in at.exception]
    facts["peak GiB"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    return out, facts


def rows_of(r: dict) -> list[str]:
    rows = []
    for name, v in r.items():
        if name.startswith("server start"):
            rows.append(f"| {name} | {v:.2f} s | - |")
        elif isinstance(v, float):
            target = "<= 3 s" if name.startswith("first") else "<= 1 s"
            met = "met" if v <= (3.0 if name.startswith("first") else 1.0) else "MISSED"
            rows.append(f"| {name} | {v:.2f} s | {target} ({met}) |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--ranks", type=int, default=256)
    ap.add_argument("--steps", type=int, default=10000)
    ap.add_argument("--run-dir", nargs="+", help="kept run directories (see the module's doc), each measured in turn")
    args = ap.parse_args()
    if args.run_dir:
        parts = [
            f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()}, 2 cores, Python "
            f"{platform.python_version()} (`python bench/dashboard.py --run-dir {' '.join(args.run_dir)}`; "
            "`telemetry simulate --ranks 10000 --steps 10000 --inject straggler:rank=7500,phase=forward,factor=1.5` "
            "wrote the run, as `python bench/coarse.py --huge --keep DIR` does; `telemetry compact RUN` merges its "
            "segments, as a job's writers do, and keeps its analysis in RUN/summary/), Streamlit's AppTest (the server's work; the browser's drawing is "
            "not in it). Peak memory: the process's so far (the runs are measured one after the other)."
        ]
        for path in args.run_dir:
            files = len(os.listdir(os.path.join(path, "ranks")))
            kept = os.path.exists(os.path.join(path, "summary", "analysis.json"))
            r, facts = measure_run_dir(path)
            parts += [
                "",
                f"**{os.path.basename(path)}** ({files:,} files in ranks/{', its analysis kept' if kept else ''}): "
                f"{facts['blocks']}; peak memory "
                f"{facts['peak GiB']} GiB.",
                "",
                "| step | time | target |",
                "|---|---|---|",
                *rows_of(r),
                "",
                f"Straggler named on the Ranks view: {facts.get('straggler named on Ranks')}. "
                f"Said on the page: {facts['captions']}; zoomed: {facts['zoom caption']}.",
            ]
        body = "\n".join(parts)
        print(body)
        if args.out:
            update_section(args.out, "Dashboard at 10^8 records (bench/dashboard.py --run-dir)", body)
        return
    r = measure(args.ranks, args.steps)
    rows = rows_of(r)
    body = "\n".join(
        [
            f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()}, 2 cores, Python {platform.python_version()} "
            f"(`python bench/dashboard.py`), {args.ranks} ranks x {args.steps} steps, Streamlit's AppTest "
            "(the server-side work of a render: loading, analysis, building every element; the browser's drawing "
            "is not in it).",
            "",
            "| step | time | target |",
            "|---|---|---|",
            *rows,
            "",
            f"Straggler (one injected at rank {(args.ranks * 3) // 4}, forward) named on the Ranks view: "
            f"{r.get('straggler named on Ranks')}.",
        ]
    )
    print(body)
    if args.out:
        update_section(args.out, "Dashboard (bench/dashboard.py)", body)


if __name__ == "__main__":
    main()

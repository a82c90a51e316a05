"""The Streamlit app behind ``telemetry dashboard``: Overview, Ranks and Findings of one run.

Read-only: it opens the run named by ``TELEMETRY_DASHBOARD_PATH`` (``telemetry dashboard PATH`` sets
it) through the library's loader, shows the library's analysis, and writes nothing. A run that is missing, empty or unreadable is a message on the page.
"""

from __future__ import annotations

import json
import os
import time

import streamlit as st

from dashboards import charts
from dashboards import data as D

st.set_page_config(page_title="training-telemetry", layout="wide")


def _path() -> str:
    """The run to show: the one given, else one chosen among the run directories under the root
    given (only those: no other path can be opened from the page)."""
    path = os.environ.get("TELEMETRY_DASHBOARD_PATH", "")
    root = os.environ.get("TELEMETRY_DASHBOARD_ROOT", "")
    if path or not root:
        return path
    runs = D.list_runs(root)
    if not runs:
        return ""
    return st.sidebar.selectbox("run", runs, format_func=os.path.basename)


@st.cache_data(show_spinner="Loading and analyzing the run...")
def _load(path: str, mtime: float) -> D.RunView:  # mtime: a run still being written is read again
    return D.load_view(path)


@st.cache_data(show_spinner=False)
def _percentiles(path: str, mtime: float):  # noqa: ANN202 - a DataFrame, cached per run version
    return D.step_percentiles(_load(path, mtime).matrix)


def _mtime(path: str) -> float:
    try:
        return max(os.path.getmtime(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs) \
            if os.path.isdir(path) else os.path.getmtime(path)
    except (OSError, ValueError):
        return 0.0


def overview(view: D.RunView, percentiles) -> None:  # noqa: ANN001
    s = view.analysis.summary
    cols = st.columns(5)
    cols[0].metric("median step time", f"{s['step_time_s'] * 1e3:.1f} ms", help="data wait included")
    cols[1].metric("tokens/s", f"{s['tokens_per_s']:,.0f}" if "tokens_per_s" in s else "-",
                   help=None if "tokens_per_s" in s else "no step carried a token count")
    cols[2].metric("MFU", f"{s['mfu']:.1%}" if "mfu" in s else "-",
                   help=None if "mfu" in s else "not configured: init(flops_per_token=...) and a known peak")
    cols[3].metric("estimated slowdown", f"{s['slowdown']:.1%}", help="all findings together, over the run")
    span = view.run.table["start_s"]
    cols[4].metric("uptime", f"{(span.max() - span.min()) / 60:.1f} min", help="first step start to last step start")
    st.caption(f"{s['ranks']} ranks, {s['steps']} steps ({s['first_step']}-{s['last_step']})")
    left, right = st.columns([2, 1])
    left.subheader("Step time over steps")
    left.caption("median (p50) and 95th percentile over ranks; steps far above the rest are clipped; "
                 f"beyond {D.MAX_LINE_POINTS} steps a point is a block of steps (median p50, highest p95)")
    left.altair_chart(charts.step_percentiles(percentiles), width="stretch")
    right.subheader("Where the time went")
    right.altair_chart(charts.goodput(D.goodput(s)), width="stretch")
    st.subheader(f"Findings ({len(view.analysis.findings)}), by cost")
    _finding_list(D.finding_cards(view), compact=True)


def _finding_list(cards: list[dict], compact: bool = False) -> None:
    if not cards:
        st.success("No finding: no straggler, stall, regression or hang detected.")
        return
    for f in cards:
        who = f"rank {', '.join(map(str, f['ranks']))}" if f["ranks"] else "job-wide"
        title = (f"[{f['severity']}] {f['kind']} - {who}" + (f" - phase {f['phase']}" if f.get("phase") else "")
                 + f" - steps {f.get('first_step')}-{f.get('last_step')} - what-if {f['slowdown']:.1%}")
        with st.expander(title, expanded=not compact):
            st.write(f["evidence"])
            causes = f.get("causes") or []
            if causes:
                st.markdown("**Causes**")
                for c in causes:
                    st.markdown(f"- `{c.get('kind')}`: {c.get('evidence', '')}")
            known = {"kind", "ranks", "phase", "first_step", "last_step", "severity", "slowdown", "evidence", "causes"}
            rest = {k: v for k, v in f.items() if k not in known}
            if rest:
                st.code(json.dumps(rest, indent=1, default=str), language="json")


def ranks(view: D.RunView, step_range: tuple[int, int], chosen: list[int]) -> None:
    m = view.matrix
    options = ["compute", "blocked", "data"] + [p for p in m.phase_compute if p != "data"]
    if m.comm is None:
        options.remove("blocked")
    what = st.selectbox("series", options, help="compute: busy time; blocked: time in collectives; "
                        "a phase: its compute, blocked time removed")
    try:
        cells = D.heatmap(m, what, chosen or None, step_range)
    except D.ViewError as exc:
        st.warning(str(exc))
        return
    st.subheader(f"{what}, ms per step, rank x step")
    st.altair_chart(charts.heatmap(cells, what, D.marked_ranks(view)), width="stretch")
    st.subheader("Per rank (median after warm-up)")
    st.dataframe(D.rank_summary(view).round(2), hide_index=True, width="stretch")


def findings(view: D.RunView) -> None:
    _finding_list(D.finding_cards(view))
    if view.online:
        st.subheader("Online detection during the run")
        st.dataframe(view.online, width="stretch")


def main() -> None:
    st.sidebar.title("training-telemetry")
    path = _path()
    st.sidebar.caption(path or "no run")
    root = os.environ.get("TELEMETRY_DASHBOARD_ROOT", "")
    if not path and root:
        st.error(f"No run directory under {root} yet: run a job with telemetry.init(run_dir=...) there, "
                 "or start the dashboard with a run directory or a steps table.")
        return
    mtime = _mtime(path)
    try:
        view = _load(path, mtime)
    except D.ViewError as exc:
        st.error(f"Cannot show this run: {exc}")
        return
    m = view.matrix
    for w in view.run.warnings:
        st.warning(w)
    lo, hi = int(m.steps[0]), int(m.steps[-1])
    step_range = st.sidebar.slider("steps", lo, hi, (lo, hi)) if hi > lo else (lo, hi)
    chosen = st.sidebar.multiselect("ranks (all when empty)", [int(r) for r in m.ranks])
    st.sidebar.caption(f"analyzed at {time.strftime('%H:%M:%S')}")
    # The view is a sidebar choice kept in the URL (?view=ranks), so a link opens the view it shows.
    names = {"overview": "Overview", "ranks": "Ranks", "findings": "Findings"}
    if "view" not in st.session_state:  # the first run of a session starts where the URL says
        asked = st.query_params.get("view", "overview")
        st.session_state["view"] = asked if asked in names else "overview"
    key = st.sidebar.radio("view", list(names), format_func=names.get, key="view")
    st.query_params["view"] = key
    st.header(names[key])
    if key == "overview":
        overview(view, _percentiles(path, mtime))
    elif key == "ranks":
        ranks(view, step_range, chosen)
    else:
        findings(view)

main()

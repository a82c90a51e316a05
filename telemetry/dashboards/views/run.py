"""The views of the run itself: Overview (its summary, step time over steps, where the time went,
the findings by cost), Ranks (a series rank x step, the per-rank table) and Findings (each finding,
and the evidence behind one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import streamlit as st

from .. import charts
from .. import data as D
from .. import source as S
from ..grid import rank_bands
from .common import Choice, finding_list, finding_title, step_title

if TYPE_CHECKING:
    import pandas as pd


def overview(view: S.RunView, choice: Choice, percentiles: pd.DataFrame) -> None:
    s = view.analysis.summary
    cols = st.columns(5)
    cols[0].metric("median step time", f"{s['step_time_s'] * 1e3:.1f} ms", help="data wait included")
    cols[1].metric(
        "tokens/s",
        f"{s['tokens_per_s']:,.0f}" if "tokens_per_s" in s else "-",
        help=None if "tokens_per_s" in s else "no step carried a token count",
    )
    cols[2].metric(
        "MFU",
        f"{s['mfu']:.1%}" if "mfu" in s else "-",
        help=None if "mfu" in s else "not configured: init(flops_per_token=...) and a known peak",
    )
    cols[3].metric("estimated slowdown", f"{s['slowdown']:.1%}", help="all findings together, over the run")
    up = s.get("uptime") or {}
    if "wall_s" in up:
        lost = (
            f"; {up['lost_s'] / 60:.1f} min lost in {up['restarts']} restart(s) or outage(s) (at steps "
            f"{', '.join(map(str, up['restarted_at_steps']))})"
            if up.get("restarts")
            else ""
        )
        cols[4].metric(
            "uptime",
            f"{up['wall_s'] / 60:.1f} min",
            help=f"first step start to last step end: {up['in_steps_s'] / 60:.1f} min in steps{lost}",
        )
    else:
        cols[4].metric("uptime", "-", help="the input has no step start times")
    if view.run.kind == "prometheus":
        st.caption(
            f"{s['ranks']} ranks, {s['steps']} windows of {view.run.meta['window_s']:g} s with steps (steps "
            f"{s['first_step']}-{s['last_step']}); each window is shown at the job's last completed step at its "
            "end, with the per-step means of the steps it holds"
        )
    else:
        st.caption(f"{s['ranks']} ranks, {s['steps']} steps ({s['first_step']}-{s['last_step']})")
    left, right = st.columns([2, 1])
    left.subheader("Step time over steps")
    left.caption(
        "median (p50) and 95th percentile over ranks; steps far above the rest are clipped; "
        f"beyond {D.MAX_LINE_POINTS} steps a point is a block of steps (median p50, highest p95)"
    )
    left.altair_chart(charts.step_percentiles(percentiles, step_title(view)), width="stretch")
    right.subheader("Where the time went")
    right.altair_chart(charts.goodput(D.goodput(s)), width="stretch")
    st.subheader(f"Findings ({len(view.analysis.findings)}), by cost")
    finding_list(D.finding_cards(view), compact=True, collecting=s.get("collecting"), trace_url=D.trace_ui_url(view))


def ranks(view: S.RunView, choice: Choice) -> None:
    m = view.matrix
    options = ["compute", "blocked", "data"] + [p for p in m.phase_compute if p != "data"]
    if m.comm is None:
        options.remove("blocked")
    what = cast(
        str,
        st.selectbox(
            "series",
            options,
            help="compute: busy time; blocked: time in collectives; data: "
            "data-loader wait; a phase: its compute, blocked time removed",
        ),
    )  # one of the options: compute and data at least
    try:
        cells = D.view_heatmap(view, what, choice.ranks or None, choice.steps)
    except S.ViewError as exc:
        st.warning(str(exc))
        return
    st.subheader(f"{what}, ms per step, rank x step")
    marked = D.marked_ranks(view)
    if "last_rank" in cells.columns:  # bands of ranks: their axis labels thin out; the named ranks said here
        bands, height = rank_bands(cells)
        named = [f"{r} ({k}: band {a}-{b})" for r, k in sorted(marked.items()) for a, b in bands if a <= r <= b]
        st.caption(
            f"{len(bands):,} bands of {height} "
            "consecutive ranks, each cell the band's highest (choose 256 ranks or fewer to see each)."
            + (f" Ranks a finding names: {', '.join(named[:10])}." if named else "")
        )
    st.altair_chart(charts.heatmap(cells, f"{what} (ms per step)", marked), width="stretch")
    st.subheader("Per rank (median after warm-up)")
    st.dataframe(D.rank_summary(view).round(2), hide_index=True, width="stretch")


def findings(view: S.RunView, choice: Choice) -> None:
    cards = D.finding_cards(view)
    finding_list(cards, collecting=view.analysis.summary.get("collecting"), trace_url=D.trace_ui_url(view))
    if cards:
        st.subheader("The evidence behind one finding")
        i = cast(
            int, st.selectbox("finding", range(len(cards)), format_func=lambda k: finding_title(cards[k]), key="focus")
        )  # there are cards
        f = D.focus(view, cards[i])
        st.caption(
            f"{f.label}: {f.note}; steps {f.steps[0]}-{f.steps[1]} (the finding's steps and a margin "
            "either side); its ranks against the others' median"
        )
        st.altair_chart(charts.lines(f.lines, f.label, "who", "ranks", step_title(view)), width="stretch")
        st.altair_chart(charts.heatmap(f.cells, f.label, D.marked_ranks(view), value="value"), width="stretch")
    if view.online:
        st.subheader("Online detection during the run")
        st.dataframe(view.online, width="stretch")

"""The views across runs: Compare (this run against a base run) and History (the job's runs in time
order, their changes, and the runs either side of one compared).
"""

from __future__ import annotations

import os
from typing import Any, cast

import streamlit as st

from telemetry.analysis.history.explain import explain, slower_and_faster

from .. import charts
from .. import data as D
from .. import history as H
from .. import source as S
from .common import Choice, finding_list


def compare(view: S.RunView, choice: Choice, base: S.RunView | None, base_name: str) -> None:
    if base is None:
        st.info(
            "Nothing to compare with: start `telemetry dashboard NEW --base BASE`, or start it with no run "
            "to choose both runs among the run directories under runs/."
        )
        return
    doc = D.compare(base, view)
    s = doc["summary"]
    cols = st.columns(2)
    for col, name, v, steps in (
        (cols[0], f"base: {base_name}", base, s["base_steps"]),
        (cols[1], "new: this run", view, s["new_steps"]),
    ):
        col.markdown(f"**{name}**")
        sub = col.columns(3)
        sub[0].metric("median step time", f"{v.analysis.summary['step_time_s'] * 1e3:.1f} ms")
        tps = v.analysis.summary.get("tokens_per_s")
        sub[1].metric("tokens/s", f"{tps:,.0f}" if tps else "-")
        sub[2].metric("findings", len(v.analysis.findings))
        col.caption(f"{v.analysis.summary['ranks']} ranks, {steps} steps")
    change = s.get("step_change")
    st.metric(
        "step time change (new against base)",
        f"{change:+.1%}" if change is not None else "-",
        delta=f"{(s['new_step_s'] - s['base_step_s']) * 1e3:+.2f} ms",
        delta_color="inverse",
    )
    table = D.compare_series(doc)
    st.subheader("Per series (ms per step, median over ranks and steps)")
    st.altair_chart(charts.compare_bars(table), width="stretch")
    st.dataframe(
        table.style.format({"base ms": "{:.2f}", "new ms": "{:.2f}", "change": "{:+.1%}", "p": "{:.1e}"}),
        hide_index=True,
        width="stretch",
    )
    st.caption(
        f"A change is significant from {s['min_effect']:.0%} with a Mann-Whitney p under its bound "
        f"(blocks of steps compared, as `telemetry diff` does)."
    )
    for name, why in s["undecided"].items():
        st.warning(f"undecided: {name}: {why}")
    st.subheader(f"Changes ({len(doc['findings'])})")
    finding_list(doc["findings"], compact=True)


HISTORY_PAIR = "history_pair"  # session state: (before, after) run directories the Compare view shows


def _compare_pair(pair: tuple[str, str]) -> None:
    """A button's callback (before the page runs again): the Compare view, on the runs either side."""
    st.session_state[HISTORY_PAIR] = pair
    st.session_state["view"] = "compare"


@st.cache_data(show_spinner="comparing the runs either side", max_entries=16)
def _either_side(before: str, after: str, slower_after: bool, min_effect: float, keys: tuple) -> dict[str, Any]:
    return explain(before, after, slower_after, min_effect)  # keys: the runs' content, so a grown run is read again


def _either_side_view(pair: tuple[str, str], c: dict[str, Any], min_change: float) -> None:
    """The two runs either side of the change: their steps compared, and their captures of one rank."""
    keys = tuple(H.content_key(p) for p in pair)
    e = _either_side(pair[0], pair[1], bool(c["regression"]), min_change, keys)
    for f in (e.get("steps") or {}).get("findings", []):
        st.markdown(f"- {c['runs'][0]} -> {c['runs'][1]}, {f['kind']}: {f['evidence']}")
    cap = e.get("captures")
    if cap:
        slow, fast = slower_and_faster(cap)
        st.markdown(
            f"**Captures compared**: rank {slow['rank']} in the slower run ({os.path.basename(slow['run'])}, steps "
            f"{slow['steps'][0]}-{slow['steps'][1]}) against the faster ({os.path.basename(fast['run'])}, steps "
            f"{fast['steps'][0]}-{fast['steps'][1]}): what takes more time per step"
        )
        table = H.trace_table(e)
        if len(table):
            st.dataframe(
                table.style.format({k: "{:.3f}" for k in table.columns if "ms/step" in k} | {"calls/step": "{:.1f}"}),
                hide_index=True,
                width="stretch",
            )
        else:
            st.caption("Nothing in the slower run's capture takes longer per step.")
    for n in e.get("notes", []):
        st.caption(n)


def history_view(view: S.RunView, choice: Choice, hist: "H.History | None") -> None:
    """Many runs of the job in time order (``--history``): one series over the runs with the change
    points marked, the changes, and what moved across the one chosen (telemetry/dashboards/history.py)."""
    if hist is None:
        st.info(
            "No history: start `telemetry dashboard RUN --history DIR` (a folder of runs of the job, or run "
            "directories) to see them in time order and the runs after which something changed."
        )
        return
    for s in hist.skipped:
        st.warning(f"skipped {s}")
    runs = hist.doc["runs"]
    if not runs:
        st.info("No run directory in the history source (a run directory holds meta.json or ranks/).")
        return
    df = H.trend(hist)
    changes = hist.doc["changes"]
    st.caption(
        f"{len(runs)} runs, {len(hist.doc['groups'])} group(s) of like runs (changes are searched within a group), "
        f"{len(changes)} change(s); as `telemetry history` finds them"
    )
    left, right = st.columns([1, 1])
    metric = cast(str, left.selectbox("series", H.metrics(hist), key="history_metric"))  # step time at least
    has_start = df["start"].notna().any()
    x = cast(
        str,
        right.radio(
            "x axis",
            ["n", "start"] if has_start else ["n"],
            format_func={"n": "run number", "start": "start time"}.get,
            horizontal=True,
            key="history_x",
        ),
    )
    st.altair_chart(H.chart(df, metric, changes, x), width="stretch")
    st.caption(
        "A point per run (hover: its name, commit and tags); a dashed rule at the first run after each change, "
        "red for a change of this series, grey for another's."
    )
    for n in hist.doc["notes"]:
        st.caption(f"note: {n}")
    st.subheader(f"Changes ({len(changes)})")
    if not changes:
        st.success("No change across these runs.")
        return
    st.dataframe(
        H.changes_table(hist).style.format({"change": "{:+.1%}", "p": "{:.4f}", "before": "{:.6g}", "after": "{:.6g}"}),
        hide_index=True,
        width="stretch",
    )
    i = st.selectbox(
        "change",
        range(len(changes)),
        index=H.first_shown(changes),
        format_func=lambda k: H.change_label(changes[k]),
        key="history_change",
    )
    c = changes[i]
    d = c.get("diff") or {}
    st.markdown(
        f"**What moved** from runs {', '.join(d.get('before_runs', []))} to runs {', '.join(d.get('after_runs', []))} "
        "(each series' median over the runs; compute phases with their run's speed taken out)"
    )
    st.dataframe(
        H.diff_table(c).style.format({"before": "{:.6g}", "after": "{:.6g}", "change": "{:+.1%}"}),
        hide_index=True,
        width="stretch",
    )
    pair = H.pair(hist, c)
    if pair:
        _either_side_view(pair, c, hist.doc["params"]["min_change"])
    if d.get("command"):
        st.markdown(f"Steps, ops and collectives of the runs either side: `{d['command']}`")
    if pair:
        st.button(
            f"Compare {c['runs'][1]} against {c['runs'][0]}",
            on_click=_compare_pair,
            args=(pair,),
            help="opens the Compare view on these two runs (the sidebar's button goes back to the run given)",
        )
    st.markdown(f"Or from a shell: `{H.compare_command(hist, c)}`")

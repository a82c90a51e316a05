"""The Kernels view: a run's profiler traces broken down per rank (compute, communication, memory,
idle and why), a capture's diff against its peer, the top kernels and ops of one rank.
"""

from __future__ import annotations

import os
from typing import Any, cast

import pandas as pd
import streamlit as st

from .. import data as D
from .. import kernels
from .. import source as S
from .common import Choice


def kernels_view(view: S.RunView, choice: Choice) -> None:
    srcs = kernels.sources(view.run)
    if not srcs:
        st.info(
            "No profiler traces in this run. A capture is taken when online detection raises a straggler, "
            "slow_comm or data_stall finding at warning or above (`capture` setting, on by default), or on "
            "demand: `telemetry capture RUN_DIR --ranks 1,3`. A directory of PyTorch profiler traces opens "
            "here too: `telemetry dashboard TRACE_DIR`."
        )
        return
    i = cast(int, st.selectbox("traces", range(len(srcs)), format_func=lambda k: srcs[k].label, key="kernels_source"))
    src = srcs[i]
    bd, problems = _source_breakdown(src)
    for p in problems:
        st.warning(p)
    st.caption(
        "Per rank, over the traced steps (the last profiler step left out, as HTA does): compute, "
        "communication and memory are the union of those kernels (of CPU operators on a CPU trace); idle is "
        "what none covers; comm hidden: the share of communication that compute overlaps. To see a trace: "
        f"open its file in {kernels.PERFETTO} (Open trace file): "
        + ", ".join(
            f"`{os.path.relpath(p, view.run.source) if os.path.isdir(view.run.source) else p}`"
            for p in src.files.values()
        )
    )
    st.dataframe(kernels.temporal_table(bd, src.roles).round(2), hide_index=True, width="stretch")
    diff, title, compared = kernels.diff_of(D.finding_cards(view), src.key) if src.key else ([], "", "")
    if diff:
        st.subheader(title)
        st.caption(compared)
        st.dataframe(pd.DataFrame(diff).head(15), hide_index=True, width="stretch")
    idle = kernels.idle_table(bd)
    if not idle.empty:
        st.subheader("Why the GPU idles")
        st.caption(
            "host wait: the kernel's launch began after the previous kernel ended (the host was late); kernel "
            "wait: gaps under 30 µs between back-to-back kernels; other: waiting on another stream, an event or a peer"
        )
        st.dataframe(idle.round(3), hide_index=True, width="stretch")
    launches = kernels.launch_table(bd)
    if not launches.empty:
        st.subheader("Launches")
        st.dataframe(launches, hide_index=True, width="stretch")
    coll = kernels.collectives_table(bd)
    if not coll.empty:
        st.subheader("Collectives")
        note = (bd.get("waits") or {}).get("note")
        st.caption(
            "waiting: until the latest of these ranks arrived; transfer: after it" + (f" ({note})" if note else "")
        )
        st.dataframe(coll.round(3), hide_index=True, width="stretch")
    ranks = [int(r) for r in bd.get("ranks", {})]
    if ranks:
        st.subheader("Top kernels and ops of one rank")
        r = cast(int, st.selectbox("rank", ranks, key="kernels_rank"))  # there are ranks
        for what in ("kernels", "ops"):
            df = kernels.top_table(bd, r, what)
            if not df.empty:
                st.markdown(f"**{what}**")
                st.dataframe(df, hide_index=True, width="stretch")


@st.cache_data(show_spinner="breaking the traces down", max_entries=16)
def _source_breakdown(src: "kernels.Source") -> tuple[dict[str, Any], list[str]]:
    return kernels.source_breakdown(src)

"""What the views share: the sidebar's choice every view takes (:class:`Choice`: step range, ranks),
the findings drawn as expanders (:func:`finding_list`), and the step axis's title.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pandas as pd
import streamlit as st

from telemetry.analysis.report import collecting_line

from .. import data as D
from .. import source as S


@dataclass(frozen=True)
class Choice:
    steps: tuple[int, int]
    ranks: list[int]  # empty: all


KNOWN_FIELDS = {
    "kind",
    "ranks",
    "phase",
    "first_step",
    "last_step",
    "severity",
    "slowdown",
    "evidence",
    "causes",
    "trace_ids",
    "capture",
    "trace_diff",
}


def finding_title(f: dict[str, Any]) -> str:
    who = f"rank {', '.join(map(str, f['ranks']))}" if f.get("ranks") else "job-wide"
    steps = f"steps {f.get('first_step')}-{f.get('last_step')}" if f.get("first_step") is not None else "all steps"
    slowdown = f.get("slowdown")
    return (
        f"[{f.get('severity', '?')}] {f.get('kind', '?')} - {who}"
        + (f" - phase {f['phase']}" if f.get("phase") else "")
        + f" - {steps}"
        + (f" - what-if {slowdown:.1%}" if isinstance(slowdown, (int, float)) else "")
    )


def finding_list(
    cards: list[dict[str, Any]], compact: bool = False, collecting: dict | None = None, trace_url: str = ""
) -> None:
    """Every finding as an expander: the evidence, the causes, the traces of its worst steps (linked
    with ``trace_url``), and every other field as JSON (so a kind or a field this dashboard does not
    know is still shown). ``collecting``: a live job with too few windows yet (the summary's), said
    instead of "no finding"."""
    if collecting:
        st.info(f"Not enough data yet, {collecting_line(collecting)}.")
    if not cards:
        if not collecting:
            st.success("No finding: no straggler, stall, regression or hang detected.")
        return
    for f in cards:
        with st.expander(finding_title(f), expanded=not compact):
            st.write(f.get("evidence", ""))
            causes = f.get("causes") or []
            if causes:
                st.markdown("**Causes** (the culprit's device and host signals against its peers)")
                for c in causes:
                    st.markdown(f"- `{c.get('kind')}`: {c.get('evidence', '')}")
            traces = D.trace_links(f, trace_url)
            if traces and trace_url:
                st.markdown(
                    "**Traces of its worst steps**, worst first: "
                    + ", ".join(f"[{t[:12]}]({link})" for t, link in traces)
                )
            elif traces:
                st.markdown(
                    "**Traces of its worst steps**, worst first: "
                    + ", ".join(f"`{t}`" for t, _ in traces)
                    + " (to link them, set trace_ui_url or telemetry dashboard --trace-ui-url)"
                )
            cap = f.get("capture")
            if cap:
                roles = cap.get("roles") or {}
                who = " against ".join(f"rank {r} ({roles.get(str(r), '?')})" for r in cap.get("ranks", []))
                steps = cap.get("steps") or ["?", "?"]
                st.markdown(
                    f"**Profiler capture** `{cap.get('dir')}`: {who}, steps {steps[0]}-{steps[1]} "
                    "(open a rank's trace in https://ui.perfetto.dev); where the flagged rank spends more per "
                    "step than the peer, by self time:"
                )
                if f.get("trace_diff"):
                    st.dataframe(pd.DataFrame(f["trace_diff"]).head(10), hide_index=True, width="stretch")
                else:
                    st.caption(
                        "no diff: "
                        + (
                            f"traces missing for ranks {cap['missing']}"
                            if cap.get("missing")
                            else "no op costs it more"
                        )
                    )
            rest = {k: v for k, v in f.items() if k not in KNOWN_FIELDS}
            if rest:
                st.code(json.dumps(rest, indent=1, default=str), language="json")


def step_title(view: S.RunView) -> str:
    """The step axis's title: a live job from Prometheus has a point per window, at its last step."""
    return "step (the job's last at each window's end)" if view.run.kind == "prometheus" else "step"

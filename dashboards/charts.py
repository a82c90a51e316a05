"""Chart builders for the Streamlit app (Altair, which Streamlit ships): axis titles with units, a
sequential colour-blind-safe scale (viridis) for heatmaps, categorical colours from a
colour-blind-safe scheme."""

from __future__ import annotations

import altair as alt
import pandas as pd

CATEGORICAL = "tableau10"
SEQUENTIAL = "viridis"


def step_percentiles(df: pd.DataFrame) -> alt.Chart:
    """p50 and p95 over steps; the y scale stops a little above the 99th percentile of the values,
    so that a few warm-up or checkpoint steps do not flatten the rest (they are clipped, and the
    tooltip still gives their value)."""
    top = float(df["ms"].quantile(0.99)) * 1.3 if len(df) else None
    return alt.Chart(df).mark_line(clip=True).encode(
        x=alt.X("step:Q", title="step"),
        y=alt.Y("ms:Q", title="ms per step (data wait included)",
                scale=alt.Scale(domain=[0, top]) if top else alt.Undefined),
        color=alt.Color("percentile:N", title="over ranks", scale=alt.Scale(scheme=CATEGORICAL)),
        tooltip=["step", "percentile", alt.Tooltip("ms:Q", format=".1f")],
    ).properties(height=260)


def goodput(df: pd.DataFrame) -> alt.Chart:
    return alt.Chart(df).mark_bar().encode(
        x=alt.X("share:Q", title="share of the run's step time", axis=alt.Axis(format="%")),
        y=alt.Y("part:N", title=None, sort="-x", axis=alt.Axis(labelOverlap=False)),
        tooltip=["part", alt.Tooltip("share:Q", format=".1%")],
    ).properties(height=28 * max(len(df), 1) + 20)


def heatmap(df: pd.DataFrame, what: str, marked: dict[int, str]) -> alt.Chart:
    """Rank x step cells coloured by ms; ranks a finding names get a label on the left."""
    base = alt.Chart(df).mark_rect().encode(
        x=alt.X("step:O", title="step (first step of each block)", axis=alt.Axis(labelOverlap=True)),
        y=alt.Y("rank:O", title="rank"),
        color=alt.Color("ms:Q", title=f"{what} (ms per step)", scale=alt.Scale(scheme=SEQUENTIAL)),
        tooltip=["rank", "step", alt.Tooltip("ms:Q", format=".2f")],
    )
    if not marked:
        return base.properties(height=min(600, 18 * df["rank"].nunique() + 40))
    labels = pd.DataFrame({"rank": list(marked), "label": [f"<- {k}" for k in marked.values()]})
    marks = alt.Chart(labels).mark_text(align="left", dx=4, color="#d62728").encode(
        y=alt.Y("rank:O"), text="label:N")
    return alt.hconcat(base.properties(height=min(600, 18 * df["rank"].nunique() + 40)),
                       marks.properties(width=160)).resolve_scale(y="shared")

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
    """Rank x step cells coloured by ms, as wide as the page; ranks a finding names carry it in
    their axis label. The colour scale spans the 1st to 99th percentile of the cells (clamped), so
    warm-up steps do not wash out a slow rank."""
    df = df.assign(label=[f"{r}  <- {marked[r]}" if r in marked else str(r) for r in df["rank"]])
    order = [f"{r}  <- {marked[r]}" if r in marked else str(r) for r in sorted(df["rank"].unique())]
    lo, hi = (float(df["ms"].quantile(q)) for q in (0.01, 0.99)) if df["ms"].notna().any() else (0.0, 1.0)
    return alt.Chart(df).mark_rect().encode(
        x=alt.X("step:O", title="step (first step of each block)", axis=alt.Axis(labelOverlap=True)),
        y=alt.Y("label:O", title="rank", sort=order,
                axis=alt.Axis(labelOverlap=len(order) > 64, labelLimit=260)),  # every rank's label up to 64
        color=alt.Color("ms:Q", title=f"{what} (ms per step)",
                        scale=alt.Scale(scheme=SEQUENTIAL, domain=[lo, hi], clamp=True)),
        tooltip=["rank", "step", alt.Tooltip("ms:Q", format=".2f")],
    ).properties(width="container", height=min(640, 18 * len(order) + 40))

"""Chart builders for the Streamlit app (Altair, which Streamlit ships): axis titles with units, a
sequential colour-blind-safe scale (viridis) for heatmaps, categorical colours from a
colour-blind-safe scheme."""

from __future__ import annotations

from typing import cast

import altair as alt
import pandas as pd

from .grid import rank_bands

CATEGORICAL = "tableau10"
SEQUENTIAL = "viridis"


STEP_AXIS = alt.Axis(format="d", tickMinStep=1)  # steps are whole numbers: no 103.5 tick


def step_percentiles(df: pd.DataFrame, x_title: str = "step") -> alt.Chart:
    """p50 and p95 over steps, the y axis clipped as in :func:`_clipped_top`."""
    top = _clipped_top(df["ms"])
    return (
        alt.Chart(df)
        .mark_line(clip=True)
        .encode(
            x=alt.X("step:Q", title=x_title, axis=STEP_AXIS),
            y=alt.Y(
                "ms:Q",
                title="ms per step (data wait included)",
                scale=alt.Scale(domain=[0, top]) if top else alt.Undefined,
            ),
            color=alt.Color("percentile:N", title="over ranks", scale=alt.Scale(scheme=CATEGORICAL)),
            tooltip=["step", "percentile", alt.Tooltip("ms:Q", format=".1f")],
        )
        .properties(height=260)
    )


def goodput(df: pd.DataFrame) -> alt.Chart:
    return (
        alt.Chart(df)
        .mark_bar()
        .encode(
            x=alt.X("share:Q", title="share of the run's step time", axis=alt.Axis(format="%")),
            y=alt.Y("part:N", title=None, sort="-x", axis=alt.Axis(labelOverlap=False)),
            tooltip=["part", alt.Tooltip("share:Q", format=".1%")],
        )
        .properties(height=28 * max(len(df), 1) + 20)
    )


MAX_BARS = 64  # a bar chart of ranks draws at most this many (the highest), beside a table of every rank


def heatmap(df: pd.DataFrame, title: str, marked: dict[int, str], value: str = "ms") -> alt.Chart:
    """Rank x step cells coloured by ``value`` (its legend titled ``title``, with the unit), as wide as
    the page; ranks a finding names carry it in their axis label. The colour scale spans the 1st to
    99th percentile of the cells (clamped), so warm-up steps do not wash out a slow rank."""
    if "last_rank" in df.columns:  # bands of ranks (grid_cells): each labelled by its ranks and theirs marked
        bands, height = rank_bands(df)
        names = {}
        for first, last in bands:
            inside = ", ".join(f"{r} {k}" for r, k in sorted(marked.items()) if first <= r <= last)
            names[first] = f"{first}-{last}" + (f"  <- {inside}" if inside else "")
        df = df.assign(label=df["rank"].map(names))
        order = [names[first] for first, _ in bands]
        rank_title = f"ranks (bands of {height}: the highest)"
    else:
        df = df.assign(label=[f"{r}  <- {marked[r]}" if r in marked else str(r) for r in df["rank"]])
        order = [f"{r}  <- {marked[r]}" if r in marked else str(r) for r in sorted(df["rank"].unique())]
        rank_title = "rank"
    lo, hi = (float(df[value].quantile(q)) for q in (0.01, 0.99)) if df[value].notna().any() else (0.0, 1.0)
    # the rows in rank order and the y axis in the order they come (sort=None): a sort by a list of labels
    # is an expression evaluated for every cell, slow over tens of thousands of cells in Streamlit's Vega
    # (its CSP-safe interpreter, not compiled code: bench/RESULTS.md, "Dashboard in headless Chromium")
    df = cast(
        pd.DataFrame, df.sort_values(["rank", "step"], kind="stable")[["step", "label", value]]
    )  # what it draws: no more sent
    return (
        alt.Chart(df)
        .mark_rect()
        .encode(
            x=alt.X("step:O", title="step (first step of each block)", axis=alt.Axis(labelOverlap=True)),
            y=alt.Y(
                "label:O", title=rank_title, sort=None, axis=alt.Axis(labelOverlap=len(order) > 64, labelLimit=260)
            ),  # every rank's label up to 64
            color=alt.Color(
                f"{value}:Q",
                title=title,
                scale=alt.Scale(scheme=SEQUENTIAL, domain=[lo, hi if hi > lo else lo + 1e-9], clamp=True),
            ),
            tooltip=[
                alt.Tooltip("label:N", title="rank" if rank_title == "rank" else "ranks"),
                "step",
                alt.Tooltip(f"{value}:Q", format=".2f", title=title),
            ],
        )
        .properties(width="container", height=_band_height(len(order), 18, 110))
    )


def _band_height(rows: int, per_row: int, axes: int) -> int:
    """A chart's height for ``rows`` bands: Streamlit fits the axes and titles inside the height,
    so they are added to the rows' own height (capped; beyond it the labels thin out)."""
    return min(720, per_row * rows + axes)


def _clipped_top(values: pd.Series) -> float | None:
    """A y-axis top a little above the 99th percentile, so a few warm-up steps do not flatten the
    rest (they are clipped; the tooltip still gives their value)."""
    top = float(values.quantile(0.99)) * 1.3 if len(values) and values.notna().any() else None
    return top if top and top > 0 else None


def lines(df: pd.DataFrame, y_title: str, color: str, color_title: str, x_title: str = "step") -> alt.Chart:
    """One line per ``color`` value over ``step`` (long format with a ``value`` column), the y axis
    clipped a little above the 99th percentile."""
    top = _clipped_top(df["value"])
    return (
        alt.Chart(df)
        .mark_line(point=len(df) <= 60, clip=True)
        .encode(
            x=alt.X("step:Q", title=x_title, axis=STEP_AXIS),
            y=alt.Y("value:Q", title=y_title, scale=alt.Scale(domain=[0, top]) if top else alt.Undefined),
            color=alt.Color(f"{color}:N", title=color_title, scale=alt.Scale(scheme=CATEGORICAL)),
            tooltip=["step", color, alt.Tooltip("value:Q", format=".3g", title=y_title)],
        )
        .properties(height=240)
    )


def rank_bars(df: pd.DataFrame, value: str, title: str, marked: dict[int, str], most: int = MAX_BARS) -> alt.Chart:
    """A value per rank as horizontal bars (ranks a finding names labelled), in rank order. Of more than
    ``most`` ranks, the ``most`` highest and the ranks a finding names (the title says so; the table
    beside it holds every rank): 10,000 bars of a fraction of a pixel each were never drawn."""
    if len(df) > most:
        top = df.nlargest(most, value)
        title = f"{title}: the {most} highest of {len(df):,} ranks" + (
            ", and the ranks findings name" if marked else ""
        )
        df = pd.concat([top, cast(pd.DataFrame, df[df["rank"].isin(list(marked))])]).drop_duplicates("rank")
    df = df.sort_values("rank", kind="stable")  # the y axis in the order the rows come (sort=None: see heatmap)
    df = df.assign(label=[f"{r}  <- {marked[r]}" if r in marked else str(r) for r in df["rank"]])
    order = list(dict.fromkeys(df["label"]))
    return (
        alt.Chart(df)
        .mark_bar()
        .encode(
            x=alt.X(f"{value}:Q", title=title),
            y=alt.Y("label:O", title="rank", sort=None, axis=alt.Axis(labelOverlap=len(order) > 64, labelLimit=260)),
            tooltip=["rank", alt.Tooltip(f"{value}:Q", format=".3g", title=title)],
        )
        .properties(height=_band_height(len(order), 16, 70))
    )


def by_size(df: pd.DataFrame, value: str, title: str) -> alt.Chart:
    """A measure by message size bucket, one line per op (log-scaled sizes)."""
    return (
        alt.Chart(df)
        .mark_line(point=True)
        .encode(
            x=alt.X(
                "bucket_bytes:Q",
                title="message size (bytes, bucket start; log scale)",
                scale=alt.Scale(type="log"),
                axis=alt.Axis(format="~s"),
            ),
            y=alt.Y(f"{value}:Q", title=title),
            color=alt.Color("op:N", title="op", scale=alt.Scale(scheme=CATEGORICAL)),
            tooltip=["op", "size", "calls", alt.Tooltip(f"{value}:Q", format=".3g", title=title)],
        )
        .properties(height=240)
    )


def compare_bars(df: pd.DataFrame) -> alt.Chart:
    """Base against new, ms per step, per series (the diff's series)."""
    long = df.rename(columns={"base ms": "base", "new ms": "new"}).melt(
        "series", value_vars=["base", "new"], var_name="run", value_name="ms"
    )
    return (
        alt.Chart(long)
        .mark_bar()
        .encode(
            y=alt.Y("series:N", title=None, sort=list(df["series"])),
            yOffset=alt.YOffset("run:N", sort=["base", "new"]),
            x=alt.X("ms:Q", title="ms per step (median over ranks and steps)"),
            color=alt.Color("run:N", title="run", scale=alt.Scale(scheme=CATEGORICAL), sort=["base", "new"]),
            tooltip=["series", "run", alt.Tooltip("ms:Q", format=".2f")],
        )
        .properties(height=36 * max(len(df), 1) + 30)
    )

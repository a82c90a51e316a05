"""The History view's tables (no Streamlit): many runs of the job in time order and the runs after which
something changed, as ``telemetry history`` finds them (telemetry/analysis/history/runs.py).

The source is ``telemetry dashboard RUN --history DIR_OR_RUN...`` (``TELEMETRY_DASHBOARD_HISTORY``: the
paths joined by ``os.pathsep``): each path a run directory or a folder of run directories. Each run's
summary is read from its ``summary.json`` when that is current, else made, and never written (the
dashboard writes nothing in a run; ``telemetry history`` writes them, and makes later loads fast).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import altair as alt
import pandas as pd

from telemetry.analysis.history.runs import KEY_METRICS, RATES, content_key, find_runs, history, run_summary

ENV = "TELEMETRY_DASHBOARD_HISTORY"


@dataclass(frozen=True)
class History:
    doc: dict[str, Any]  # history(): runs, groups, changes, params, notes
    skipped: list[str] = field(default_factory=list)  # "path: why" for each run that could not be read

    @property
    def paths(self) -> dict[str, str]:
        """Each run's name -> its directory (the first of a name)."""
        out: dict[str, str] = {}
        for r in self.doc["runs"]:
            if r.get("path"):
                out.setdefault(r["name"], r["path"])
        return out


def source_paths(value: str | None = None) -> list[str]:
    """The history source's paths (``value``, default the environment's), empty when none was given."""
    value = os.environ.get(ENV, "") if value is None else value
    return [p for p in value.split(os.pathsep) if p]


def cache_key(paths: list[str]) -> tuple:
    """What the source holds now (each run directory and its content key): changes when a run is added,
    removed or grows."""
    return tuple((r, content_key(r)) for r in find_runs(paths))


def load(paths: list[str], by: str | None = None) -> History:
    """Every run under ``paths``, summarized (unreadable runs skipped and said), and their history."""
    summaries, skipped = [], []
    for r in find_runs(paths):
        try:
            summaries.append({**run_summary(r, write=False), "path": r})
        except Exception as exc:  # noqa: BLE001 - one unreadable run must not hide the others: said
            skipped.append(f"{r}: {type(exc).__name__}: {exc}")
    return History(history(summaries, by=by), skipped)


def metrics(h: History) -> list[str]:
    """The series to chart: step time first, the other key metrics any run has, then every phase."""
    runs = h.doc["runs"]
    out = [m for m in KEY_METRICS if m == "step_time_s" or any(r["metrics"].get(m) is not None for r in runs)]
    for r in runs:
        out += [p for p in r["phases"] if p not in out]
    return out


def unit(metric: str) -> tuple[str, float]:
    """How a series is shown: seconds as ms, shares as %, rates as they are."""
    if metric.endswith("_s"):
        return "ms", 1e3
    if metric in ("mfu", "compute_share"):
        return "%", 100.0
    return "", 1.0


def tags_text(tags: dict[str, str] | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted((tags or {}).items()))


def trend(h: History) -> pd.DataFrame:
    """One row per run and series: n (1-based, time order), run, start (UTC, NaT where unknown), commit,
    tags (as text), metric, value (as stored: seconds, shares, tokens/s)."""
    rows = []
    for r in h.doc["runs"]:
        start = pd.to_datetime(r["start_time_s"], unit="s", utc=True) if r.get("start_time_s") else pd.NaT
        base = {
            "n": r["n"],
            "run": r["name"],
            "start": start,
            "commit": str(r.get("commit") or "-"),
            "tags": tags_text(r.get("tags")),
        }
        values = {**{m: r["metrics"].get(m) for m in KEY_METRICS}, **r["phases"]}
        for m, v in values.items():
            if v is not None:
                rows.append({**base, "metric": m, "value": float(v)})
    cols = ["n", "run", "start", "commit", "tags", "metric", "value"]
    return pd.DataFrame(rows, columns=cols)


def change_label(c: dict[str, Any]) -> str:
    what = "slower" if c["regression"] else "better"
    if c["metric"] in RATES:
        what = "worse" if c["regression"] else "better"
    return f"from run {c['n']} ({c['runs'][1]}): {c['metric']} {c['change']:+.1%} ({what}, p={c['p']:.4f})"


def first_shown(changes: list[dict[str, Any]]) -> int:
    """The change the view opens on: the largest regression (else the first change)."""
    worst = [(abs(c["change"]), -k) for k, c in enumerate(changes) if c["regression"]]
    return -max(worst)[1] if worst else 0


def changes_table(h: History) -> pd.DataFrame:
    """One row per change: the first run after it (its number and name), the run before, the series,
    its change and p, the levels either side, whether it is a regression, the commits either side."""
    rows = [
        {
            "from run": c["n"],
            "run after": c["runs"][1],
            "run before": c["runs"][0],
            "metric": c["metric"],
            "change": c["change"],
            "p": c["p"],
            "before": c["before"],
            "after": c["after"],
            "regression": c["regression"],
            "commit before": str(c["commits"][0] or "-"),
            "commit after": str(c["commits"][1] or "-"),
            "group": c["group"],
        }
        for c in h.doc["changes"]
    ]
    cols = ["from run", "run after", "run before", "metric", "change", "p", "before", "after", "regression"]
    return pd.DataFrame(rows, columns=cols + ["commit before", "commit after", "group"])


def diff_table(c: dict[str, Any]) -> pd.DataFrame:
    """What moved across the change: each series' median over the runs after against the runs before."""
    rows = (c.get("diff") or {}).get("series", [])
    return pd.DataFrame(rows, columns=["metric", "before", "after", "change"])


def trace_table(explained: dict[str, Any]) -> pd.DataFrame:
    """The captures compared (historydiff.explain): each op, kernel or collective the slower run spends
    more time in per step, the extra first."""
    rows = [
        {
            "kind": r["kind"],
            "name": r["name"],
            "slower ms/step": r["flagged_ms_per_step"],
            "faster ms/step": r["peer_ms_per_step"],
            "extra ms/step": r["flagged_ms_per_step"] - r["peer_ms_per_step"],
            "calls/step": r["flagged_count"],
        }
        for r in explained.get("trace_diff") or []
    ]
    cols = ["kind", "name", "slower ms/step", "faster ms/step", "extra ms/step", "calls/step"]
    return pd.DataFrame(rows, columns=cols)


def pair(h: History, c: dict[str, Any]) -> tuple[str, str] | None:
    """The directories of the runs either side of the change (before, after); None when either is unknown."""
    before, after = c.get("paths") or (h.paths.get(n) for n in c["runs"])
    return (before, after) if before and after else None


def compare_command(h: History, c: dict[str, Any]) -> str:
    """The command that opens the Compare view on the runs either side of the change."""
    before, after = pair(h, c) or c["runs"]
    return f"telemetry dashboard {after} --base {before}"


def chart(df: pd.DataFrame, metric: str, changes: list[dict[str, Any]], x: str = "n") -> alt.LayerChart:
    """``metric`` over the runs (x: ``n``, the run number, or ``start``), a point per run with its name,
    commit and tags; a rule at the first run after each change (red: a change of this series, grey: of
    another one)."""
    name, scale = unit(metric)
    d = df[df["metric"] == metric].copy()
    if x == "start":
        d = d[d["start"].notna()]
    d["shown"] = d["value"] * scale
    title = f"{metric} ({name})" if name else metric
    xenc = (
        alt.X("n:Q", title="run (time order)", axis=alt.Axis(tickMinStep=1))
        if x == "n"
        else alt.X("start:T", title="start (UTC)")
    )
    tips = [
        alt.Tooltip("n:Q", title="run"),
        alt.Tooltip("run:N", title="name"),
        alt.Tooltip("start:T", title="start (UTC)", format="%Y-%m-%d %H:%M"),
        alt.Tooltip("commit:N"),
        alt.Tooltip("tags:N"),
        alt.Tooltip("shown:Q", title=title, format=".4g"),
    ]
    base = alt.Chart(d).encode(x=xenc, y=alt.Y("shown:Q", title=title, scale=alt.Scale(zero=False)))
    layers: list[Any] = [base.mark_line(), base.mark_point(filled=True, size=50).encode(tooltip=tips)]
    starts = {r["n"]: r["start"] for r in d[["n", "start"]].to_dict("records")}
    marks = pd.DataFrame(
        [
            {
                "n": c["n"],
                "start": starts.get(c["n"], pd.NaT),
                "change": change_label(c),
                "this series": c["metric"] == metric,
            }
            for c in changes
        ],
        columns=["n", "start", "change", "this series"],
    )
    if x == "start":
        marks = marks[marks["start"].notna()]
    if len(marks):
        layers.append(
            alt.Chart(marks)
            .mark_rule(strokeDash=[4, 3], strokeWidth=2)
            .encode(
                x=alt.X("n:Q") if x == "n" else alt.X("start:T"),
                color=alt.condition("datum['this series']", alt.value("#d62728"), alt.value("#999999")),
                tooltip=[alt.Tooltip("change:N")],
            )
        )
    return alt.layer(*layers).properties(height=320)

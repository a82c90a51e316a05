"""What the dashboard shows, as plain tables: no Streamlit here, so every view's numbers are tested
on their own. The run is read by source.py (the library's one loader, analyzed by the library's
detectors); nothing here decides what is a finding.

>>> view = source.load_view("runs/exp1")                  # doctest: +SKIP
>>> step_percentiles(view.analysis.matrix).head()         # doctest: +SKIP
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, cast

import numpy as np
import pandas as pd

from telemetry.analysis.detectors import StragglerParams
from telemetry.config import ConfigError, check_trace_ui_url
from telemetry.steptable.matrix import StepMatrix, nanmedian, nanpercentile

from .grid import MAX_HEATMAP_COLUMNS, MAX_LINE_POINTS, _blocks, grid_cells, step_columns
from .source import RunView, ViewError


def rank_step_cells(
    view: RunView,
    values: Callable[[StepMatrix], np.ndarray],
    ranks: list[int] | None = None,
    steps: tuple[int, int] | None = None,
) -> pd.DataFrame:
    """A rank x step chart's cells (:func:`grid_cells`) of ``values(matrix)``: from the view's picture
    (bands of ranks, every step) when it has one and no ranks are chosen, else from its matrix. A series
    the picture does not hold is drawn from the matrix."""
    p = view.picture
    if p is not None and not ranks:
        try:
            return grid_cells(p.matrix, values(p.matrix), None, steps, last=p.last)
        except (KeyError, ViewError):
            pass
    return grid_cells(view.matrix, values(view.matrix), ranks, _within(steps, whole_blocks(view)))


def _within(steps: tuple[int, int] | None, whole: tuple[int, int] | None) -> tuple[int, int] | None:
    """``steps`` (None: all) narrowed to ``whole`` (None: no narrowing); ``steps`` when they do not meet."""
    if whole is None:
        return steps
    if steps is None:
        return whole
    a, b = max(steps[0], whole[0]), min(steps[1], whole[1])
    return (a, b) if a <= b else steps


def trace_ui_url(view: RunView) -> str:
    """The URL of one trace in a trace UI (``{trace_id}`` in it): ``telemetry dashboard --trace-ui-url``,
    else the run's own ``trace_ui_url`` setting; "" when neither is set (or the run's is not one)."""
    url = os.environ.get("TELEMETRY_DASHBOARD_TRACE_UI_URL", "")
    if not url:
        url = (view.run.meta.get("config") or {}).get("trace_ui_url") or ""
    try:
        return check_trace_ui_url("trace_ui_url", url)
    except ConfigError:
        return ""


def trace_links(card: dict[str, Any], url: str) -> list[tuple[str, str]]:
    """A finding's traces as (trace id, link; "" without a trace UI URL), worst step first."""
    ids = [t for t in card.get("trace_ids") or [] if isinstance(t, str) and t.isalnum()]
    return [(t, url.replace("{trace_id}", t) if url else "") for t in ids]


def view_percentiles(view: RunView) -> pd.DataFrame:
    """:func:`step_percentiles` of the view: of its picture's steps (over every rank, as kept) when it
    has one."""
    p = view.picture
    if p is None:
        return step_percentiles(view.matrix, steps=whole_blocks(view))
    return _percentile_lines(p.matrix.steps, p.p50 * 1e3, p.p95 * 1e3, MAX_LINE_POINTS)


def whole_blocks(view: RunView) -> tuple[int, int] | None:
    """For a run drawn from its blocks of steps: the steps of its blocks that hold every one of their
    steps (the run's first and last blocks may hold fewer: of 10,000 steps, the last block holds 16 of
    64), which its heatmaps and lines draw. A band's highest, or a 95th percentile over ranks, of a few
    steps' medians reads higher than of 64 steps' (medians of fewer steps spread wider), so a short last
    block would read as slow steps. None: every step (a run read row by row, or no whole block)."""
    b = view.blocks
    if b is None:
        return None
    first, last = -(-b.first // b.steps) * b.steps, (b.last + 1) // b.steps * b.steps - 1
    return (first, last) if last > first else None


def partial_blocks(view: RunView) -> str:
    """The steps :func:`whole_blocks` leaves out of the view's pictures, said in a clause ("" when none)."""
    whole, b = whole_blocks(view), view.blocks
    if whole is None or b is None:
        return ""
    out = [
        f"{a:,}-{z:,}" if z > a else f"{a:,}" for a, z in ((b.first, whole[0] - 1), (whole[1] + 1, b.last)) if z >= a
    ]
    if not out:
        return ""
    return (
        f"; steps {' and '.join(out)} (a block short of {b.steps} steps) are left out of its heatmaps and lines, "
        "whose medians of fewer steps would read higher"
    )


def step_percentiles(
    m: StepMatrix, max_points: int = MAX_LINE_POINTS, steps: tuple[int, int] | None = None
) -> pd.DataFrame:
    """Per step, over ranks: p50 and p95 of the step time (data wait included), in ms; long format
    (``step``, ``percentile``, ``ms``): one line per percentile, not per rank. Beyond ``max_points``
    steps, each point is a block of consecutive steps (labelled by its first): the block's median
    p50 and its highest p95, so a slow step still shows. ``steps``: only those (all when None)."""
    t, step_ids = m.duration + m.data, m.steps
    cols = step_columns(m, steps)
    if not cols.all():
        t, step_ids = t[:, cols], step_ids[cols]
    with np.errstate(all="ignore"):
        if np.isnan(t).any():
            p50, p95 = nanpercentile(t, [50, 95], axis=0) * 1e3
        else:
            p50, p95 = np.percentile(t, [50, 95], axis=0) * 1e3
    return _percentile_lines(step_ids, p50, p95, max_points)


def _percentile_lines(steps: np.ndarray, p50: np.ndarray, p95: np.ndarray, max_points: int) -> pd.DataFrame:
    """Per step p50 and p95 (ms) as :func:`step_percentiles` gives them, blocks of steps beyond ``max_points``."""
    if len(steps) > max_points:
        width, nb = _blocks(len(steps), max_points)
        p50 = nanmedian(p50[: nb * width].reshape(nb, width), axis=1)
        with np.errstate(all="ignore"):
            p95 = np.nanmax(p95[: nb * width].reshape(nb, width), axis=1)
        steps = steps[: nb * width : width]
    wide = pd.DataFrame({"step": steps, "p50": p50, "p95": p95})
    return wide.melt("step", var_name="percentile", value_name="ms").dropna()


def goodput(summary: dict[str, Any]) -> pd.DataFrame:
    """The goodput split as (part, share) rows, largest first."""
    parts = summary.get("goodput") or {}
    return pd.DataFrame({"part": list(parts), "share": list(parts.values())}).sort_values("share", ascending=False)


def series(m: StepMatrix, what: str) -> np.ndarray:
    """(R, S) seconds: ``compute``, ``blocked`` (in collectives), ``data``, or a phase's compute."""
    if what == "compute":
        return m.compute
    if what == "blocked":
        if m.comm is None:
            raise ViewError("this run recorded no time in collectives")
        return m.comm
    if what == "data":
        return m.data
    if what in m.phase_compute:
        return m.phase_compute[what]
    raise ViewError(f"no series {what!r}; accepted: compute, blocked, data, " + ", ".join(m.phase_compute))


def heatmap(
    m: StepMatrix,
    what: str,
    ranks: list[int] | None = None,
    steps: tuple[int, int] | None = None,
    max_columns: int = MAX_HEATMAP_COLUMNS,
) -> pd.DataFrame:
    """A rank x step grid of ``what`` (see :func:`series`) in ms, long format (``rank``, ``step``,
    ``ms``); see :func:`grid_cells` for the downsampling."""
    return grid_cells(m, series(m, what) * 1e3, ranks, steps, max_columns).rename(columns={"value": "ms"})


def view_heatmap(
    view: RunView, what: str, ranks: list[int] | None = None, steps: tuple[int, int] | None = None
) -> pd.DataFrame:
    """:func:`heatmap` of the view: from its picture's bands of ranks, every step, when it has one
    (:func:`rank_step_cells`)."""
    return rank_step_cells(view, lambda m: series(m, what) * 1e3, ranks, steps).rename(columns={"value": "ms"})


def rank_summary(view: RunView) -> pd.DataFrame:
    """Per rank (after warm-up): median ms of in-step time, compute, blocked and data wait, and the
    findings that name it."""
    m = view.matrix
    live = slice(StragglerParams().warmup(m.n_steps), None)
    out = pd.DataFrame({"rank": m.ranks.astype(int)})
    if m.nodes is not None and len(set(m.nodes.tolist())) > 1:  # a slow node shows as its ranks together
        out["node"] = m.nodes
    out["in step ms"] = nanmedian(m.duration[:, live], axis=1) * 1e3
    out["compute ms"] = nanmedian(m.compute[:, live], axis=1) * 1e3
    if m.comm is not None:
        out["blocked ms"] = nanmedian(m.comm[:, live], axis=1) * 1e3
    out["data ms"] = nanmedian(m.data[:, live], axis=1) * 1e3
    named: dict[int, list[str]] = {}
    for f in view.analysis.findings:
        for r in f.ranks:
            named.setdefault(int(r), []).append(f.kind + (f" ({f.phase})" if f.phase else ""))
    out["findings"] = [", ".join(named.get(int(r), [])) for r in out["rank"]]
    return out


def marked_ranks(view: RunView) -> dict[int, str]:
    """Ranks a finding names (stragglers, lost or hung ranks, ...) -> the kinds, for marking."""
    out: dict[int, str] = {}
    for f in view.analysis.findings:
        for r in f.ranks:
            out[int(r)] = ", ".join(filter(None, [out.get(int(r)), f.kind]))
    return out


def finding_cards(view: RunView) -> list[dict[str, Any]]:
    """Every finding as a dict with every field (kinds and fields not known here included), ranked
    by cost: critical first, then the larger what-if."""
    return [f.to_dict() for f in view.analysis.findings]


@dataclass
class Focus:
    """What one finding rests on: the series it is about over its steps (with a margin either side),
    as heatmap cells and as lines (its ranks against the others' median)."""

    label: str  # the series with its unit, for axes
    note: str  # what the series is, in a sentence
    steps: tuple[int, int]
    cells: pd.DataFrame  # rank, step, value
    lines: pd.DataFrame  # step, who, value


def focus_series(m: StepMatrix, card: dict[str, Any]) -> tuple[np.ndarray, str, str]:
    """The (R, S) series a finding is about, in display units, its label and a note: a device signal the
    finding names (``details.series``), else its phase's compute, the data wait, the time blocked in
    collectives (slow communication), else the step time."""
    from . import devices

    details = card.get("details") or {}
    name, phase = details.get("series"), card.get("phase")
    if isinstance(name, str) and m.extra("dev." + name) is not None:
        return devices.grid(m, name), devices.label(name), "the device or host signal the finding names"
    if phase == "data":
        return m.data * 1e3, "data-loader wait (ms/step)", "time waiting for the next batch"
    if phase in m.phase_compute:
        return (
            m.phase_compute[phase] * 1e3,
            f"{phase} compute (ms/step)",
            f"phase {phase}'s time with the time blocked in collectives removed",
        )
    if card.get("kind") == "slow_comm" and m.comm is not None:
        return m.comm * 1e3, "in collectives (ms/step)", "time blocked in collectives"
    if card.get("kind") in ("straggler", "imbalance", "stage_imbalance"):
        # no one phase holds the excess: the rank's whole compute does (its step time equals its peers',
        # who wait for it)
        return m.compute * 1e3, "compute (ms/step)", "the rank's busy time, the time blocked in collectives removed"
    return (m.duration + m.data) * 1e3, "step time (ms)", "the step's wall time, data wait included"


def focus(view: RunView, card: dict[str, Any], max_lines: int = 8) -> Focus:
    """The finding's series over its steps, a tenth of its span (at least 5 steps) either side."""
    m = view.matrix
    a, label, note = focus_series(m, card)
    first = cast(int, card.get("first_step")) if card.get("first_step") is not None else int(m.steps[0])
    last = cast(int, card.get("last_step")) if card.get("last_step") is not None else int(m.steps[-1])
    pad = max(5, (last - first) // 10)
    steps = (max(int(m.steps[0]), first - pad), min(int(m.steps[-1]), last + pad))
    cols = step_columns(m, steps)
    named = [r for r in card.get("ranks") or [] if r in set(m.ranks.tolist())]
    is_named = np.isin(m.ranks, named)
    lines = {}
    with np.errstate(all="ignore"):
        for r in named[:max_lines]:
            lines[f"rank {r}"] = a[np.flatnonzero(m.ranks == r)[0], cols]
        others = a[~is_named][:, cols] if (~is_named).any() else a[:, cols]
        lines["median of the others" if named else "median over ranks"] = nanmedian(others, axis=0)
        if not named:
            lines["95th percentile over ranks"] = nanpercentile(others, 95, axis=0)
    wide = pd.DataFrame({"step": m.steps[cols], **lines})
    if len(wide) > MAX_LINE_POINTS:
        width, nb = _blocks(len(wide), MAX_LINE_POINTS)
        wide = (
            wide.iloc[: nb * width]
            .groupby(np.arange(nb * width) // width)
            .agg({"step": "first", **{k: "median" for k in lines}})
        )
    long = wide.melt("step", var_name="who", value_name="value").dropna()
    return Focus(label, note, steps, grid_cells(m, a, None, _within(steps, whole_blocks(view))), long)


def compare(base: RunView, new: RunView) -> dict[str, Any]:
    """``telemetry diff``'s result for two runs (the library's diff, unchanged)."""
    from telemetry.analysis.detectors.diff import diff

    return diff(base.run.table, new.run.table)


def compare_series(doc: dict[str, Any]) -> pd.DataFrame:
    """The diff's per-series changes as rows: series, base ms, new ms, change, p, and whether the
    change is significant (p under its bound and at least the minimum effect)."""
    s = doc["summary"]
    rows = [
        (
            name,
            c["base_s"] * 1e3,
            c["new_s"] * 1e3,
            c["change"],
            c["p"],
            abs(c["change"]) >= s["min_effect"] and c["p"] < c["p_bound"],
        )
        for name, c in s["series"].items()
    ]
    return pd.DataFrame(rows, columns=["series", "base ms", "new ms", "change", "p", "significant"])

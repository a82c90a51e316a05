"""What the dashboard shows, as plain tables: no Streamlit here, so every view's numbers are tested
on their own. The run is opened by the library's one loader and analyzed by the library's detectors;
nothing here decides what is a finding.

>>> view = load_view("runs/exp1")                         # doctest: +SKIP
>>> step_percentiles(view.analysis.matrix).head()         # doctest: +SKIP
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from telemetry.analysis.detectors import Analysis, StragglerParams, analyze
from telemetry.analysis.detectors.matrix import StepMatrix, nanmedian
from telemetry.analysis.findings import compare_online
from telemetry.analysis.load import RunInput, open_input
from telemetry.analysis.table import TableError

MAX_HEATMAP_COLUMNS = 400  # steps are grouped into at most this many blocks (block medians)
MAX_LINE_POINTS = 2000  # steps per line chart, beyond which consecutive steps are grouped


class ViewError(ValueError):
    """The input cannot be shown; the message says why, for the page."""


@dataclass
class RunView:
    run: RunInput
    analysis: Analysis
    online: list[dict[str, Any]] = field(default_factory=list)

    @property
    def matrix(self) -> StepMatrix | None:
        return self.analysis.matrix


def load_view(path: str) -> RunView:
    """Open and analyze ``path`` (run directory or steps table); ViewError with a message otherwise."""
    if not path:
        raise ViewError("no run chosen: start the dashboard with a run directory or a steps table")
    if not os.path.exists(path):
        raise ViewError(f"{path} does not exist")
    try:
        run = open_input(path)
    except (TableError, OSError) as exc:
        raise ViewError(str(exc)) from None
    if not len(run.table):
        raise ViewError(f"{path} holds no steps yet")
    result = analyze(run.table, run.progress, run.world_size)
    online = compare_online(result.findings, run.online_findings) if run.online_findings else []
    return RunView(run, result, online)


def list_runs(root: str) -> list[str]:
    """The run directories directly under ``root``, newest first."""
    from telemetry.store import layout

    if not os.path.isdir(root):
        return []
    runs = [os.path.join(root, d) for d in os.listdir(root) if layout.is_run_dir(os.path.join(root, d))]
    return sorted(runs, key=os.path.getmtime, reverse=True)


def step_percentiles(m: StepMatrix, max_points: int = MAX_LINE_POINTS) -> pd.DataFrame:
    """Per step, over ranks: p50 and p95 of the step time (data wait included), in ms; long format
    (``step``, ``percentile``, ``ms``): one line per percentile, not per rank. Beyond ``max_points``
    steps, each point is a block of consecutive steps (labelled by its first): the block's median
    p50 and its highest p95, so a slow step still shows."""
    t = m.duration + m.data
    with np.errstate(all="ignore"):
        if np.isnan(t).any():
            p50, p95 = np.nanpercentile(t, [50, 95], axis=0) * 1e3
        else:
            p50, p95 = np.percentile(t, [50, 95], axis=0) * 1e3
    steps = m.steps
    if len(steps) > max_points:
        width, nb = _blocks(len(steps), max_points)
        p50 = nanmedian(p50[: nb * width].reshape(nb, width), axis=1)
        with np.errstate(all="ignore"):
            p95 = np.nanmax(p95[: nb * width].reshape(nb, width), axis=1)
        steps = steps[: nb * width: width]
    wide = pd.DataFrame({"step": steps, "p50": p50, "p95": p95})
    return wide.melt("step", var_name="percentile", value_name="ms").dropna()


def _blocks(n: int, at_most: int) -> tuple[int, int]:
    """(steps per block, whole blocks) that group ``n`` steps into at most ``at_most`` blocks; the
    last few steps that do not fill a block are left out of the picture."""
    width = -(-n // at_most)
    return width, n // width


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


def heatmap(m: StepMatrix, what: str, ranks: list[int] | None = None, steps: tuple[int, int] | None = None,
            max_columns: int = MAX_HEATMAP_COLUMNS) -> pd.DataFrame:
    """A rank x step grid of ``what`` in ms, long format (``rank``, ``step``, ``ms``). Beyond
    ``max_columns`` steps, consecutive steps are grouped and each cell is the block's median (labelled
    by the block's first step), so one slow rank still stands out at 10,000 steps."""
    a = series(m, what)
    cols = np.ones(m.n_steps, dtype=bool)
    if steps is not None:
        cols = (m.steps >= steps[0]) & (m.steps <= steps[1])
    rows = np.ones(m.n_ranks, dtype=bool) if ranks is None else np.isin(m.ranks, ranks)
    a, step_ids, rank_ids = a[rows][:, cols], m.steps[cols], m.ranks[rows]
    if a.shape[1] > max_columns:
        width, nb = _blocks(a.shape[1], max_columns)
        a = nanmedian(a[:, : nb * width].reshape(a.shape[0], nb, width), axis=2)
        step_ids = step_ids[: nb * width: width]
    grid = pd.DataFrame(a * 1e3, index=rank_ids, columns=step_ids)
    grid.index.name, grid.columns.name = "rank", "step"
    return grid.stack(future_stack=True).rename("ms").reset_index()


def rank_summary(view: RunView) -> pd.DataFrame:
    """Per rank (after warm-up): median ms of in-step time, compute, blocked and data wait, and the
    findings that name it."""
    m = view.matrix
    live = slice(StragglerParams().warmup(m.n_steps), None)
    out = pd.DataFrame({"rank": m.ranks.astype(int)})
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

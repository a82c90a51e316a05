"""What the dashboard shows, as plain tables: no Streamlit here, so every view's numbers are tested
on their own. The run is opened by the library's one loader and analyzed by the library's detectors;
nothing here decides what is a finding.

>>> view = load_view("runs/exp1")                         # doctest: +SKIP
>>> step_percentiles(view.analysis.matrix).head()         # doctest: +SKIP
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
import pandas as pd

from telemetry.analysis.captures import with_captures
from telemetry.analysis.detectors import Analysis, StragglerParams, analyze
from telemetry.analysis.detectors.matrix import StepMatrix, nanmedian, nanpercentile
from telemetry.analysis.findings import compare_online
from telemetry.analysis.load import RunInput, open_input
from telemetry.analysis.picture import Picture
from telemetry.analysis.table import TableError
from telemetry.analysis.tracelinks import with_trace_ids
from telemetry.config import ConfigError, check_trace_ui_url

from .grid import MAX_HEATMAP_COLUMNS, MAX_LINE_POINTS, _blocks, grid_cells, step_columns

ZOOM_ROWS = 2_000_000  # a long run's chosen steps x ranks of at most this many rows are read row by row
# of a long run, at most this many records are read with their spans and per-op columns (the Collectives
# view: about 13 us a record here, so about 3 s)
RECORD_ROWS = 200_000
LIVE_REFRESH_S = 5.0  # a run directory still being written is checked for new steps this often (at least)
PROMETHEUS_REFRESH_S = 15.0  # a Prometheus job is queried again this often


class ViewError(ValueError):
    """The input cannot be shown; the message says why, for the page."""


@dataclass(frozen=True)
class Blocks:
    """A long run drawn from its blocks of steps (the run store's coarse level: the table's rows are
    blocks, numbered by their first step; telemetry.analysis.coarse)."""

    path: str
    steps: int  # steps per block
    first: int  # the run's first and last step
    last: int
    ranks: int
    note: str  # how it was analyzed (telemetry analyze's line)
    kept: bool = False  # its analysis read from what telemetry compact kept (analysis/runsummary.py)


@dataclass
class RunView:
    run: RunInput
    analysis: Analysis
    online: list[dict[str, Any]] = field(default_factory=list)
    blocks: Blocks | None = None  # set when the run is drawn from its blocks of steps
    zoomed_from: Blocks | None = None  # set when these are some steps of such a run, read row by row
    # set when some steps of every rank of such a run are drawn from its kept picture (load_picture)
    picture: Picture | None = None

    @property
    def matrix(self) -> StepMatrix | None:
        return self.analysis.matrix


def changed_at(path: str) -> float:
    """The newest change in ``path``: its files' and its directories' (a file removed or renamed
    changes its directory's), so a run changed in any way is read again; 0 when it is gone."""
    try:
        if not os.path.isdir(path):
            return os.path.getmtime(path)
        return max(os.path.getmtime(os.path.join(d, f)) for d, ds, fs in os.walk(path) for f in [".", *fs])
    except (OSError, ValueError):
        return 0.0


# runs read before anyone asked (load_ahead): path -> its read, whose result is (changed_at then, the view or its error)
_AHEAD: dict[str, Future] = {}
_AHEAD_LOCK = threading.Lock()


def load_ahead(path: str) -> Future:
    """Load and analyze ``path`` in a thread of its own, for the first :func:`load_view` of it: the
    dashboard's server starts it before it serves, so the first visitor finds the run read (or being
    read) instead of starting the read. Taken once; a run changed meanwhile is read again. Returns
    the read, done once it is (its result is for :func:`load_view`)."""
    done: Future = Future()

    def read() -> None:
        seen = changed_at(path)
        try:
            got: RunView | Exception = load_view(path)
        except Exception as exc:  # noqa: BLE001 - handed to the visitor's load_view: said there, or read again
            got = exc
        done.set_result((seen, got))

    with _AHEAD_LOCK:
        _AHEAD[path] = done
    threading.Thread(target=read, name="telemetry-dashboard-load-ahead", daemon=True).start()
    return done


def _read_ahead(path: str, seen: float) -> RunView | None:
    """What :func:`load_ahead` read of ``path`` (waiting for it), when the run is as it was then
    (``seen``: its :func:`changed_at`); None when nothing was read ahead, or the run changed since."""
    with _AHEAD_LOCK:
        done = _AHEAD.pop(path, None)
    if done is None:
        return None
    was, got = done.result()
    if was != seen:
        return None
    if isinstance(got, ViewError):
        raise got
    return got if isinstance(got, RunView) else None  # another error: read again, where it is said


def load_view(path: str, seen: float | None = None) -> RunView:
    """Open and analyze ``path`` (run directory or steps table); ViewError with a message otherwise.
    ``seen``: the run's :func:`changed_at`, with which a view read ahead of time (:func:`load_ahead`)
    is used when the run is unchanged since."""
    if seen is not None and (ahead := _read_ahead(path, seen)) is not None:
        return ahead
    if not path:
        raise ViewError("no run chosen: start the dashboard with a run directory or a steps table")
    if not os.path.exists(path):
        raise ViewError(f"{path} does not exist")
    if os.path.isdir(path):
        long = _from_blocks(path)
        if long is not None:
            return long
    try:
        run = open_input(path)
    except (TableError, OSError) as exc:
        raise ViewError(str(exc)) from None
    if not len(run.table):
        raise ViewError(f"{path} holds no steps yet")
    return _analyzed(run)


def _from_blocks(path: str) -> RunView | None:
    """A run directory of more than ``coarse.COARSE_ROWS`` rows, as ``telemetry analyze`` reads it:
    its blocks' medians, analyzed from them (the ranked findings measured again on raw rows); the
    views draw the blocks. None for a shorter run (read row by row)."""
    from telemetry.analysis.runsummary import KEPT
    from telemetry.analysis.windows import coarse_analysis
    from telemetry.store.aggregates import BLOCK

    try:
        got = coarse_analysis(path)
    except (TableError, OSError) as exc:
        raise ViewError(str(exc)) from None
    if got is None:
        return None
    result, run, note, table = got
    s = result.summary
    view = _analyzed(replace(run, table=table, records=[]), result)  # records: read for a zoom (load_zoom)
    view.blocks = Blocks(path, BLOCK, s["first_step"], s["last_step"], int(table["rank"].nunique()), note, KEPT in note)
    return view


def zoom_rows(blocks: Blocks, steps: tuple[int, int], ranks: list[int]) -> int:
    """The rows steps ``steps`` of ``ranks`` (all when empty) hold in a run drawn from its blocks."""
    return (min(steps[1], blocks.last) - steps[0] + 1) * (len(ranks) or blocks.ranks)


def load_zoom(blocks: Blocks, steps: tuple[int, int], ranks: tuple[int, ...]) -> RunView:
    """Steps ``steps`` of a run drawn from its blocks, of ``ranks`` only (all when empty), read row by
    row (only those ranks' files, and only the segments that hold the steps, are opened) and analyzed
    as a run of those steps."""
    from telemetry.analysis.table import columns_to_table
    from telemetry.store.reader import LazyRecords
    from telemetry.store.segments import read_records, read_step_columns

    try:
        run = open_input(blocks.path, rows=False)
        said: list[str] = []
        got = read_step_columns(blocks.path, said, steps, ranks or None)
    except (TableError, OSError) as exc:
        raise ViewError(str(exc)) from None
    if got is None or not got.num_rows:
        raise ViewError(f"no step from {steps[0]} to {steps[1]} in {blocks.path}")
    # the records with spans of those steps and ranks only, read when a view asks (records_withheld)
    records = LazyRecords(lambda: read_records(blocks.path, [], steps, ranks or None))
    view = _analyzed(replace(run, table=columns_to_table(got), records=records, warnings=run.warnings + said))
    view.zoomed_from = blocks
    return view


def load_picture(view: RunView, steps: tuple[int, int]) -> RunView | None:
    """``view`` (a long run drawn from its blocks) with steps ``steps`` of every rank drawn from the
    run's picture kept by ``telemetry compact`` (telemetry.analysis.picture: per step, each band of ranks'
    highest, and the step time's percentiles over every rank): its rank x step charts and the step time's
    line draw every step of those; its findings, tables and other charts stay the whole run's, from its
    blocks. None when the run has no current picture (then the steps are read row by row)."""
    from telemetry.analysis import picture

    got = picture.read(view.blocks.path, steps) if view.blocks is not None else None
    return None if got is None else replace(view, picture=got)


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


def records_withheld(view: RunView) -> str | None:
    """Why the per-collective records (spans, per-op columns) of a long run are not read for this view
    (more than ``RECORD_ROWS`` rows chosen); None when they are read."""
    b = view.blocks or view.zoomed_from
    if b is None or (view.blocks is None and len(view.run.table) <= RECORD_ROWS):
        return None
    return (
        f"Latency, bytes and bandwidth by collective are read record by record, spans included: in a run of "
        f"{b.ranks:,} ranks x {b.last - b.first + 1:,} steps, for at most {RECORD_ROWS:,} records at once "
        f"(about {max(1, RECORD_ROWS // b.ranks):,} steps of every rank, or more steps of a few ranks): "
        "choose fewer steps or ranks in the sidebar. Below: the time blocked in collectives."
    )


def _analyzed(run: RunInput, result: Analysis | None = None) -> RunView:
    """``run`` with its analysis (``result``, or the library's default one) and what online detection
    said beside it."""
    if result is None:
        result = analyze(run.table, run.progress, run.world_size, ops=run.ops)
        result.findings = with_trace_ids(result.findings, run.meta, run.table)
        if os.path.isdir(run.source):
            last = int(run.table["step"].max()) if len(run.table) else None
            result.findings = with_captures(result.findings, run.source, run.warnings, last)
    online = compare_online(result.findings, run.online_findings) if run.online_findings else []
    return RunView(run, result, online)


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


def prometheus_jobs(url: str) -> list[str]:
    """The training jobs a Prometheus server holds; ViewError when it cannot be read."""
    from telemetry.analysis.prometheus import list_jobs

    try:
        return list_jobs(url)
    except TableError as exc:
        raise ViewError(str(exc)) from None


class Collecting(ViewError):
    """A live job with no window of steps yet: the message says what the page waits for."""


def load_prometheus(url: str, job: str | None, minutes: float | None) -> RunView:
    """The last ``minutes`` (None: the whole job, at most 24 h) of a live job from a Prometheus server's
    HTTP API, as a run (a column is a window of time: see telemetry.analysis.prometheus), analyzed as
    ``telemetry analyze --prometheus`` does (analysis.prometheus.live: collecting until there is enough)."""
    from telemetry.analysis.prometheus.live import analyze_live, collecting, open_live
    from telemetry.analysis.report import collecting_line

    try:
        run = open_live(url, job, last_s=minutes * 60.0 if minutes else None)
    except TableError as exc:
        raise ViewError(str(exc)) from None
    if not len(run.table):
        if minutes:
            raise ViewError(f"job {job!r} made no step in the last {minutes:.0f} min")
        raise Collecting(collecting_line(collecting(run)))
    return _analyzed(run, analyze_live(run))


def list_runs(root: str) -> list[str]:
    """The run directories directly under ``root``, newest first. Only those inside ``root``: an
    entry that is a link to a directory elsewhere is not offered (the page opens nothing outside
    the root). A run removed while this lists is left out."""
    from telemetry.store import layout

    try:
        names = os.listdir(root)
    except OSError:
        return []
    real_root = os.path.realpath(root)
    runs = []
    for name in names:
        path = os.path.join(root, name)
        if not inside(path, real_root) or not layout.is_run_dir(path):
            continue
        try:
            runs.append((os.path.getmtime(path), path))
        except OSError:
            continue
    return [path for _, path in sorted(runs, reverse=True)]


def links_out(root: str) -> list[str]:
    """The names under ``root`` that link to a directory outside it (not offered by :func:`list_runs`)."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    real_root = os.path.realpath(root)
    return sorted(
        n for n in names if os.path.isdir(os.path.join(root, n)) and not inside(os.path.join(root, n), real_root)
    )


def steps_asked(text: str | None, lo: int, hi: int) -> tuple[tuple[int, int] | None, str | None]:
    """A link's ``steps`` (``FIRST-LAST``, or one step) within the run's ``lo``-``hi``: (the range, None);
    (None, why) when it is not one; (None, None) when the link asks for none."""
    if not text:
        return None, None
    first, _, last = text.partition("-")
    try:
        a, b = int(first), int(last or first)
    except ValueError:
        return None, f"steps={text!r} is not FIRST-LAST (for example steps={lo}-{min(hi, lo + 199)})"
    if a > b or b < lo or a > hi:
        return None, f"steps={text!r} holds none of the run's steps ({lo}-{hi})"
    return (max(a, lo), min(b, hi)), None


def ranks_asked(text: str | None, ranks: list[int]) -> tuple[list[int], str | None]:
    """A link's ``ranks`` (comma-separated) among the run's ``ranks``: (those ranks, None); ([], why) when
    one is no rank of the run; ([], None) when the link asks for none."""
    if not text:
        return [], None
    try:
        asked = sorted({int(r) for r in text.split(",") if r.strip()})
    except ValueError:
        return [], f"ranks={text!r} is not a list of ranks (for example ranks=0,{ranks[-1]})"
    missing = sorted(set(asked) - set(ranks))
    if missing:
        return [], f"ranks={text!r} names ranks the run does not have ({', '.join(map(str, missing[:5]))})"
    return asked, None


def inside(path: str, real_root: str) -> bool:
    """Whether ``path``, links resolved, lies under the (already resolved) ``real_root``."""
    return os.path.commonpath([os.path.realpath(path), real_root]) == real_root


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
    first = card.get("first_step") if card.get("first_step") is not None else int(m.steps[0])
    last = card.get("last_step") if card.get("last_step") is not None else int(m.steps[-1])
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


LIVE_HEARTBEAT_S = 60.0  # a run whose newest heartbeat is older than this is not live (stopped or crashed)


@dataclass
class Liveness:
    live: bool
    last_step: int | None  # the highest step any rank completed
    last_step_s: float | None  # when it ended (epoch seconds)
    heartbeat_s: float | None  # the newest heartbeat (epoch seconds)
    finished: bool  # every rank's shutdown() ran


def liveness(run: RunInput, now: float) -> Liveness:
    """Whether a run is still being written: some rank has not finished and a heartbeat came within
    :data:`LIVE_HEARTBEAT_S`. A steps table (no heartbeats) is never live; the Prometheus source's
    heartbeats are the server's latest samples."""
    prog = list(run.progress.values())
    if not prog:
        return Liveness(False, None, None, None, False)
    beats = [p.get("time_s") for p in prog if p.get("time_s")]
    ends = [(p.get("last_step"), p.get("last_step_end_s")) for p in prog if p.get("last_step") is not None]
    finished = all(p.get("finished") for p in prog)
    beat = max(beats) if beats else None
    last, at = max(ends, key=lambda e: (e[0], e[1] or 0)) if ends else (None, None)
    live = not finished and beat is not None and now - beat <= LIVE_HEARTBEAT_S
    return Liveness(live, last, at, beat, finished)

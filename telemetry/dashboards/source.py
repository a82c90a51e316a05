"""The run a page shows, read: a run directory or a steps table (load_view; read ahead by the
server, load_ahead), a long run drawn from its blocks (Blocks), its steps read row by row (load_zoom) or
drawn from its kept picture (load_picture), a live job from Prometheus (load_prometheus), the runs under
a root, and what a link asks for. No Streamlit here; what the views draw from it is in data.py.

>>> view = load_view("runs/exp1")                         # doctest: +SKIP
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any, cast

from telemetry.analysis import AnalysisOptions, analyze_run
from telemetry.analysis.detectors import Analysis
from telemetry.analysis.findings import compare_online
from telemetry.analysis.inputs.load import RunInput, open_input
from telemetry.analysis.longrun.kept_picture import Picture
from telemetry.steptable.matrix import StepMatrix
from telemetry.steptable.table import TableError

ZOOM_ROWS = 2_000_000  # a long run's chosen steps x ranks of at most this many rows are read row by row
# a long run's steps of every rank, at most this many, are drawn from its kept picture (load_picture); the
# read grows with the steps (bench/RESULTS.md, "Dashboard at 10^8 records")
PICTURE_STEPS = 4_096
# of a long run, at most this many records are read with their spans and per-op columns (the Collectives
# view: its read grows with the records)
RECORD_ROWS = 200_000
LIVE_REFRESH_S = 5.0  # a run directory still being written is checked for new steps this often (at least)
PROMETHEUS_REFRESH_S = 15.0  # a Prometheus job is queried again this often


OPTIONS_ENV = "TELEMETRY_DASHBOARD_OPTIONS"  # the page's analysis options, JSON (telemetry dashboard's flags)


def options(environ: dict[str, str] | None = None) -> AnalysisOptions:
    """The options every analysis the page shows runs with: ``telemetry dashboard``'s flags (``--busy-bound``,
    ``--hang-after``, ...: :data:`OPTIONS_ENV`), over the settings of the environment the job's own runs read
    (``TELEMETRY_BUSY_BOUND``, ``TELEMETRY_BUSY_WARN_BOUND``), over the defaults. ViewError for a bad one."""
    import json

    from telemetry.config import ENV_PREFIX, Config, ConfigError

    env = os.environ if environ is None else environ
    names = [f for f in ("busy_bound", "busy_warn_bound") if ENV_PREFIX + f.upper() in env]
    try:
        given = {}
        if names:
            cfg = Config.resolve({}, {ENV_PREFIX + f.upper(): env[ENV_PREFIX + f.upper()] for f in names})
            given = {f: getattr(cfg, f) for f in names}
        given.update(json.loads(env.get(OPTIONS_ENV) or "{}"))
        return AnalysisOptions(**given)
    except (ConfigError, ValueError, TypeError) as exc:
        raise ViewError(f"the analysis options: {exc}") from None


class ViewError(ValueError):
    """The input cannot be shown; the message says why, for the page."""


@dataclass(frozen=True)
class Blocks:
    """A long run drawn from its blocks of steps (the run store's coarse level: the table's rows are
    blocks, numbered by their first step; telemetry.analysis.longrun.coarse)."""

    path: str
    steps: int  # steps per block
    first: int  # the run's first and last step
    last: int
    ranks: int
    note: str  # how it was analyzed (telemetry analyze's line)
    kept: bool = False  # its analysis read from what telemetry compact kept (analysis/longrun/kept.py)


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
    def matrix(self) -> StepMatrix:
        # a view has steps: a run with none is a ViewError (load_view, load_zoom, load_prometheus)
        return cast(StepMatrix, self.analysis.matrix)


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
    try:
        result = analyze_run(path, options())  # as telemetry analyze reads it: a long run from its blocks
    except (TableError, OSError) as exc:
        raise ViewError(str(exc)) from None
    if result.blocks is not None:
        return _from_blocks(path, result)
    if not len(result.input.table):
        raise ViewError(f"{path} holds no steps yet")
    return _analyzed(result.input, result)


def _from_blocks(path: str, result: Analysis) -> RunView:
    """A run directory of more than ``coarse.COARSE_ROWS`` rows as ``analyze_run`` read it: its blocks'
    medians, analyzed from them (the ranked findings measured again on raw rows); the views draw the
    blocks."""
    from telemetry.analysis.longrun.kept import KEPT
    from telemetry.store.aggregates import BLOCK

    assert result.blocks is not None
    table, note, s = result.blocks, result.note or "", result.summary
    view = _analyzed(replace(result.input, table=table, records=[]), result)  # records: read for a zoom (load_zoom)
    view.blocks = Blocks(path, BLOCK, s["first_step"], s["last_step"], int(table["rank"].nunique()), note, KEPT in note)
    return view


def zoom_rows(blocks: Blocks, steps: tuple[int, int], ranks: list[int]) -> int:
    """The rows steps ``steps`` of ``ranks`` (all when empty) hold in a run drawn from its blocks."""
    return (min(steps[1], blocks.last) - steps[0] + 1) * (len(ranks) or blocks.ranks)


def load_zoom(blocks: Blocks, steps: tuple[int, int], ranks: tuple[int, ...]) -> RunView:
    """Steps ``steps`` of a run drawn from its blocks, of ``ranks`` only (all when empty), read row by
    row (only those ranks' files, and only the segments that hold the steps, are opened) and analyzed
    as a run of those steps."""
    from telemetry.steptable.table import columns_to_table
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
    run's picture kept by ``telemetry compact`` (telemetry.analysis.longrun.kept_picture: per step, each band of ranks'
    highest, and the step time's percentiles over every rank): its rank x step charts and the step time's
    line draw every step of those; its findings, tables and other charts stay the whole run's, from its
    blocks. None when the run has no current picture (then the steps are read row by row)."""
    from telemetry.analysis.longrun.kept_picture import read_kept

    got = read_kept(view.blocks.path, steps) if view.blocks is not None else None
    return None if got is None else replace(view, picture=got)


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
        result = analyze_run(run, options())
    online = compare_online(result.findings, run.online_findings) if run.online_findings else []
    return RunView(run, result, online)


def prometheus_jobs(url: str) -> list[str]:
    """The training jobs a Prometheus server holds; ViewError when it cannot be read."""
    from telemetry.analysis.inputs.prometheus import list_jobs

    try:
        return list_jobs(url)
    except TableError as exc:
        raise ViewError(str(exc)) from None


class Collecting(ViewError):
    """A live job with no window of steps yet: the message says what the page waits for."""


def load_prometheus(url: str, job: str | None, minutes: float | None) -> RunView:
    """The last ``minutes`` (None: the whole job, at most 24 h) of a live job from a Prometheus server's
    HTTP API, as a run (a column is a window of time: see telemetry.analysis.inputs.prometheus), analyzed as
    ``telemetry analyze --prometheus`` does (analysis.prometheus.live: collecting until there is enough)."""
    from telemetry.analysis import PrometheusSource
    from telemetry.analysis.inputs.prometheus.live import collecting
    from telemetry.analysis.report import collecting_line

    try:
        result = analyze_run(PrometheusSource(url, job, minutes * 60.0 if minutes else None), options())
    except TableError as exc:
        raise ViewError(str(exc)) from None
    run = result.input
    if not len(run.table):
        if minutes:
            raise ViewError(f"job {job!r} made no step in the last {minutes:.0f} min")
        raise Collecting(collecting_line(cast("dict[str, Any]", collecting(run))))  # no steps: still collecting
    return _analyzed(run, result)


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
    beats = cast("list[float]", [p.get("time_s") for p in prog if p.get("time_s")])
    ends = [(p.get("last_step"), p.get("last_step_end_s")) for p in prog if p.get("last_step") is not None]
    finished = all(p.get("finished") for p in prog)
    beat = max(beats) if beats else None
    last, at = max(ends, key=lambda e: (e[0], e[1] or 0)) if ends else (None, None)
    live = not finished and beat is not None and now - beat <= LIVE_HEARTBEAT_S
    return Liveness(live, last, at, beat, finished)

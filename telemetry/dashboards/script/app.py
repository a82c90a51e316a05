"""The Streamlit app behind ``telemetry dashboard``: picks the run and the view, loads and analyzes
the run once (cached), and calls the view (views/).

Read-only: it opens the run named by ``TELEMETRY_DASHBOARD_PATH`` (``telemetry dashboard PATH`` sets
it), or one chosen among the run directories under ``TELEMETRY_DASHBOARD_ROOT``, or a live job on the
Prometheus server at ``TELEMETRY_DASHBOARD_PROMETHEUS`` (``--prometheus URL``, job
``TELEMETRY_DASHBOARD_JOB``), through the library's loaders; it shows the library's analysis and
writes nothing. ``TELEMETRY_DASHBOARD_HISTORY`` (``--history``) names runs of the job for the History
view; from a change there the page can compare the runs either side of it (those runs only). A run
that is missing, empty or unreadable is a message on the page. A run still being written, and a
Prometheus job, refresh by themselves; a finished run does not poll.
"""

from __future__ import annotations

import os
import time
from typing import Callable, cast

import streamlit as st

from telemetry.analysis.longrun.kept_picture import Picture, has_picture
from telemetry.dashboards import data, history, source, views

st.set_page_config(page_title="training-telemetry", layout="wide")

PROM_MINUTES = (0, 15, 30, 60, 180, 360, 1440)  # 0: the whole job (at most 24 h)


# cache_resource, not cache_data: the run (hundreds of MB for a large table) is shared as is, never
# pickled into the cache and out again on every rerun. Nothing downstream mutates it.
@st.cache_resource(show_spinner="Loading and analyzing the run...", max_entries=3)
def _load(path: str, mtime: float) -> source.RunView:  # mtime: a run still being written is read again
    return source.load_view(path, mtime)


@st.cache_resource(show_spinner="Reading the chosen steps row by row...", max_entries=4)
def _load_zoom(blocks: source.Blocks, mtime: float, steps: tuple[int, int], ranks: tuple[int, ...]) -> source.RunView:
    return source.load_zoom(blocks, steps, ranks)


@st.cache_resource(show_spinner="Querying Prometheus and analyzing the job...", max_entries=4)
def _load_prometheus(url: str, job: str, minutes: int, tick: int) -> source.RunView:  # tick: one load per refresh
    return source.load_prometheus(url, job or None, minutes or None)


@st.cache_resource(show_spinner="Reading the chosen steps from the run's picture...", max_entries=4)
def _load_picture(key: tuple, _view: source.RunView, steps: tuple[int, int]) -> source.RunView | None:
    return source.load_picture(_view, steps)


@st.cache_resource(show_spinner=False, max_entries=4)
def _percentiles(key: tuple, _view: source.RunView):
    return data.view_percentiles(_view)


@st.cache_resource(show_spinner="Summarizing the runs of the history...", max_entries=2)
def _load_history(paths: tuple[str, ...], key: tuple) -> history.History:  # key: the runs' content
    return history.load(list(paths))


def _history() -> history.History | None:
    """The runs given with ``--history``, summarized (cached while their content is unchanged); None
    when none were given."""
    paths = history.source_paths()
    return _load_history(tuple(paths), history.cache_key(paths)) if paths else None


def _history_pair() -> tuple[str, str] | None:
    """(before, after): the runs either side of a change, chosen in the History view to compare; only
    runs of the history source (no other path can be opened from the page)."""
    pair = st.session_state.get(views.HISTORY_PAIR)
    if not pair:
        return None
    hist = _history()
    known = set(hist.paths.values()) if hist else set()
    if not all(p in known for p in pair):
        st.session_state.pop(views.HISTORY_PAIR, None)
        return None
    return tuple(pair)


def _runs(root: str) -> list[str]:
    return source.list_runs(root) if root else []


def _pick_run() -> tuple[str, str]:
    """The run to show, and the root its alternatives come from: the one given, else one chosen
    among the run directories under the root given (only those: no other path can be opened from
    the page)."""
    path = os.environ.get("TELEMETRY_DASHBOARD_PATH", "")
    root = os.environ.get("TELEMETRY_DASHBOARD_ROOT", "")
    pair = _history_pair()
    if pair:  # the History view's change: its run after, against its run before (_base)
        st.sidebar.caption(f"From the History view: {os.path.basename(pair[1])} against {os.path.basename(pair[0])}")
        st.sidebar.button("back to the run given", on_click=st.session_state.pop, args=(views.HISTORY_PAIR, None))
        return pair[1], root
    if path or not root:
        return path, ""
    runs = _runs(root)
    shown = st.session_state.get("shown_run")
    if shown and shown not in runs:
        st.warning(
            f"{shown} is no longer there (deleted or moved while the page was open)"
            + (f"; showing {os.path.basename(runs[0])}" if runs else "")
        )
    out = source.links_out(root)
    if out:
        st.sidebar.caption(
            f"Not offered: {', '.join(out)} (links to directories outside {root}; the page opens only runs inside it)"
        )
    if not runs:
        st.session_state.pop("shown_run", None)
        return "", root
    chosen = st.sidebar.selectbox("run", runs, format_func=os.path.basename)
    if chosen not in runs:  # Streamlit keeps a widget's value among its options; never open another path
        chosen = runs[0]
    st.session_state["shown_run"] = chosen
    return chosen, root


def _live_marker(live: source.Liveness, poll: Callable[[], bool], every_s: float) -> None:
    """A visible "live" marker that checks for new data every ``every_s`` and reruns the page when
    there is some; nothing polls for a finished run."""

    @st.fragment(run_every=every_s)
    def marker() -> None:
        if poll():
            st.rerun()
        last = (
            f"last step {live.last_step} at {views.clock(live.last_step_s)}"
            if live.last_step is not None
            else "no step completed yet"
        )
        st.markdown(f":green-badge[live] {last}; checked {views.clock(time.time())}, every {every_s:.0f} s")

    marker()


def _retry(every_s: float) -> None:
    """After a failed query of a live source (the server restarting, unreachable a while): the page
    is run again at the next refresh, as a live page is, so it recovers by itself. The refresh is
    counted from the failure (a query that timed out may have taken longer than a refresh)."""
    tick = int(time.time() // every_s)

    @st.fragment(run_every=every_s)
    def retry() -> None:
        if int(time.time() // every_s) != tick:
            st.rerun()

    retry()


def _view_key() -> str:
    """The view is a sidebar choice kept in the URL (?view=ranks), so a link opens the view it shows."""
    names = {k: v[0] for k, v in views.VIEWS.items()}
    if "view" not in st.session_state:  # the first run of a session starts where the URL says
        asked = st.query_params.get("view", "overview")
        st.session_state["view"] = asked if asked in names else "overview"
    key = cast(str, st.sidebar.radio("view", list(names), format_func=names.get, key="view"))  # one of them
    st.query_params["view"] = key
    return key


def _asked_in_url(lo: int, hi: int, ranks: list[int]) -> tuple[tuple[int, int], list[int]]:
    """The steps and ranks a link asks for (``?steps=5000-5199&ranks=9,10``), read on a session's first
    run (later, the sidebar holds them), within the run's steps ``lo``-``hi`` and among its ``ranks``;
    the whole run when the link asks for none. A value that is not one is said once and ignored."""
    if "asked" not in st.session_state:
        steps, bad = source.steps_asked(st.query_params.get("steps"), lo, hi)
        chosen, bad_ranks = source.ranks_asked(st.query_params.get("ranks"), ranks)
        for what in filter(None, (bad, bad_ranks)):
            st.sidebar.warning(f"The link's {what}; ignored.")
        st.session_state["asked"] = (steps, chosen)
    steps, chosen = st.session_state["asked"]
    have = set(ranks)
    chosen = [r for r in chosen if r in have]  # another run chosen since (under a root): its ranks only
    if steps is None:
        return (lo, hi), chosen
    return (max(lo, min(steps[0], hi)), max(lo, min(steps[1], hi))), chosen


def _keep_in_url(steps: tuple[int, int], whole: tuple[int, int], chosen: list[int]) -> None:
    """The sidebar's steps and ranks in the URL (none when all), so a link opens the zoom it shows."""
    if tuple(steps) != tuple(whole):
        st.query_params["steps"] = f"{steps[0]}-{steps[1]}"
    elif "steps" in st.query_params:
        del st.query_params["steps"]
    if chosen:
        st.query_params["ranks"] = ",".join(map(str, sorted(chosen)))
    elif "ranks" in st.query_params:
        del st.query_params["ranks"]


def _load_chosen() -> tuple[source.RunView | None, tuple, str]:
    """(view, cache key, root) of the chosen source; None after showing why there is nothing."""
    url = os.environ.get("TELEMETRY_DASHBOARD_PROMETHEUS", "")
    if url:
        job = os.environ.get("TELEMETRY_DASHBOARD_JOB", "")
        refresh = source.PROMETHEUS_REFRESH_S
        tick = int(time.time() // refresh)
        again = f"; trying again every {refresh:.0f} s"
        if not job:
            try:
                jobs = source.prometheus_jobs(url)
            except source.ViewError as exc:
                st.error(f"Cannot read {url}: {exc}{again}")
                _retry(refresh)
                return None, (), ""
            if not jobs:
                st.error(
                    f"No training job on {url} yet (no `train_steps_total` series): is the job's /metrics "
                    "scraped? telemetry.init(prometheus_sd_dir=...) writes file_sd targets for Prometheus."
                )
                return None, (), ""
            job = cast(str, st.sidebar.selectbox("job", jobs))  # one of the jobs: there are some
        minutes = cast(
            int,
            st.sidebar.selectbox(
                "last", PROM_MINUTES, index=0, format_func=lambda m: f"{m} min" if m else "the whole job"
            ),
        )
        st.sidebar.caption(f"{url}, job {job}")
        try:
            view = _load_prometheus(url, job, minutes, tick)
        except source.Collecting as exc:
            st.info(f"Job {job!r} on {url}: not enough data yet, {exc}{again}")
            _retry(refresh)
            return None, (), ""
        except source.ViewError as exc:
            st.error(f"Cannot show job {job!r} from {url}: {exc}{again}")
            _retry(refresh)
            return None, (), ""
        _live_marker(source.liveness(view.run, time.time()), lambda: int(time.time() // refresh) != tick, refresh)
        return view, (url, job, minutes, tick), ""
    path, root = _pick_run()
    st.sidebar.caption(path or "no run")
    if not path and root:
        st.error(
            f"No run directory under {root} yet: run a job with telemetry.init(run_dir=...) there, "
            "or start the dashboard with a run directory or a steps table."
        )
        return None, (), root
    mtime = source.changed_at(path)
    t0 = time.perf_counter()
    try:
        view = _load(path, mtime)
    except source.ViewError as exc:
        st.error(f"Cannot show this run: {exc}")
        return None, (), root
    live = source.liveness(view.run, time.time())
    if live.live:  # poll no faster than three loads take, so a large live run is not reloaded back to back
        every = max(source.LIVE_REFRESH_S, 3 * (time.perf_counter() - t0))
        _live_marker(live, lambda: source.changed_at(path) != mtime, every)
    elif view.run.progress and not live.finished:
        st.caption(
            f"Not live: the newest heartbeat is from {views.clock(live.heartbeat_s)} and not every rank "
            "finished (the job stopped, crashed or was killed); the page does not refresh."
        )
    return view, (path, mtime), root


def _base(root: str, path: str) -> tuple[source.RunView | None, str]:
    """The run to compare with: ``--base`` (TELEMETRY_DASHBOARD_BASE), else one chosen among the other
    runs under the root."""
    base = os.environ.get("TELEMETRY_DASHBOARD_BASE", "")
    pair = _history_pair()
    if pair:
        base = pair[0]
    if not base:
        others = [r for r in _runs(root) if r != path]
        if not others:
            return None, ""
        base = st.selectbox("base run (compared against the run in the sidebar)", others, format_func=os.path.basename)
        if base not in others:  # never a path the page was not offered
            return None, ""
    try:
        return _load(base, source.changed_at(base)), os.path.basename(base.rstrip("/"))
    except source.ViewError as exc:
        st.error(f"Cannot compare with {base}: {exc}")
        return None, ""


def _zoomed(
    view: source.RunView, key: tuple, steps: tuple[int, int], chosen: list[int]
) -> tuple[source.RunView, tuple]:
    """A long run is drawn from its blocks of steps. At most ``source.PICTURE_STEPS`` steps of every rank of a
    run whose picture ``telemetry compact`` kept are drawn from it, step by step (source.load_picture); else
    steps x ranks chosen that hold at most ``source.ZOOM_ROWS`` rows are read row by row (that view then shows
    every step, and its findings are those steps'). Returns the view to show and its cache key."""
    b = cast(source.Blocks, view.blocks)  # main zooms a run drawn from its blocks only
    whole = f"{b.ranks:,} ranks x {b.last - b.first + 1:,} steps"
    last = min(steps[1], b.last)
    if not chosen and last - steps[0] + 1 <= source.PICTURE_STEPS:
        pic = _load_picture(key, view, steps)
        if pic is not None:
            n = len(cast(Picture, pic.picture).matrix.steps)  # load_picture's view has it
            parts = [
                f"a heatmap's column the median of a few steps' (beyond {data.MAX_HEATMAP_COLUMNS} steps)"
                if n > data.MAX_HEATMAP_COLUMNS
                else "",
                f"a point of the line a few steps' median p50 and highest p95 (beyond {data.MAX_LINE_POINTS})"
                if n > data.MAX_LINE_POINTS
                else "",
            ]
            grouped = f" ({'; '.join(filter(None, parts))})" if any(parts) else ""
            st.caption(
                f"Zoomed in: steps {steps[0]:,} to {last:,} of every rank of a run of {whole}, drawn step by step "
                "from the picture `telemetry compact` kept: a heatmap's cell is a band of ranks' highest at a step, "
                f"the step time's line its percentiles over every rank{grouped}. The findings, the per-rank tables "
                f"and the other charts are the whole run's, from its blocks of {b.steps} steps. Choose ranks to read "
                "their every step."
            )
            return pic, (*key, steps, ())
    if source.zoom_rows(b, steps, chosen) > source.ZOOM_ROWS:
        most = source.ZOOM_ROWS // (len(chosen) or b.ranks)
        how = "its analysis as `telemetry compact` kept it" if b.kept else "analyzed as `telemetry analyze` does"
        picture = (
            f"at most {source.PICTURE_STEPS:,} steps to draw each step from its picture, or "
            if not chosen and has_picture(b.path)
            else ""
        )
        st.caption(
            f"{whole}: drawn from medians over blocks of {b.steps} steps, {how}{data.partial_blocks(view)}. Choose "
            f"{picture}at most {most:,} steps{'' if chosen else ' (or a few ranks)'} to read every step."
        )
        return view, key
    try:
        zoom = _load_zoom(b, key[1], steps, tuple(sorted(chosen)))
    except source.ViewError as exc:
        st.error(f"Cannot read steps {steps[0]:,} to {steps[1]:,}: {exc}")
        return view, key
    who = f"ranks {', '.join(map(str, sorted(chosen)))}" if chosen else "every rank"
    st.caption(
        f"Zoomed in: steps {steps[0]:,} to {last:,} of {who}, every step, of a run of {whole}; "
        "the findings are those steps' (widen the range for the whole run's)."
    )
    return zoom, (*key, steps, tuple(sorted(chosen)))


def main() -> None:
    st.sidebar.title("training-telemetry")
    view, key, root = _load_chosen()
    if view is None:
        return
    m = view.matrix
    for w in view.run.warnings:
        st.warning(w)
    b = view.blocks
    lo, hi = (b.first, b.last) if b is not None else (int(m.steps[0]), int(m.steps[-1]))
    ranks = [int(r) for r in m.ranks]
    asked_steps, asked_ranks = _asked_in_url(lo, hi, ranks)
    steps = st.sidebar.slider("steps", lo, hi, asked_steps) if hi > lo else (lo, hi)
    chosen = st.sidebar.multiselect("ranks (all when empty)", ranks, asked_ranks)
    _keep_in_url(steps, (lo, hi), chosen)
    st.sidebar.caption(f"analyzed at {time.strftime('%H:%M:%S')}")
    if b is not None:
        view, key = _zoomed(view, key, steps, chosen)
    name = _view_key()
    title, show = views.VIEWS[name]
    st.header(title)
    choice = views.Choice(steps, chosen)
    if name == "overview":
        show(view, choice, _percentiles(key, view))
    elif name == "compare":
        show(view, choice, *_base(root, key[0] if key else ""))
    elif name == "history":
        show(view, choice, _history())
    else:
        show(view, choice)


main()

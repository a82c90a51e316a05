"""The front door: :func:`analyze_run` analyzes any input, the one way every caller does.

A source is a run directory, a steps table (a path or a DataFrame), a per-operation trace, a directory of
PyTorch profiler traces, a :class:`PrometheusSource` (a live job), or a RunInput already opened. The
front door reads it (in windows of steps when too long to hold at once, from its blocks when long and
analyzed whole), runs the detectors with the options' settings, and adds each finding's trace ids and
profiler captures.

>>> result = analyze_run("runs/exp1", AnalysisOptions(busy_bound=0.7))   # doctest: +SKIP
>>> result.to_json()["summary"]["steps"], result.note                    # doctest: +SKIP
(800, None)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Union

import pandas as pd

from ..analysis_options import AnalysisOptions
from .detectors import Analysis, StragglerParams, analyze, settings
from .inputs.load import KINETO_TRACES, RunInput, open_frame, open_input
from .longrun import windows
from .longrun.blockrun import coarse_analysis
from .traces.captures import with_captures
from .traces.links import with_trace_ids


@dataclass(frozen=True)
class PrometheusSource:
    """A live job read from a Prometheus server's HTTP API: ``url`` (e.g. ``http://127.0.0.1:9090``),
    ``job`` (None: the only one there), ``last_s`` (seconds back from now; None: the whole job, at most
    24 h). A duration, not a count of steps: what ``analyze --prometheus --last 30m`` gives."""

    url: str
    job: str | None = None
    last_s: float | None = None


Source = Union[str, "os.PathLike[str]", pd.DataFrame, PrometheusSource, RunInput]


def analyze_run(source: Source, options: AnalysisOptions | None = None) -> Analysis:
    """Analyze ``source`` with ``options`` (None: the defaults); raises TableError naming what is wrong
    with an input and what is accepted. The Analysis holds the findings and summary (``to_json()``), the
    input read (``input``; for a run read in windows, the last window's), ``note`` (how a long run was
    read; None when read whole) and, for a long run read from its blocks, ``blocks``."""
    options = options or AnalysisOptions()
    if isinstance(source, PrometheusSource):
        return _prometheus(source, options)
    if isinstance(source, RunInput):
        return _opened(source, options)
    if isinstance(source, pd.DataFrame):
        return _opened(open_frame(source), options)
    return _path(os.fspath(source), options)


def _against(options: AnalysisOptions) -> dict:
    """The baseline run's table, when the options name one."""
    if options.base is None:
        return {}
    return {"base": open_input(options.base).table, "base_name": f"the base run {options.base}"}


def _opened(run: RunInput, options: AnalysisOptions) -> Analysis:
    """An input already read, analyzed whole, its trace ids and (a run directory's) captures added."""
    result = analyze(run.table, run.progress, run.world_size, ops=run.ops, **settings(options), **_against(options))
    return _finished(result, run, int(run.table["step"].max()) if len(run.table) else None)


def _finished(result: Analysis, run: RunInput, run_last: int | None) -> Analysis:
    """``result`` with its input, each finding's trace ids and, for a run directory, the captures that
    its findings adopt (``run_last``: the run's last step, whatever steps were read)."""
    result.input = run
    result.findings = with_trace_ids(result.findings, run.meta, run.table)
    if os.path.isdir(run.source):
        result.findings = with_captures(result.findings, run.source, run.warnings, run_last)
    return result


def _path(path: str, options: AnalysisOptions) -> Analysis:
    """A path: a long run directory analyzed whole from its blocks (unless ``raw``), one too long to
    hold at once in windows of steps, anything else read and analyzed whole."""
    from ..store.segments import step_range

    against = _against(options)
    if os.path.isdir(path) and not options.raw and options.steps is None and options.last is None:
        got = coarse_analysis(path, options, against)  # a long run: from its blocks of steps
        if got is not None:
            return got
    span = step_range(path) if os.path.isdir(path) else None
    run_last = span[1] if span is not None else None  # the run's last step, whatever was asked for
    steps, last = options.steps, options.last
    if span is not None and steps is not None:
        span = (max(span[0], steps[0]), min(span[1], steps[1]), span[2])
    if span is not None and last is not None:
        span = (max(span[0], span[1] - last + 1), span[1], span[2])
    plan = windows.plan(*span, rows=options.window_rows) if span is not None and span[0] <= span[1] else []
    if span is not None and len(plan) > 1:
        return _windowed(path, plan, span, options, against, run_last)
    if steps is None and last is None:
        window = None  # everything, format 1 lines included
    elif span is not None:
        window = (span[0], span[1])
    else:  # a table (or format 1 lines only): its steps are known once read
        whole = open_input(path).table
        hi = int(whole["step"].max()) if len(whole) else 0
        window = steps or (0, hi)
        if last is not None:
            window = (max(window[0], min(window[1], hi) - last + 1), window[1])
    run = open_input(path, window)
    result = analyze(run.table, run.progress, run.world_size, ops=run.ops, **settings(options), **against)
    result = _finished(result, run, run_last)
    if run.kind == KINETO_TRACES:
        from .traces.waits import trace_dir_breakdown

        result.summary["trace_breakdown"] = trace_dir_breakdown(path, run.ranks, run.warnings)
    return result


def _windowed(
    path: str,
    plan: list[tuple[int, int]],
    span: tuple[int, int, int],
    options: AnalysisOptions,
    against: dict,
    run_last: int | None,
) -> Analysis:
    """A run too long to hold at once: windows of steps, each analyzed on its own, the findings merged."""
    opened: dict[str, RunInput] = {}

    def one(w: tuple[int, int], first: bool, final: bool) -> Analysis:
        opened.pop("run", None)  # the last window's table goes before this one is read
        run = opened["run"] = open_input(path, w)
        return analyze(
            run.table,
            run.progress if final else None,
            run.world_size,
            straggler=None if first else StragglerParams(warmup_steps=0),
            **settings(options),
            **against,
        )

    result = windows.analyze_windows(plan, one)
    last_run = opened["run"]
    result.findings = with_trace_ids(
        result.findings, last_run.meta, last_run.table, lambda a, b: open_input(path, (a, b)).table
    )
    result.findings = with_captures(result.findings, path, last_run.warnings, run_last)
    result.input = last_run
    result.note = (
        f"telemetry analyze: {span[2]:,} ranks x {span[1] - span[0] + 1:,} steps analyzed in {len(plan)} "
        f"windows of {plan[0][1] - plan[0][0] + 1:,} steps (at most {options.window_rows:,} rows at once)"
    )
    return result


def _prometheus(source: PrometheusSource, options: AnalysisOptions) -> Analysis:
    """A live job from Prometheus, analyzed as its windows allow (collecting until there are enough)."""
    from .inputs.prometheus.live import open_live

    run = open_live(source.url, source.job, last_s=source.last_s)
    result = analyze_live(run, **prometheus_settings(options))
    result.input = run
    return result


def prometheus_settings(options: AnalysisOptions) -> dict:
    """The detectors' settings a live job's windows are analyzed with (no checkpoint advice: a window's
    rows say nothing of its checkpoints)."""
    s = settings(options)
    return {"hang_bound_s": s["hang_bound_s"], "utilization": s["utilization"]}


FROM_HEARTBEATS = ("hang", "rank_lost")  # findings the heartbeats give before there are windows enough


def analyze_live(run: RunInput, **params: Any) -> Analysis:
    """Analyze a RunInput from :func:`~.inputs.prometheus.live.open_live` (``params``: :func:`analyze`'s).
    While collecting, only the heartbeats' findings are kept and ``summary.collecting`` is set."""
    from .findings import tally
    from .inputs.prometheus.live import collecting

    # A window's row summarizes its steps, as online detection's blocks do: no moving imbalance (it moves
    # from step to step, and a window's means average it away); its start times do say the gaps.
    result = analyze(run.table, run.progress, run.world_size, step_resolution=False, gaps=True, **params)
    if result.summary.get("steps"):
        result.summary["window_s"] = run.meta["window_s"]
    c = collecting(run)
    if c is not None:
        result.findings[:] = [f for f in result.findings if f.kind in FROM_HEARTBEATS]
        result.summary["collecting"] = c
        result.summary.update(
            tally(result.findings), slowdown=1.0 if any(f.kind == "hang" for f in result.findings) else 0.0
        )
    return result

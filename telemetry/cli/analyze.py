"""``telemetry analyze``: a run, a steps table or profiler traces -> the report or the findings JSON."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from .common import EXIT_USAGE, exit_code

if TYPE_CHECKING:
    from ..analysis import Analysis, AnalysisOptions, PrometheusSource
    from ..analysis.run import Source


def print_analysis(
    source: Source,
    as_json: bool,
    options: AnalysisOptions,
    extra: dict[str, Any] | None = None,
    name: str | None = None,
) -> Analysis:
    """Analyze ``source`` (any source :func:`telemetry.analysis.analyze_run` takes) with ``options`` and
    print the report or the findings JSON (``name``: what the report calls the source); returns the
    analysis."""
    from ..analysis import PrometheusSource, analyze_run

    result = analyze_run(source, options)
    if result.note:
        print(result.note, file=sys.stderr)
    if name is None:
        run = result.input
        name = f"{run.source} job {run.meta['job']}" if isinstance(source, PrometheusSource) else str(source)
    emit(result, name, as_json, extra)
    return result


def emit(result: Analysis, source: str, as_json: bool, extra: dict[str, Any] | None = None) -> None:
    """Print an analysis as the report or the findings JSON."""
    from ..analysis.detectors import StragglerParams
    from ..analysis.findings import compare_online
    from ..analysis.report import render

    run = result.input
    online = compare_online(result.findings, run.online_findings) if run.online_findings else None
    if as_json:
        doc = result.to_json()
        if extra:
            doc["summary"].update(extra)
        if run.warnings:
            doc["summary"]["warnings"] = run.warnings
        if online is not None:
            doc["summary"]["online_findings"] = online
        print(json.dumps(doc, indent=2))
    else:
        n = result.summary.get("steps", 0)
        print(render(result, source, StragglerParams().warmup(n), run.warnings, online))


def prometheus_source(args: argparse.Namespace) -> PrometheusSource:
    """``--prometheus URL [--job JOB] [--last DURATION]`` as a PrometheusSource; ValueError with a sentence
    for a flag that goes with a path, or a URL that is none."""
    from ..analysis import PrometheusSource
    from ..analysis.inputs.prometheus.live import parse_duration

    given = [
        flag
        for flag, v in (
            ("PATH", args.path),
            ("--steps", args.steps),
            ("--base", args.base),
            ("--window-rows", args.window_rows),
            ("--raw", args.raw or None),
        )
        if v is not None
    ]
    if given:
        raise ValueError(
            f"--prometheus reads a live job: {' and '.join(given)} {'is' if len(given) == 1 else 'are'} for a run "
            "directory or a table; accepted with --prometheus: "
            "--job, --last DURATION, --json, --fail-on, --hang-after, --busy-bound, --busy-warn-bound"
        )
    if not args.prometheus.startswith(("http://", "https://")):
        raise ValueError(
            f"--prometheus {args.prometheus!r}; accepted: an http:// or https:// URL, e.g. http://127.0.0.1:9090"
        )
    last_s = parse_duration(args.last) if args.last is not None else None
    return PrometheusSource(args.prometheus.rstrip("/"), args.job, last_s)


def cmd_analyze(args: argparse.Namespace) -> int:
    from ..analysis import AnalysisOptions
    from ..steptable.table import TableError

    try:
        options = AnalysisOptions.from_args(args)
        if args.prometheus is not None:
            source: Source = prometheus_source(args)
        else:
            if args.path is None:
                raise ValueError("give a run directory, a steps table or a trace directory, or --prometheus URL")
            if args.job is not None:
                raise ValueError("--job goes with --prometheus URL")
            source = args.path
    except ValueError as exc:  # a TableError too: the server's answer, said as a sentence
        print(f"telemetry analyze: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = print_analysis(source, args.json, options)
    except TableError as exc:
        print(f"telemetry analyze: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return exit_code((f.severity for f in result.findings), args.fail_on)

"""``telemetry analyze``: a run, a steps table or profiler traces -> the report or the findings JSON."""

from __future__ import annotations

import argparse
import json
import sys

from .common import EXIT_USAGE, exit_code, step_range

BUSY_WARN_BOUND = 0.6  # the default of --busy-warn-bound (Config.busy_warn_bound's)


def print_analysis(
    path: str,
    as_json: bool,
    hang_after: float | None,
    extra: dict | None = None,
    busy_bound: float = 0.8,
    steps: tuple[int, int] | None = None,
    last: int | None = None,
    window_rows: int | None = None,
    busy_warn_bound: float | None = None,
    base: str | None = None,
    failure_rate_per_hour: float | None = None,
    raw: bool = False,
):
    """Analyze ``path`` (from its blocks, or in windows, when long: analysis.windows.analyze_path; against the baseline run
    ``base`` when given) and print the report or the findings JSON; returns the analysis."""
    from ..analysis.windows import analyze_path

    result, run, note = analyze_path(
        path,
        hang_after,
        busy_bound=busy_bound,
        busy_warn_bound=busy_warn_bound,
        steps=steps,
        last=last,
        window_rows=window_rows,
        base=base,
        failure_rate_per_hour=failure_rate_per_hour,
        raw=raw,
    )
    if note:
        print(note, file=sys.stderr)
    emit(result, run, path, as_json, extra)
    return result


def emit(result, run, source: str, as_json: bool, extra: dict | None = None) -> None:
    """Print an analysis of ``run`` as the report or the findings JSON."""
    from ..analysis.detectors import StragglerParams
    from ..analysis.findings import compare_online
    from ..analysis.report import render

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


def busy_warn_bound(args: argparse.Namespace) -> float:
    """--busy-warn-bound, or its default: 0.6, or --busy-bound when that is lower. ValueError when it is
    above --busy-bound."""
    if args.busy_warn_bound is None:
        return min(BUSY_WARN_BOUND, args.busy_bound)
    if args.busy_warn_bound > args.busy_bound:
        raise ValueError(
            f"--busy-warn-bound {args.busy_warn_bound} is above --busy-bound {args.busy_bound}; accepted: "
            "a warning bound at most the info bound (default 0.6 and 0.8)"
        )
    return args.busy_warn_bound


def last_steps(text: str | None) -> int | None:
    """--last N for a path: a whole number of steps, 1 or more."""
    if text is None:
        return None
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"--last {text!r}; accepted: a number of steps, 1 or more (a duration goes with --prometheus)")
    return n


def analyze_prometheus(args: argparse.Namespace, warn: float) -> int:
    """``telemetry analyze --prometheus URL [--job JOB] [--last DURATION]``: the same report and JSON."""
    from ..analysis.detectors import UtilizationParams
    from ..analysis.prometheus.live import analyze_live, open_live, parse_duration

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
    run = open_live(args.prometheus.rstrip("/"), args.job, last_s=last_s)
    util = UtilizationParams(bound=args.busy_bound, warn_bound=warn)
    result = analyze_live(run, hang_bound_s=args.hang_after, utilization=util)
    emit(result, run, f"{run.source} job {run.meta['job']}", args.json)
    return exit_code((f.severity for f in result.findings), args.fail_on)


def cmd_analyze(args: argparse.Namespace) -> int:
    from ..analysis.table import TableError

    try:
        steps = step_range(args.steps)
        warn = busy_warn_bound(args)
        if args.prometheus is not None:
            return analyze_prometheus(args, warn)
        if args.path is None:
            raise ValueError("give a run directory, a steps table or a trace directory, or --prometheus URL")
        if args.job is not None:
            raise ValueError("--job goes with --prometheus URL")
        last = last_steps(args.last)
    except ValueError as exc:  # a TableError too: the server's answer, said as a sentence
        print(f"telemetry analyze: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = print_analysis(
            args.path,
            args.json,
            args.hang_after,
            busy_bound=args.busy_bound,
            steps=steps,
            last=last,
            window_rows=args.window_rows,
            busy_warn_bound=warn,
            base=args.base,
            failure_rate_per_hour=args.failure_rate_per_hour,
            raw=args.raw,
        )
    except TableError as exc:
        print(f"telemetry analyze: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return exit_code((f.severity for f in result.findings), args.fail_on)

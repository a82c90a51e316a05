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
):
    """Analyze ``path`` (in windows when long: analysis.windows.analyze_path; against the baseline run
    ``base`` when given) and print the report or the findings JSON; returns the analysis."""
    from ..analysis.detectors import StragglerParams
    from ..analysis.findings import compare_online
    from ..analysis.report import render
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
    )
    if note:
        print(note, file=sys.stderr)
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
        print(render(result, path, StragglerParams().warmup(n), run.warnings, online))
    return result


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


def cmd_analyze(args: argparse.Namespace) -> int:
    from ..analysis.table import TableError

    try:
        steps = step_range(args.steps)
        warn = busy_warn_bound(args)
    except ValueError as exc:
        print(f"telemetry analyze: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = print_analysis(
            args.path,
            args.json,
            args.hang_after,
            busy_bound=args.busy_bound,
            steps=steps,
            last=args.last,
            window_rows=args.window_rows,
            busy_warn_bound=warn,
            base=args.base,
        )
    except TableError as exc:
        print(f"telemetry analyze: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return exit_code((f.severity for f in result.findings), args.fail_on)

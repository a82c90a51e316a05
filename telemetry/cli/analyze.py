"""``telemetry analyze``: a run, a steps table or profiler traces -> the report or the findings JSON."""

from __future__ import annotations

import argparse
import json
import sys

from .common import EXIT_USAGE, exit_code, step_range


def print_analysis(
    path: str,
    as_json: bool,
    hang_after: float | None,
    extra: dict | None = None,
    busy_bound: float = 0.8,
    steps: tuple[int, int] | None = None,
    last: int | None = None,
    window_rows: int | None = None,
):
    """Analyze ``path`` (in windows when long: analysis.windows.analyze_path) and print the report or
    the findings JSON; returns the analysis."""
    from ..analysis.detectors import StragglerParams
    from ..analysis.findings import compare_online
    from ..analysis.report import render
    from ..analysis.windows import analyze_path

    result, run, note = analyze_path(
        path, hang_after, busy_bound=busy_bound, steps=steps, last=last, window_rows=window_rows
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


def cmd_analyze(args: argparse.Namespace) -> int:
    from ..analysis.table import TableError

    try:
        steps = step_range(args.steps)
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
        )
    except TableError as exc:
        print(f"telemetry analyze: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return exit_code((f.severity for f in result.findings), args.fail_on)

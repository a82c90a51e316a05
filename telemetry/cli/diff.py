"""``telemetry diff``: two runs or steps tables compared, regressions by phase; or two profiler traces
(a peer's and a slow rank's), op by op, kernel by kernel and collective by collective."""

from __future__ import annotations

import argparse
import json
import os
import sys

from .common import EXIT_USAGE, exit_code, step_range


def cmd_diff(args: argparse.Namespace) -> int:
    from ..analysis.detectors.diff import DiffParams, diff
    from ..analysis.inputs.kineto import looks_like_trace
    from ..analysis.inputs.load import open_input
    from ..steptable.table import TableError

    if all(os.path.isfile(p) and looks_like_trace(p) for p in (args.base, args.new)):
        return _trace_diff(args)

    if not 0 < args.min_effect < 1:
        print(
            f"telemetry diff: --min-effect {args.min_effect}; accepted: a fraction above 0 and below 1, "
            "e.g. 0.05 for 5%",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        steps = step_range(args.steps)
    except ValueError as exc:
        print(f"telemetry diff: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        base, new = open_input(args.base, steps).table, open_input(args.new, steps).table
    except TableError as exc:
        print(f"telemetry diff: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not len(base) or not len(new):
        print("telemetry diff: a run with no steps cannot be compared", file=sys.stderr)
        return EXIT_USAGE
    doc = diff(base, new, DiffParams(min_effect=args.min_effect))
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        s = doc["summary"]
        print(
            f"{args.base} -> {args.new}: step {s['base_step_s'] * 1e3:.2f} ms -> {s['new_step_s'] * 1e3:.2f} ms "
            f"({s['step_change']:+.1%})"
        )
        print("  series        base ms     new ms    change        p")
        for name, c in sorted(s["series"].items()):
            print(
                f"  {name:<12} {c['base_s'] * 1e3:8.2f}   {c['new_s'] * 1e3:8.2f}   {c['change']:+7.1%}   {c['p']:.1e}"
            )
        for name, why in s["undecided"].items():
            print(f"  undecided: {name}: {why}")
        if not doc["findings"]:
            print(
                f"No significant change of {s['min_effect']:.0%} or more"
                + (" among the series decided." if s["undecided"] else ".")
            )
        for f in doc["findings"]:
            print(f"  [{f['severity']}] {f['kind']}: {f['evidence']}")
    return exit_code((f["severity"] for f in doc["findings"] if f["kind"] == "regression"), args.fail_on)


def _trace_diff(args: argparse.Namespace) -> int:
    """Two profiler traces: NEW (the slow rank's) against BASE (a peer's), by self time per step."""
    from ..analysis.traces.diff import diff_text, profile, trace_diff
    from ..steptable.table import TableError

    if args.steps:
        print("telemetry diff: --steps compares runs; two traces are compared whole, per step", file=sys.stderr)
        return EXIT_USAGE
    try:
        peer, flagged = profile(args.base), profile(args.new)
    except TableError as exc:
        print(f"telemetry diff: {exc}", file=sys.stderr)
        return EXIT_USAGE
    rows = trace_diff(flagged, peer)
    if args.json:
        print(json.dumps({"trace_diff": rows, "steps": {"base": peer.steps, "new": flagged.steps}}, indent=2))
    else:
        print(diff_text(rows, f"{args.new} ({flagged.steps} steps)", f"{args.base} ({peer.steps} steps)"))
    return 0

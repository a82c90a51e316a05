"""``telemetry demo``: the instrumented multi-rank job, run, then analyzed."""

from __future__ import annotations

import argparse
import os
import sys
import time

from .analyze import print_analysis
from .common import EXIT_INTERRUPTED, EXIT_JOB_FAILED, EXIT_JOB_HUNG, EXIT_OK, EXIT_USAGE


def cmd_demo(args: argparse.Namespace) -> int:
    from ..analysis_options import DEMO, AnalysisOptions
    from ..demo.faults import InjectError, check_against_job, parse_inject
    from ..demo.launcher import DemoError, log_tail, run_demo

    try:
        faults = [parse_inject(s) for s in args.inject]
        check_against_job(faults, args.ranks, args.steps)
        options = AnalysisOptions.from_args(args, DEMO)
    except (InjectError, ValueError) as exc:
        print(f"telemetry demo: {exc}", file=sys.stderr)
        return EXIT_USAGE
    run_dir = args.run_dir or os.path.join("runs", time.strftime("demo-%Y%m%d-%H%M%S"))
    out = sys.stderr if args.json else sys.stdout
    what = ", ".join(args.inject) if args.inject else "no fault injected"
    print(
        f"telemetry demo: {args.ranks} ranks (gloo on 127.0.0.1), {args.steps} steps, {what}\n"
        f"  run directory: {run_dir}",
        file=out,
        flush=True,
    )
    try:
        every = args.checkpoint_every or (25 if any(f.kind == "slow_checkpoint" for f in faults) else 0)
        result = run_demo(
            args.ranks,
            args.steps,
            run_dir,
            faults,
            overwrite=args.overwrite,
            out=out,
            hang_after_s=args.hang_after_s,
            extra_args={**({"checkpoint_every": every} if every else {}), **({"job": args.job} if args.job else {})},
        )
    except DemoError as exc:
        print(f"telemetry demo: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"\ntelemetry demo: interrupted; the ranks were stopped. {_kept(run_dir)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(
        f"  job {result.outcome} in {result.wall_s:.1f} s" + (f": {result.message}" if result.message else ""),
        file=out,
        flush=True,
    )
    if result.outcome == "failed":
        for r, code in sorted(result.exit_codes.items()):
            if code not in (0, None):
                print(f"--- rank {r} log (last lines) ---\n{log_tail(run_dir, r)}", file=sys.stderr)
    print(file=out)
    print_analysis(
        run_dir,
        args.json,
        options.replace(hang_after_s=result.hang_bound_s or args.hang_after_s),
        extra={"demo": {"outcome": result.outcome, "injected": args.inject, "run_dir": run_dir}},
    )
    code = {"failed": EXIT_JOB_FAILED, "hang": EXIT_JOB_HUNG}.get(result.outcome, EXIT_OK)
    if code:
        print(
            f"telemetry demo: exit {code}: the job {'failed' if code == EXIT_JOB_FAILED else 'hung'}", file=sys.stderr
        )
    return code


def _kept(run_dir: str) -> str:
    """What an interrupted demo leaves, from the ranks' last heartbeats only: a Ctrl-C should end the
    command promptly, and reading the steps table would import pandas and read every segment."""
    import json

    from ..store.layout import progress_path

    last = {}
    r = 0
    while os.path.exists(progress_path(run_dir, r)):
        try:
            with open(progress_path(run_dir, r), encoding="utf-8") as f:
                step = json.load(f).get("last_step")
        except (OSError, ValueError):
            step = None
        if isinstance(step, int):
            last[r] = step
        r += 1
    if not last:
        return f"Nothing was recorded in {run_dir}."
    lo, hi = min(last.values()), max(last.values())
    upto = f"step {lo}" if lo == hi else f"steps {lo}-{hi}"
    return (
        f"Kept: {run_dir}, {len(last)} rank{'s' if len(last) != 1 else ''} up to {upto}; "
        f"see them with: telemetry analyze {run_dir}"
    )

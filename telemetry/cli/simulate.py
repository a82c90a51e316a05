"""``telemetry simulate``: a run directory from the simulator, with its ground truth."""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime

from .common import EXIT_OK, EXIT_USAGE


def cmd_simulate(args: argparse.Namespace) -> int:
    from ..demo.faults import InjectError
    from ..demo.simrun import parse_faults, write_series, write_simulated_run
    from ..demo.simulate import Scenario

    try:
        faults = parse_faults(args.inject, args.ranks, args.steps)
    except InjectError as exc:
        print(f"telemetry simulate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    sc = Scenario(name="simulated", ranks=args.ranks, steps=args.steps, seed=args.seed, faults=faults)
    start = None
    if args.start:
        try:
            start = datetime.fromisoformat(args.start).timestamp()
        except ValueError:
            print(
                f"telemetry simulate: --start {args.start!r}; accepted: ISO 8601, e.g. 2026-11-01T02:00:00+00:00",
                file=sys.stderr,
            )
            return EXIT_USAGE
    if args.series:
        try:
            paths = write_series(
                sc, args.out, args.series, args.from_run, args.run_noise, start_time_s=start, overwrite=args.overwrite
            )
        except (FileExistsError, OSError) as exc:
            print(f"telemetry simulate: {exc}", file=sys.stderr)
            return EXIT_USAGE
        print(
            f"telemetry simulate: wrote {len(paths)} runs ({args.ranks:,} ranks x {args.steps:,} steps each) to "
            f"{args.out}"
            + (f", the faults from run {args.from_run}" if faults else "")
            + f"\n  compare them with: telemetry history {args.out}"
        )
        return EXIT_OK
    try:
        done = write_simulated_run(sc, args.out, overwrite=args.overwrite, start_time_s=start)
    except (FileExistsError, OSError) as exc:
        print(f"telemetry simulate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(
        f"telemetry simulate: wrote {done['records']:,} step records ({args.ranks:,} ranks x {args.steps:,} steps) "
        f"to {args.out} in {done['seconds']:.1f} s; ground truth in {os.path.join(args.out, 'truth.json')}\n"
        f"  analyze it with: telemetry analyze {args.out}"
    )
    return EXIT_OK

"""``telemetry simulate``: a run directory from the simulator, with its ground truth."""

from __future__ import annotations

import argparse
import os
import sys

from .common import EXIT_OK, EXIT_USAGE


def cmd_simulate(args: argparse.Namespace) -> int:
    from ..demo.faults import InjectError
    from ..demo.simrun import parse_faults, write_simulated_run
    from ..demo.simulate import Scenario

    try:
        faults = parse_faults(args.inject, args.ranks, args.steps)
    except InjectError as exc:
        print(f"telemetry simulate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    sc = Scenario(name="simulated", ranks=args.ranks, steps=args.steps, seed=args.seed, faults=faults)
    try:
        done = write_simulated_run(sc, args.out, overwrite=args.overwrite)
    except (FileExistsError, OSError) as exc:
        print(f"telemetry simulate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(
        f"telemetry simulate: wrote {done['records']:,} step records ({args.ranks:,} ranks x {args.steps:,} steps) "
        f"to {args.out} in {done['seconds']:.1f} s; ground truth in {os.path.join(args.out, 'truth.json')}\n"
        f"  analyze it with: telemetry analyze {args.out}"
    )
    return EXIT_OK

"""``telemetry capture RUN_DIR --ranks R[,R...] [--num-steps N] [--wait S]``: ask a running job for profiler
traces of some ranks (telemetry/online/capture.py): a request file in ``RUN_DIR/captures/requests/``,
which rank 0's online thread takes within a few seconds and plans from a step a little ahead."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from ..store.layout import write_json_atomic
from .common import EXIT_JOB_FAILED, EXIT_USAGE


def cmd_capture(args: argparse.Namespace) -> int:
    run = args.run_dir
    if not os.path.isfile(os.path.join(run, "meta.json")):
        print(f"telemetry capture: {run!r} is not a run directory (no meta.json)", file=sys.stderr)
        return EXIT_USAGE
    try:
        ranks = sorted({int(r) for r in args.ranks.split(",") if r.strip()})
    except ValueError:
        print(
            f"telemetry capture: --ranks {args.ranks!r}; accepted: ranks separated by commas, e.g. 1,3", file=sys.stderr
        )
        return EXIT_USAGE
    if not ranks or min(ranks) < 0:
        print(f"telemetry capture: --ranks {args.ranks!r}; accepted: ranks >= 0, e.g. 1,3", file=sys.stderr)
        return EXIT_USAGE
    cid = f"asked-{time.strftime('%Y%m%d-%H%M%S')}-rank{'-'.join(map(str, ranks))}"
    folder = os.path.join(run, "captures", "requests")
    os.makedirs(folder, exist_ok=True)
    write_json_atomic(os.path.join(folder, cid + ".json"), {"id": cid, "ranks": ranks, "steps": args.num_steps})
    where = os.path.join(run, "captures", cid)
    print(f"telemetry capture: asked for {args.num_steps} steps of ranks {ranks}; traces in {where}/rank-N.json.gz")
    if not args.wait:
        return 0
    deadline = time.monotonic() + args.wait
    want = [os.path.join(where, f"rank-{r}.json.gz") for r in ranks]
    while time.monotonic() < deadline:
        if all(os.path.isfile(p) for p in want):
            with open(os.path.join(where, "manifest.json"), encoding="utf-8") as f:
                steps = json.load(f)["steps"]
            print(f"telemetry capture: steps {steps[0]}-{steps[1]} captured: {', '.join(want)}")
            return 0
        time.sleep(0.5)  # the job writes them after the captured steps
    print(
        f"telemetry capture: not all traces in {where} after {args.wait:g} s (is the job running with "
        "online detection, capture on and more than one rank? the request stays until rank 0 takes it)",
        file=sys.stderr,
    )
    return EXIT_JOB_FAILED

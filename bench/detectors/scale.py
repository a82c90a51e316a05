"""`telemetry analyze` on a steps table of 1,024 ranks x 10,000 steps: time and peak memory.

The table is generated vectorized (the synchronous-step model of telemetry.demo.simulate: data wait,
forward, backward with the all-reduce, optimizer; lognormal jitter; one straggler) and written as
Parquet; then `python -m telemetry analyze FILE --json` runs as a child process, timed, with its
peak resident memory from getrusage. Target: at most 10 s and 4 GB here.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_table(ranks: int, steps: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    shape = (steps, ranks)
    f = 0.010 * rng.lognormal(0, 0.05, shape)
    b = 0.020 * rng.lognormal(0, 0.05, shape)
    o = 0.004 * rng.lognormal(0, 0.05, shape)
    d = 0.0005 * rng.lognormal(0, 0.05, shape)
    f[:, (ranks * 3) // 4] *= 1.5  # one straggler, forward
    arrival = d + f + b
    end = arrival.max(axis=1, keepdims=True) + 0.005
    comm = end - arrival
    duration = f + b + comm + o
    start = 1.7e9 + np.cumsum(np.median(duration + d, axis=1))[:, None] + np.zeros(shape)
    return pd.DataFrame(
        {
            "rank": np.tile(np.arange(ranks, dtype=np.int32), steps),
            "step": np.repeat(np.arange(steps, dtype=np.int32), ranks),
            "start_s": start.ravel(),
            "duration_s": duration.ravel(),
            "data_s": d.ravel(),
            "forward_s": f.ravel(),
            "backward_s": (b + comm).ravel(),
            "optimizer_s": o.ravel(),
            "comm_s": comm.ravel(),
            "comm.backward_s": comm.ravel(),
            "tokens": np.full(ranks * steps, 4096, dtype=np.int32),
        }
    )


def run(ranks: int, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "steps.parquet")
        t0 = time.perf_counter()
        make_table(ranks, steps).to_parquet(path)
        gen_s = time.perf_counter() - t0
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "telemetry", "analyze", path, "--json"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": ROOT},
        )
        wall = time.perf_counter() - t0
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-2000:])
        doc = json.loads(proc.stdout)
    found = [(f["kind"], f["ranks"], f["phase"]) for f in doc["findings"] if f["severity"] != "info"]
    return {
        "ranks": ranks,
        "steps": steps,
        "rows": ranks * steps,
        "analyze_s": wall,
        "peak_rss_gib": max(peak_kib, before) / 2**20,
        "findings": found,
        "generate_s": gen_s,
        "file_mib": None,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10000)
    args = ap.parse_args()
    print(json.dumps(run(args.ranks, args.steps)))


if __name__ == "__main__":
    main()

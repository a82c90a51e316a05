"""Cost of ``init(profiler_ranges=True)`` on the hot path: nanoseconds per step of one step with
three phases (``forward``, ``backward``, ``optimizer``), against an empty loop.

Strategies measured, interleaved in rounds (the median over rounds): the default wall-clock
recorder (``off``), the recorder with profiler ranges and no profiler running (``on``), and the
same inside a running ``torch.profiler.profile`` (``on, profiling``: what a profiled job pays; the
profiler's own per-range cost included). ``--root DIR`` imports ``telemetry`` from another tree
(e.g. an ``git archive`` of the last commit) to compare the default recorder before and after.

    python bench/profiler_ranges.py [--steps 20000] [--rounds 7] [--root DIR] [--out bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--off-only", action="store_true", help="the default recorder only (for --root)")
    ap.add_argument("--out", default=None, help="write the section of bench/RESULTS.md")
    args = ap.parse_args()
    sys.path.insert(0, args.root)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from results import update_section

    import telemetry
    from telemetry.recorder import build_recorder

    def loop(rec, n: int) -> int:
        step, phase = rec.step, rec.phase
        t0 = time.perf_counter_ns()
        for _ in range(n):
            with step():
                with phase("forward"):
                    pass
                with phase("backward"):
                    pass
                with phase("optimizer"):
                    pass
        dt = time.perf_counter_ns() - t0
        rec.drain()
        return dt

    def empty(n: int) -> int:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            pass
        return time.perf_counter_ns() - t0

    recs = {"off": build_recorder(1 << 22, "wall")}
    if not args.off_only:
        recs["on"] = build_recorder(1 << 22, "wall", profiler_ranges=True)
    results: dict[str, list[float]] = {k: [] for k in recs}
    if not args.off_only:
        results["on, profiling"] = []
    n = args.steps
    for _ in range(args.rounds):
        base = empty(n)
        for name, rec in recs.items():
            results[name].append((loop(rec, n) - base) / n)
        if not args.off_only:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU]):
                m = min(n, 2000)  # the profiler keeps every range: fewer steps
                results["on, profiling"].append((loop(recs["on"], m) - empty(m)) / m)
    where = os.path.dirname(os.path.dirname(telemetry.__file__))
    print(
        f"telemetry from {where}; {n} steps x {args.rounds} rounds; ns per step (step + 3 phases), "
        "median over rounds (min-max):"
    )
    for name, vals in results.items():
        print(f"  {name:15s} {statistics.median(vals):9.0f}   ({min(vals):.0f}-{max(vals):.0f})")
    if args.out:
        rows = "\n".join(
            f"| {name} | {statistics.median(v):,.0f} | {min(v):,.0f}-{max(v):,.0f} |" for name, v in results.items()
        )
        body = (
            f"`python bench/profiler_ranges.py --rounds {args.rounds} --out bench/RESULTS.md`: one step with "
            f"three phases, {n:,} steps per round ({min(n, 2000):,} inside the profiler), {args.rounds} "
            "rounds interleaved, the empty loop subtracted. `on`: `init(profiler_ranges=True)`, no profiler "
            "running; `on, profiling`: inside `torch.profiler.profile` (its own cost per range included).\n\n"
            "| recorder | ns per step (median) | min-max over rounds |\n|---|---|---|\n" + rows
        )
        update_section(args.out, "Profiler ranges (bench/profiler_ranges.py)", body)


if __name__ == "__main__":
    main()

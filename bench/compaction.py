"""Compaction (telemetry/store/compact.py), measured:

1. one rank's run-store sink fed 100,000 demo-shaped records in ticks of 12, as its worker thread
   feeds it, with compaction on (the default) and off, side by side: files left per rank per 100,000
   steps, the sink thread's time per record, and its longest single call (a compaction's pause: the
   sink's own thread, never the training thread's);
2. a simulated run (``telemetry simulate``, default 1,024 ranks x 10,000 steps): ``telemetry
   compact`` on it (time), and ``telemetry analyze``'s read of the steps table and its findings before
   and after (a fresh process each), which must be the same.

    python bench/compaction.py [--ranks 1024] [--steps 10000] [--out bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from store import ENV, analyze_cost, demo_record, simulate, sink  # noqa: E402 - after the sys.path set-up above

from telemetry.store import compact, layout  # noqa: E402 - after the sys.path set-up above


def feed(tmp: str, n: int, on: bool, tick: int = 12) -> dict:
    """The sink fed ``n`` records; compaction ``on`` or off."""
    run = os.path.join(tmp, f"feed-{'on' if on else 'off'}")
    s = sink(run)
    if not on:
        s._compact = lambda: None  # nor at shutdown
    longest, total = 0.0, 0.0
    batch = [demo_record(i) for i in range(tick)]
    for i in range(0, n, tick):
        recs = [r._replace(step=i + j) for j, r in enumerate(batch)]
        t0 = time.perf_counter()
        s.write(recs)
        s.flush(1.0)
        dt = time.perf_counter() - t0
        total += dt
        longest = max(longest, dt)
    t0 = time.perf_counter()
    s.close(60.0)
    close_s = time.perf_counter() - t0
    names = os.listdir(os.path.join(run, layout.RANKS_DIR))
    out = {
        "records": n,
        "us_per_record": (total + close_s) / n * 1e6,
        "longest_ms": longest * 1e3,
        "close_ms": close_s * 1e3,
        "seg_files": sum(".seg-" in x for x in names),
        "spans_files": sum(".spans-" in x for x in names),
        "segments_sealed": s.segments,
        "compactions": s.compactions,
    }
    shutil.rmtree(run)
    return out


def compact_cli(run: str) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "telemetry", "compact", run],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    return {"wall_s": time.perf_counter() - t0, "said": proc.stdout.strip()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10000)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--out")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        fed = {on: feed(tmp, args.records, on) for on in (False, True)}
        run, _ = simulate(tmp, args.ranks, args.steps)
        before = analyze_cost(run)
        files_before = len(os.listdir(os.path.join(run, layout.RANKS_DIR)))
        cli = compact_cli(run)
        files_after = len(os.listdir(os.path.join(run, layout.RANKS_DIR)))
        after = analyze_cost(run)
    same = before["found"] == after["found"] and before["rows"] == after["rows"]
    off, on = fed[False], fed[True]
    text = "\n".join(
        [
            f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()}, 2 cores, Python "
            f"{platform.python_version()} (`python bench/compaction.py --ranks {args.ranks} --steps {args.steps}`).",
            "",
            f"**One rank's sink, {args.records:,} demo records** (ticks of 12, as its worker thread feeds it; "
            "a segment sealed every 2,048 records):",
            "",
            "| compaction | step-column files left | spans files left | sink time per record | longest call (a compaction's pause, on the sink's own thread) | close | target |",
            "|---|---|---|---|---|---|---|",
            f"| off | {off['seg_files']} | {off['spans_files']} | {off['us_per_record']:.1f} us | "
            f"{off['longest_ms']:.0f} ms | {off['close_ms']:.0f} ms | |",
            f"| on (every {compact.COMPACT_SEGMENTS} segments, and at shutdown) | {on['seg_files']} | "
            f"{on['spans_files']} | {on['us_per_record']:.1f} us | {on['longest_ms']:.0f} ms | {on['close_ms']:.0f} ms | "
            f"a few files per rank per 100,000 steps: {'met' if on['seg_files'] <= 5 else 'missed'} |",
            "",
            f"**A simulated run, {args.ranks:,} ranks x {args.steps:,} steps** (`telemetry simulate`, then "
            f"`telemetry compact`): {files_before:,} files in ranks/ before, {files_after:,} after; "
            f"`telemetry compact` {cli['wall_s']:.1f} s ({cli['said']}). `analyze` (a fresh process each): "
            f"read {before['read_s']:.1f} s -> {after['read_s']:.1f} s, analysis {before['analyze_s']:.1f} s -> "
            f"{after['analyze_s']:.1f} s, total {before['total_s']:.1f} s -> {after['total_s']:.1f} s, peak "
            f"{before['peak_gib']:.2f} -> {after['peak_gib']:.2f} GiB; rows and findings "
            f"{'the same' if same else 'DIFFERENT'}: {after['found']}.",
        ]
    )
    print(text)
    print(json.dumps({"fed": {str(k): v for k, v in fed.items()}, "before": before, "after": after}), file=sys.stderr)
    if args.out:
        from results import update_section

        update_section(args.out, "Compaction (bench/compaction.py)", text)


if __name__ == "__main__":
    main()

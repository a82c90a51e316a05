"""``telemetry simulate`` at 10,000 ranks: the process's peak memory (its maximum resident set, from
``/usr/bin/time``), wall time and the run directory's size, a fresh process each.

With ``--base TREE`` (another checkout, e.g. ``git worktree add /tmp/base <commit>``), both trees also
write ``--ranks`` x ``--compare-steps`` (one segment of 2,048 steps per rank, the most a version that
held a whole segment at once holds) from the same seed and start, and the two run directories are
compared file by file, byte for byte. Exits 1 when this tree's peak exceeds ``--limit-gb`` (2 GB:
2 x 10^9 bytes), or the directories differ. The run directories are deleted afterwards.

    python bench/simulate_memory.py [--ranks 10000] [--steps 10000] [--base TREE] [--compare-steps 2048]
                                    [--dir /tmp] [--out bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import filecmp
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

START = "2026-11-01T02:00:00+00:00"
INJECT = "straggler:rank=7,phase=forward,factor=1.3,start=100"


def simulate(tree: str, ranks: int, steps: int, out: str) -> dict:
    """``telemetry simulate`` of ``tree`` in a process of its own: peak RSS (bytes), wall time, disk."""
    argv = ["-m", "telemetry", "simulate", "--ranks", str(ranks), "--steps", str(steps), "--seed", "1"]
    argv += ["--inject", INJECT, "--start", START, "--out", out]
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        t0 = time.monotonic()
        p = subprocess.run(
            ["/usr/bin/time", "-f", "%M", "-o", tf.name, sys.executable, *argv],
            cwd=tree,
            env={**os.environ, "PYTHONPATH": tree},
            capture_output=True,
            text=True,
        )
        wall = time.monotonic() - t0
        if p.returncode:
            raise RuntimeError(f"telemetry simulate failed ({tree}): {p.stderr[-2000:]}")
        peak_kb = int(tf.read().split()[-1])
    files = [os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs]
    return {
        "peak": peak_kb * 1024,
        "wall_s": wall,
        "bytes": sum(os.path.getsize(f) for f in files),
        "files": len(files),
    }


def same_dirs(a: str, b: str) -> tuple[bool, int]:
    """Whether two run directories hold the same files with the same bytes; how many files."""
    names_a = sorted(os.path.relpath(os.path.join(d, f), a) for d, _, fs in os.walk(a) for f in fs)
    names_b = sorted(os.path.relpath(os.path.join(d, f), b) for d, _, fs in os.walk(b) for f in fs)
    if names_a != names_b:
        return False, len(names_a)
    _, mismatch, errors = filecmp.cmpfiles(a, b, names_a, shallow=False)
    return not mismatch and not errors, len(names_a)


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=10000)
    ap.add_argument("--steps", type=int, default=10000)
    ap.add_argument("--base", default=None, help="another source tree to compare with (a git worktree)")
    ap.add_argument("--compare-steps", type=int, default=2048, help="steps of the run both trees write")
    ap.add_argument("--limit-gb", type=float, default=2.0)
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where the run directories are written")
    ap.add_argument("--out", default=None, help="write the section into this RESULTS.md")
    args = ap.parse_args(argv)
    ok = True
    work = tempfile.mkdtemp(prefix="simulate-memory-", dir=args.dir)
    rows = []
    try:
        jobs = [("this tree", ROOT, args.steps)]  # (label, tree, steps): kept for the comparison when base
        if args.base:
            if args.compare_steps != args.steps:
                jobs.append(("this tree", ROOT, args.compare_steps))
            jobs.append(("base", args.base, args.compare_steps))
        runs = {}
        for label, tree, steps in jobs:
            out = os.path.join(work, f"{label.replace(' ', '-')}-{steps}")
            r = simulate(tree, args.ranks, steps, out)
            runs[(label, steps)] = out
            rows.append((label, steps, r))
            print(
                f"{label}: {args.ranks:,} ranks x {steps:,} steps: peak {gib(r['peak'])}, {r['wall_s']:.1f} s, "
                f"{gib(r['bytes'])} in {r['files']:,} files",
                flush=True,
            )
            if label == "this tree" and r["peak"] > args.limit_gb * 1e9:
                print(f"FAIL: peak {r['peak'] / 1e9:.2f} GB over {args.limit_gb} GB")
                ok = False
            if not (args.base and steps == args.compare_steps):
                shutil.rmtree(out)  # the disk: only the compared pair is kept until the end
        same = None
        if args.base:
            same, nfiles = same_dirs(runs[("this tree", args.compare_steps)], runs[("base", args.compare_steps)])
            print(f"run directories of both trees ({nfiles:,} files): {'identical' if same else 'DIFFERENT'}")
            ok = ok and same
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.out:
        from results import update_section

        cmd = f"python bench/simulate_memory.py --ranks {args.ranks} --steps {args.steps}"
        if args.base:
            cmd += f" --base BASE --compare-steps {args.compare_steps}"
        lines = [
            f"Measured {date.today().isoformat()} on {platform.machine()}, {os.cpu_count()} cores, Python "
            f"{platform.python_version()} (`{cmd}`): `telemetry simulate --seed 1 --inject {INJECT}`, a fresh "
            "process each; peak = its maximum resident set (`/usr/bin/time`). Target: at most 2 GB "
            f"(2 x 10^9 bytes) at 10,000 ranks.",
            "",
            "| tree | ranks x steps | peak memory | wall time | run directory |",
            "|---|---|---|---|---|",
        ]
        for label, steps, r in rows:
            lines.append(
                f"| {label} | {args.ranks:,} x {steps:,} | {gib(r['peak'])} ({r['peak'] / 1e9:.2f} GB) "
                f"| {r['wall_s']:.1f} s | {gib(r['bytes'])}, {r['files']:,} files |"
            )
        mine = max(r["peak"] for label, _, r in rows if label == "this tree")
        lines += [
            "",
            f"Target: `telemetry simulate` writes {args.ranks:,} ranks in at most {args.limit_gb:g} GB: "
            + ("met" if mine <= args.limit_gb * 1e9 else "**missed**")
            + f" (peak {mine / 1e9:.2f} GB).",
        ]
        if same is not None:
            lines += [
                "",
                f"The base is `{os.path.basename(os.path.abspath(args.base))}` "
                f"(commit {git_head(args.base)}). The two trees' run directories of {args.ranks:,} x "
                f"{args.compare_steps:,}: {'identical, byte for byte' if same else 'DIFFERENT'}.",
            ]
        update_section(args.out, "Simulate at 10,000 ranks: peak memory (bench/simulate_memory.py)", "\n".join(lines))
    return 0 if ok else 1


def git_head(tree: str) -> str:
    p = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return p.stdout.strip() or "unknown"


if __name__ == "__main__":
    sys.exit(main())

"""Hot-path cost of two source trees, measured side by side (A/B), for a change that must be no slower.

Each round runs one short process per tree, alternately, timing phase enter/exit, step enter/exit
and log() against an empty loop (ns per call, median of 5 chunks of 300k calls); the table gives the
median over rounds, so the VM's drift hits both trees alike. With ``--callgrind`` it counts
instructions instead (valgrind's callgrind, 20k calls, the empty loop's count subtracted): the same
number on every run, whatever else the machine does, so a change of a few percent shows.

    git worktree add /tmp/base <commit>
    python bench/hotpath_ab.py --base /tmp/base [--rounds 7] [--callgrind]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_PROBE = """
import json, time
from telemetry.recorder import Recorder
rec = Recorder(1 << 22)
def bench(fn, n=1000, reps=300):
    chunks = []
    for _ in range(5):
        total = 0
        for _ in range(reps):
            rec.drain()
            t0 = time.perf_counter_ns(); fn(n); total += time.perf_counter_ns() - t0
        chunks.append(total / (n * reps))
    return sorted(chunks)[2]
def empty(k):
    for _ in range(k): pass
def phase(k):
    p = rec.phase
    for _ in range(k):
        with p("forward"): pass
def step(k):
    s = rec.step
    for _ in range(k):
        with s(): pass
def log(k):
    lg = rec.log
    for _ in range(k): lg({"loss": 1.0})
e = bench(empty)
print(json.dumps({"phase enter/exit": bench(phase) - e, "step enter/exit": bench(step) - e, "log(1 value)": bench(log) - e}))
"""


def probe(tree: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": tree},
    ).stdout
    return json.loads(out)


_COUNT = """
import sys
from telemetry.recorder import Recorder
rec, what, n = Recorder(1 << 22), sys.argv[1], 20000
if what == "phase enter/exit":
    p = rec.phase
    for _ in range(n):
        with p("forward"): pass
elif what == "step enter/exit":
    s = rec.step
    for _ in range(n):
        with s(): pass
elif what == "log(1 value)":
    lg = rec.log
    for _ in range(n): lg({"loss": 1.0})
else:
    for _ in range(n): pass
"""


def instructions(tree: str, what: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out", sys.executable, "-c", _COUNT, what],
            cwd=tree,
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONPATH": tree},
        )
    return int(re.search(r"Collected : (\d+)", p.stderr).group(1))


def callgrind(base: str) -> None:
    print("| hot-path call | base instructions per call | this tree | this / base |\n|---|---|---|---|")
    empty = {t: instructions(t, "empty") for t in (base, ROOT)}
    for what in ("phase enter/exit", "step enter/exit", "log(1 value)"):
        b, t = ((instructions(tree, what) - empty[tree]) / 20000 for tree in (base, ROOT))
        print(f"| {what} | {b:.0f} | {t:.0f} | {t / b:.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="the source tree to compare against (a git worktree)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--callgrind", action="store_true", help="count instructions instead of timing")
    args = ap.parse_args()
    if args.callgrind:
        callgrind(args.base)
        return
    runs: dict[str, list[dict[str, float]]] = {"base": [], "this": []}
    for _ in range(args.rounds):
        runs["base"].append(probe(args.base))
        runs["this"].append(probe(ROOT))
    print("| hot-path call | base ns | this tree ns | this / base |\n|---|---|---|---|")
    for name in runs["base"][0]:
        b = statistics.median(r[name] for r in runs["base"])
        t = statistics.median(r[name] for r in runs["this"])
        print(f"| {name} | {b:.0f} | {t:.0f} | {t / b:.2f} |")


if __name__ == "__main__":
    main()

"""Hot-path cost of two source trees, measured side by side (A/B), for a change that must be no slower.

Each round runs one short process per tree, alternately, timing phase enter/exit, step enter/exit
and log() through the public API (``telemetry.phase``, ``telemetry.step``, ``telemetry.log``, with a
wall-clock recorder active), and the floor (the least a timing context manager can do, as
bench/overhead.py defines it), against an empty loop (ns per call, median of 5 chunks of 300k
calls); the table gives the median over rounds, so the VM's drift hits both trees alike. With
``--callgrind`` it counts instructions instead (valgrind's callgrind: a run of 40k calls less a run
of 20k, over 20k, the empty loop's count subtracted; one BLAS thread and one hash seed): the same
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

# Both probes call the public API (what a user calls: telemetry.phase, telemetry.step, telemetry.log,
# module-level functions included) with a wall-clock recorder active, and time the floor beside them:
# the least a timing context manager can do (as bench/overhead.py defines it).
_SETUP = """
import sys, time
import telemetry
from telemetry.recorder import Recorder, current
rec = Recorder(1 << 22)
current.set_active(rec)
clock, buf = time.perf_counter_ns, rec._buf
class Floor:
    __slots__ = ("t0",)
    def __enter__(self):
        self.t0 = clock()
    def __exit__(self, *exc):
        buf.append((clock(), self.t0))
def empty(k):
    for _ in range(k): pass
def floor(k):
    for _ in range(k):
        with Floor(): pass
def phase(k):
    p = telemetry.phase
    for _ in range(k):
        with p("forward"): pass
def step(k):
    s = telemetry.step
    for _ in range(k):
        with s(): pass
def log(k):
    lg = telemetry.log
    for _ in range(k): lg(loss=1.0)
CALLS = {"phase enter/exit": phase, "step enter/exit": step, "log(1 value)": log, "floor": floor, "empty": empty}
"""

_PROBE = (
    _SETUP
    + """
import json
def bench(fn, n=1000, reps=300):
    chunks = []
    for _ in range(5):
        total = 0
        for _ in range(reps):
            rec.drain(); buf.clear()
            t0 = time.perf_counter_ns(); fn(n); total += time.perf_counter_ns() - t0
        chunks.append(total / (n * reps))
    return sorted(chunks)[2]
e = bench(empty)
print(json.dumps({name: bench(fn) - e for name, fn in CALLS.items() if name != "empty"}))
"""
)


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


# Counted in chunks of 1,000 calls, the buffer emptied between them (as the pipeline keeps it small).
_COUNT = (
    _SETUP
    + """
what, n = sys.argv[1], int(sys.argv[2])
for _ in range(n // 1000):
    CALLS[what](1000)
    buf.clear()
"""
)


def _collected(tree: str, what: str, n: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={tmp}/out",
                sys.executable,
                "-c",
                _COUNT,
                what,
                str(n),
            ],
            cwd=tree,
            capture_output=True,
            text=True,
            check=True,
            # One thread and one hash seed: numpy's OpenBLAS threads (imported with the package) spin a
            # varying number of instructions, and string hashes change dict probing from run to run.
            env={**os.environ, "PYTHONPATH": tree, "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1"},
        )
    return int(re.search(r"Collected : (\d+)", p.stderr).group(1))


def instructions(tree: str, what: str, n: int = 20000) -> float:
    """Instructions per call: a run of 2n calls less a run of n, over n (start-up cancels out)."""
    return (_collected(tree, what, 2 * n) - _collected(tree, what, n)) / n


def callgrind(base: str) -> None:
    print("| hot-path call | base instructions per call | this tree | this / base | base x floor | this x floor |")
    print("|---|---|---|---|---|---|")
    counts = {
        t: {w: instructions(t, w) for w in ("empty", "floor", "phase enter/exit", "step enter/exit", "log(1 value)")}
        for t in (base, ROOT)
    }
    net = {t: {w: c - counts[t]["empty"] for w, c in counts[t].items()} for t in counts}
    for what in ("phase enter/exit", "step enter/exit", "log(1 value)", "floor"):
        b, t = net[base][what], net[ROOT][what]
        print(
            f"| {what} | {b:.0f} | {t:.0f} | {t / b:.3f} | {b / net[base]['floor']:.2f} | {t / net[ROOT]['floor']:.2f} |"
        )


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
    print("| hot-path call | base ns | this tree ns | this / base | base x floor | this x floor |")
    print("|---|---|---|---|---|---|")
    med = {k: {name: statistics.median(r[name] for r in v) for name in v[0]} for k, v in runs.items()}
    for name in med["base"]:
        b, t = med["base"][name], med["this"][name]
        print(
            f"| {name} | {b:.0f} | {t:.0f} | {t / b:.2f} | {b / med['base']['floor']:.2f} | {t / med['this']['floor']:.2f} |"
        )


if __name__ == "__main__":
    main()

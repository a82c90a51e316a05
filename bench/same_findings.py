"""Are the findings the same before and after a change? A/B of two source trees on the same inputs.

For a refactor that must not change what the detectors say: every input is analyzed by
``python -m telemetry analyze PATH --json`` (and the text report) with the base tree on PYTHONPATH and
again with this tree, and the outputs are compared byte for byte; ``telemetry diff`` runs on
neighbouring pairs of run directories. Inputs: the simulated scenarios of bench/detectors/scenarios.py
(tables made once, by this tree's simulator, and the base tree's simulator checked to make the same
ones), the corpus traces in ../shared/corpora, and any run directories given (keep some with
``bench/detectors/evaluate.py --keep DIR``).

    git worktree add /tmp/base <commit>
    python bench/same_findings.py --base /tmp/base --runs runs/kept/*   # exit 1 when anything differs
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CORPUS = os.path.join(os.path.dirname(ROOT), "shared", "corpora", "straggler-analysis")

_SIM = """
import hashlib, sys
sys.path.insert(0, {bench!r})
from detectors.scenarios import SCENARIOS
try:
    from telemetry.demo.simulate import simulate
except ImportError:
    from telemetry.simulate import simulate
for i, (sc, _) in enumerate(SCENARIOS):
    t = simulate(sc)
    if {out!r}:
        t.to_parquet(f"{out}/sim-{{i:02d}}.parquet", index=False)
    print(i, hashlib.sha256(t.to_csv(index=False).encode()).hexdigest())
"""


def run(tree: str, args: list[str]) -> str:
    p = subprocess.run(
        [sys.executable, *args],
        cwd=tree,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": tree, "PYTHONHASHSEED": "0"},
    )
    return f"exit {p.returncode}\n{p.stdout}\n--- stderr ---\n{p.stderr}"


def simulated(tree: str, out: str) -> str:
    """Hashes of the simulated tables ``tree`` makes (and the tables, into ``out`` when given)."""
    return run(tree, ["-c", _SIM.format(bench=os.path.join(tree, "bench"), out=out)])


def _third(run: str) -> int:
    """A window of about a third of the run's rows (at least 1,000, the flag's least): three windows."""
    from telemetry.store.segments import step_range

    span = step_range(run)
    return max(1000, (span[2] * (span[1] - span[0] + 1)) // 3) if span else 1000


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="the source tree to compare against (a git worktree)")
    ap.add_argument("--runs", nargs="*", default=[], help="run directories to analyze too")
    ap.add_argument("--out", default=None, help="write the result as the section of bench/RESULTS.md")
    args = ap.parse_args()
    different: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        if simulated(ROOT, tmp) != simulated(args.base, ""):
            different.append("the simulator's tables")
        inputs = sorted(glob.glob(os.path.join(tmp, "*.parquet")))
        inputs += sorted(glob.glob(os.path.join(CORPUS, "trace-*.parquet"))) + list(args.runs)
        jobs = [["-m", "telemetry", "analyze", p, "--json"] for p in inputs]
        jobs += [["-m", "telemetry", "analyze", p] for p in inputs]
        jobs += [["-m", "telemetry", "diff", a, b, "--json"] for a, b in zip(args.runs, args.runs[1:])]
        # the options that change what is read or how it is judged, on each run directory
        for p in args.runs:
            jobs += [
                ["-m", "telemetry", "analyze", p, "--json", "--steps", "40:150"],
                ["-m", "telemetry", "analyze", p, "--json", "--last", "60"],
                ["-m", "telemetry", "analyze", p, "--json", "--window-rows", str(_third(p))],
                ["-m", "telemetry", "analyze", p, "--json", "--raw"],
                ["-m", "telemetry", "analyze", p, "--json", "--busy-bound", "0.95", "--hang-after", "4"],
            ]
        jobs += [["-m", "telemetry", "analyze", a, "--json", "--base", b] for a, b in zip(args.runs, args.runs[1:])]
        for job in jobs:
            if run(ROOT, job) != run(args.base, job):
                different.append(" ".join(job[2:]))
        print(json.dumps({"inputs": len(inputs), "commands": len(jobs), "different": different}, indent=1))
    if args.out:
        sys.path.insert(0, HERE)
        from results import update_section

        base = subprocess.run(["git", "-C", args.base, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        update_section(
            args.out,
            "Same findings before and after (bench/same_findings.py)",
            f"`python bench/same_findings.py --base <worktree at {base.stdout.strip() or '?'}> --runs ...` at "
            f"{head.stdout.strip() or '?'}: {len(inputs)} inputs ({len(args.runs)} real demo runs, the simulated "
            f"scenarios, the corpus), {len(jobs)} commands (`analyze --json`, `analyze`, `diff --json`; on each run "
            "`--steps`, `--last`, `--window-rows`, `--raw`, other bounds, `--base`): "
            + (f"{len(different)} differ: {', '.join(different)}." if different else "every output byte-identical."),
        )
    return 1 if different else 0


if __name__ == "__main__":
    sys.exit(main())

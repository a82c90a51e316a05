"""Traces that nest (issue 29's "done when"): a real 2-rank job (the demo: torch.distributed over gloo,
a straggler injected on rank 1's forward) sends its spans to a real OTLP/HTTP receiver that decodes the
protobuf (tests/helpers/otlp_receiver.py). Reported: spans and traces received; children outside
their parent within a rank (and by how much); rank spans outside their step's root (and by how much);
roots built from every rank's extents against rank 0's own; traces per step and ranks in each; the
straggler finding's trace ids (``telemetry analyze RUN --json``) found among the received traces.

    python bench/trace_shapes.py [--steps 200] [--out bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from results import update_section  # noqa: E402 - after the sys.path set-up above

from tests.helpers.otlp_receiver import Receiver  # noqa: E402 - after the sys.path set-up above


def outside_ms(child: dict, parent: dict) -> float:
    """How far ``child`` reaches outside ``parent``, in ms (0 when inside)."""
    return max(0.0, parent["start"] - child["start"], child["end"] - parent["end"]) / 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--out", help="update this results file (section 'Traces that nest')")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = os.path.join(tmp, "run")
        with Receiver() as rcv:
            env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": rcv.url, "TELEMETRY_SINKS": "store,otlp"}
            cmd = [sys.executable, "-m", "telemetry", "demo", "--ranks", "2", "--steps", str(args.steps)]
            cmd += ["--run-dir", run, "--inject", "straggler:rank=1,phase=forward,factor=4", "--json"]
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
            if proc.returncode not in (0, 1):
                print(proc.stderr[-3000:], file=sys.stderr)
                return 1
            spans = list(rcv.spans)
        analysis = subprocess.run(
            [sys.executable, "-m", "telemetry", "analyze", run, "--json"], cwd=ROOT, capture_output=True, text=True
        )
        findings = json.loads(analysis.stdout)["findings"]
    by_id = {(s["resource"]["training.rank"], s["span_id"]): s for s in spans}
    children = [s for s in spans if s["parent"] and (s["resource"]["training.rank"], s["parent"]) in by_id]
    child_out = [outside_ms(c, by_id[(c["resource"]["training.rank"], c["parent"])]) for c in children]
    roots = {s["trace_id"]: s for s in spans if s["name"] == "train.step"}
    rank_steps = [s for s in spans if s["name"] == "train.rank_step"]
    root_out = [outside_ms(s, roots[s["trace_id"]]) for s in rank_steps if s["trace_id"] in roots]
    orphans = sum(s["trace_id"] not in roots for s in rank_steps)
    full = sum(r["attributes"].get("training.root_ranks") == 2 for r in roots.values())
    ranks_of: dict[str, set] = {}
    for s in rank_steps:
        ranks_of.setdefault(s["trace_id"], set()).add(s["resource"]["training.rank"])
    straggler = [f for f in findings if f["kind"] == "straggler" and f["ranks"] == [1]]
    ids = straggler[0]["trace_ids"] if straggler else []
    found = sum(i in roots for i in ids)
    cmd = f"python bench/trace_shapes.py --steps {args.steps}"
    body = f"""Command: `{cmd}` (a real 2-rank demo over gloo, straggler:rank=1,phase=forward,factor=4, to a
real OTLP/HTTP receiver decoding the protobuf).

| measure | value |
|---|---|
| spans received / traces | {len(spans):,} / {len(roots):,} |
| children (within a rank) outside their parent | {sum(x > 0 for x in child_out)} of {len(children):,} (max {max(child_out, default=0):.3f} ms) |
| rank spans outside their step's root | {sum(x > 0 for x in root_out)} of {len(rank_steps):,} (max {max(root_out, default=0):.3f} ms); without a root: {orphans} |
| roots from both ranks' extents / rank 0's own | {full} / {len(roots) - full} |
| traces with both ranks' spans | {sum(r == {0, 1} for r in ranks_of.values())} of {len(ranks_of)} ({args.steps} steps) |
| straggler finding's trace ids held by the receiver | {found} of {len(ids)} |

Done when (issue 29): no child outside its parent within a rank; every rank's span inside its
step's root within 5 ms; a straggler finding lists trace ids that the receiver holds.
"""
    print(body)
    if args.out:
        update_section(args.out, "Traces that nest", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Does online detection name the phase offline analysis names? (issue 23: at least 95% of straggler
scenarios.)

For each simulated scenario with a straggler, the table goes through online detection's own code
path: each rank's rows become step records, each rank's BlockSummarizer packs blocks of ``every``
steps into summary vectors (medians), rank 0's block_table builds the window's table from them, and
analyze_blocks() runs on it as the online thread runs it. Its straggler findings'
phases are compared with offline analysis' on the full table.

    python bench/detectors/online_phase.py          (evaluate.py calls score_online for RESULTS.md)
"""

from __future__ import annotations

import math

import numpy as np

from telemetry.analysis.detectors import analyze
from telemetry.analysis.detectors.blocks import analyze_blocks
from telemetry.online.table import PhaseNames, block_table
from telemetry.online.wire import Block, BlockSummarizer
from telemetry.pipeline.records import StepRecord


def records_by_rank(table) -> dict[int, list[StepRecord]]:
    """The steps table's rows as each rank's pipeline would have handed them on."""
    phases = [
        c[:-2]
        for c in table.columns
        if c.endswith("_s") and "." not in c and c not in ("start_s", "duration_s", "comm_s")
    ]
    out: dict[int, list[StepRecord]] = {}
    for rank, rows in table.sort_values(["rank", "step"]).groupby("rank"):
        recs = []
        cols = {c: rows[c].to_numpy() for c in rows.columns}
        for i in range(len(rows)):

            def v(c: str, i: int = i, cols: dict = cols) -> float:
                x = cols.get(c)
                return 0.0 if x is None or not math.isfinite(float(x[i])) else float(x[i])

            recs.append(
                StepRecord(
                    int(rank),
                    int(cols["step"][i]),
                    float(cols["start_s"][i]),
                    float(cols["duration_s"][i]),
                    True,
                    {p: v(f"{p}_s") for p in phases},
                    {p: v(f"comm.{p}_s") for p in phases if f"comm.{p}_s" in cols},
                    v("comm_s"),
                    {},
                    None,
                    None,
                    {},
                    (),
                )
            )
        out[int(rank)] = recs
    return out


def online_table(table, every: int = 10, window: int = 200):
    """The table rank 0's online thread analyzes at the end of the run (the last ``window`` blocks)."""
    names = PhaseNames(int(table["rank"].max()) + 1)
    vectors: dict[int, dict[int, np.ndarray]] = {}
    for rank, recs in records_by_rank(table).items():
        s = BlockSummarizer(every)
        for vec in s.add(recs):
            vectors.setdefault(int(vec[0]), {})[rank] = vec
        names.learn(rank, s.phases or ())
    blocks = [(b, Block.of(vectors[b])) for b in sorted(vectors)[-window:]]
    return block_table(blocks, names, every)


def online_findings(table, every: int = 10):
    return analyze_blocks(online_table(table, every)).findings


def score_online(scenarios) -> dict:
    """Per straggler scenario: the phases offline and online name for the expected straggler rank(s)."""
    rows = []
    for sc, expect in scenarios:
        wanted = [e for e in expect if e.kind == "straggler" and e.ranks]
        if not wanted or sc.ranks > 256:
            continue
        from telemetry.demo.simulate import simulate

        table = simulate(sc)
        offline = [f for f in analyze(table).findings if f.kind == "straggler"]
        online = [f for f in online_findings(table) if f.kind == "straggler"]
        for e in wanted:
            off = next((f.phase for f in offline if sorted(f.ranks) == sorted(e.ranks)), "not found")
            on = next((f.phase for f in online if sorted(f.ranks) == sorted(e.ranks)), "not found")
            rows.append({"scenario": sc.name, "ranks": list(e.ranks), "offline": off, "online": on})
    both = [r for r in rows if r["offline"] != "not found" and r["online"] != "not found"]
    same = sum(r["offline"] == r["online"] for r in both)
    return {"rows": rows, "compared": len(both), "same": same}


def score_online_regressions(scenarios) -> dict:
    """Online detection's job-wide regressions: found in the scenarios that expect one, raised (at warning
    or above) in those that do not."""
    from telemetry.demo.simulate import simulate

    found, missed, false = [], [], []
    for sc, expect in scenarios:
        if sc.ranks > 256:
            continue
        wants = any(e.kind == "regression" for e in expect)
        got = any(f.kind == "regression" and f.severity != "info" for f in online_findings(simulate(sc)))
        if wants:
            (found if got else missed).append(sc.name)
        elif got:
            false.append(sc.name)
    return {"found": found, "missed": missed, "false": false}


def score_further_rises(scenarios) -> dict:
    """Further rises (online/detector.further_rise): each job-wide finding at warning or above that
    online detection holds at the end of a scenario, searched again from its own first step. Raised
    where a scenario's job slows again inside a change that lasts (a staircase), and nowhere else."""
    from telemetry.analysis.traces.captures import JOB_WIDE
    from telemetry.demo.simulate import simulate
    from telemetry.online.detector import further_rise

    raised = []
    for sc, _ in scenarios:
        if sc.ranks > 256:
            continue
        table = online_table(simulate(sc))
        ongoing = [f for f in analyze_blocks(table).findings if f.kind in JOB_WIDE and not f.ranks]
        rises = [g for f in ongoing if f.severity != "info" for g in [further_rise(table, f)] if g is not None]
        if rises:
            raised.append((sc.name, [(g.kind, g.phase, g.first_step) for g in rises]))
    return {"raised": raised}


if __name__ == "__main__":
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from scenarios import SCENARIOS

    res = score_online(SCENARIOS)
    for r in res["rows"]:
        print(r)
    print(f"same phase: {res['same']} of {res['compared']} found both ways")
    print(score_online_regressions(SCENARIOS))
    print(score_further_rises(SCENARIOS))

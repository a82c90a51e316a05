"""Several ranks' traces of the same steps (a capture, a directory of Kineto traces) held together:
each collective's time split into the wait for the latest rank to arrive and the transfer after it (the
k-th instance of a collective on one rank against the k-th on the others; the traces must share a clock:
one host, or synchronized hosts), the ranks' breakdowns summarized, and said as text.
"""

from __future__ import annotations

import os
from typing import Any

from .breakdown import Breakdown, breakdown


def split_waits(parts: dict[int, Breakdown]) -> dict[str, Any]:
    """Each collective's time on each rank split into the wait for the latest of these ranks to
    arrive and the transfer after it: {"ranks": {rank: {collective: {"wait_us", "transfer_us",
    "count"}}}, "matched": n} or {"note": why not}."""
    ranks = sorted(parts)
    if len(ranks) < 2:
        return {"note": "one trace: the wait for peers needs two or more ranks' traces of the same steps"}
    out: dict[int, dict[str, dict[str, float]]] = {r: {} for r in ranks}
    matched = disjoint = 0
    colls = set.intersection(*(set(parts[r].instances) for r in ranks))
    for coll in sorted(colls):
        n = min(len(parts[r].instances[coll]) for r in ranks)
        for k in range(n):
            inst = {r: parts[r].instances[coll][k] for r in ranks}
            latest = max(v[0] for v in inst.values())
            if latest >= min(v[1] for v in inst.values()):
                disjoint += 1  # one rank ended before another began: not one collective, or no shared clock
                continue
            matched += 1
            for r, (ts, end, _b) in inst.items():
                wait = min(max(latest - ts, 0.0), end - ts)
                d = out[r].setdefault(coll, {"wait_us": 0.0, "transfer_us": 0.0, "count": 0})
                d["wait_us"] += wait
                d["transfer_us"] += (end - ts) - wait
                d["count"] += 1
    if matched == 0:
        return {
            "note": "no collective instance overlaps across these traces: they do not share a clock "
            "(other hosts) or are not of the same steps"
        }
    for r in ranks:
        for d in out[r].values():
            d["wait_us"], d["transfer_us"] = round(d["wait_us"], 3), round(d["transfer_us"], 3)
    return {"ranks": {str(r): out[r] for r in ranks}, "matched": matched, "unmatched": disjoint}


def summarize(parts: dict[int, Breakdown], kernels: int = 10) -> dict[str, Any]:
    """Several ranks' breakdowns as the findings JSON and ``summary.trace_breakdown`` hold them:
    {"ranks": {rank: breakdown (top ``kernels`` kernels and ops)}, "waits": :func:`split_waits`}."""
    ranks = {}
    for r, b in sorted(parts.items()):
        d = b.to_dict()
        d["kernels"], d["ops"] = d["kernels"][:kernels], d["ops"][:kernels]
        d["path"] = os.path.basename(d["path"])
        ranks[str(r)] = d
    return {"ranks": ranks, "waits": split_waits(parts)}


def trace_dir_breakdown(path: str, ranks: dict[int, dict[str, Any]], warnings: list[str]) -> dict[str, Any]:
    """``summary.trace_breakdown`` of a directory of Kineto traces: each rank's trace broken down and the
    collectives' wait for late peers across them; a trace that does not read is said in ``warnings``."""
    from ...steptable.table import TableError

    parts = {}
    for rank, info in sorted(ranks.items()):
        if not info.get("trace"):
            continue
        try:
            parts[rank] = breakdown(os.path.join(path, info["trace"]))
        except (TableError, OSError) as exc:  # a trace that does not read, or no room to spill it
            warnings.append(f"trace breakdown of rank {rank}: {exc}")
    return summarize(parts)


def breakdown_text(b: dict[str, Any], brief: bool = False) -> str:
    """A breakdown (:meth:`Breakdown.to_dict`) as the report prints it; ``brief``: its first line."""
    who = f"rank {b['rank']}" if b.get("rank") is not None else os.path.basename(b["path"])
    t = b["temporal"]
    if not t:
        return f"{who}: no GPU activity and no CPU operators in the trace"
    steps = f"steps {b['steps'][0]}-{b['steps'][-1]}" if b["steps"] else "the whole trace"
    lines = [
        f"{who} ({b['device']}, {steps}"
        + (f"; step {b['dropped_steps'][0]} left out, as HTA does" if b["dropped_steps"] else "")
        + f"): span {t['span_us'] / 1e3:.2f} ms: compute {t['compute_pct']:.1f}%, "
        f"non-compute {t['non_compute_pct']:.1f}% (communication {t.get('communication_us', 0) / 1e3:.2f} ms, "
        f"memory {t.get('memory_us', 0) / 1e3:.2f} ms), idle {t['idle_pct']:.1f}%"
    ]
    if brief:
        return lines[0]
    if b["overlap_pct"] is not None:
        lines.append(f"  communication hidden under compute: {b['overlap_pct']:.1f}%")
    i = b["idle"]
    if i:
        lines.append(
            f"  idle: host wait {i['host_wait_pct']:.1f}%, kernel wait {i['kernel_wait_pct']:.1f}%, other {i['other_pct']:.1f}%"
        )
    la = b["launch"]
    if la.get("count"):
        lines.append(
            f"  launches: {la['count']}, call {la['call_us_mean']:.1f} µs mean, delay p50 {la['delay_us_p50']:.1f} / "
            f"p95 {la['delay_us_p95']:.1f} µs; {la['shorter_than_call']} kernels shorter than their launch call"
        )
    for k in b["kernels"][:5]:
        lines.append(f"  kernel {k['total_us'] / 1e3:9.3f} ms {k['count']:>6}x  {k['name'][:100]}")
    for k in b["ops"][:5]:
        lines.append(f"  op     {k['ms_per_step']:9.3f} ms/step {k['count']:>6}x  {k['name'][:100]}")
    for c in b["collectives"]:
        bw = f", bus {c['busbw_GBps']:.2f} GB/s" if "busbw_GBps" in c else ""
        lines.append(f"  collective {c['name']}: {c['count']}x, {c['time_us'] / 1e3:.3f} ms, {c['bytes']} bytes{bw}")
    return "\n".join(lines)


def waits_text(waits: dict[str, Any]) -> list[str]:
    """:func:`split_waits` as report lines."""
    if "ranks" not in waits:
        return [f"  collectives' wait for peers: {waits.get('note', 'not measured')}"] if waits.get("note") else []
    out = []
    for r, colls in waits["ranks"].items():
        for name, d in colls.items():
            out.append(
                f"  rank {r} {name}: {d['count']}x, waiting for the latest rank {d['wait_us'] / 1e3:.2f} ms, "
                f"transfer {d['transfer_us'] / 1e3:.2f} ms"
            )
    return out

"""``telemetry history``: many runs in time order, and the runs after which something changed."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .common import EXIT_FAIL_ON, EXIT_OK, EXIT_USAGE


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.2f}"


def cmd_history(args: argparse.Namespace) -> int:
    from ..analysis.history.explain import explain_changes
    from ..analysis.history.runs import HistoryParams, find_runs, history, run_summary

    runs = find_runs(args.paths)
    if not runs:
        print(
            f"telemetry history: no run directory in {', '.join(args.paths)} (a run directory holds meta.json "
            "or ranks/)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    summaries, skipped = [], []
    for r in runs:
        try:
            summaries.append({**run_summary(r, refresh=args.refresh), "path": r})
        except Exception as exc:  # noqa: BLE001 - one unreadable run must not hide the others: said
            skipped.append(f"{r}: {type(exc).__name__}: {exc}")
    params = HistoryParams(alpha=args.alpha, min_change=args.min_change)
    doc = history(summaries, by=args.by, metrics=tuple(args.metric) if args.metric else None, params=params)
    if not args.no_diff:
        explain_changes(doc)
    doc["notes"] += [f"skipped {s}" for s in skipped]
    regressed = [c for c in doc["changes"] if c["regression"]]
    if args.json:
        print(json.dumps(doc, indent=2, default=str))
    else:
        print(f"{len(doc['runs'])} runs, {len(doc['groups'])} group(s)")
        print(
            f"{'run':>4}  {'start (UTC)':<16}  {'commit':<12}  {'ranks':>5}  {'step ms':>8}  {'tokens/s':>10}  phases (ms)"
        )
        for r in doc["runs"]:
            start = time.strftime("%Y-%m-%d %H:%M", time.gmtime(r["start_time_s"])) if r.get("start_time_s") else "-"
            m = r["metrics"]
            tok = f"{m['tokens_per_s']:,.0f}" if m.get("tokens_per_s") else "-"
            ph = ", ".join(f"{k[:-2]} {_ms(v)}" for k, v in r["phases"].items())
            kinds = sorted({f["kind"] for f in r["findings"]})
            print(
                f"{r['n']:>4}  {start:<16}  {str(r.get('commit') or '-')[:12]:<12}  {r['world_size']:>5}  "
                f"{_ms(m.get('step_time_s')):>8}  {tok:>10}  {ph}" + (f"  [{', '.join(kinds)}]" if kinds else "")
            )
        if doc["changes"]:
            print("changes:")
            changes = doc["changes"]
            for i, c in enumerate(changes):
                what = "slower" if c["regression"] else "better"
                print(
                    f"  from run {c['n']} ({c['runs'][1]}, commit {str(c['commits'][1] or '-')[:12]}): "
                    f"{c['metric']} {c['change']:+.1%} ({what}; {c['before']:.6g} -> {c['after']:.6g}, p={c['p']:.4f})"
                )
                nxt = changes[i + 1] if i + 1 < len(changes) else None
                if nxt is not None and (nxt["n"], nxt["group"], nxt["regression"]) == (
                    c["n"],
                    c["group"],
                    c["regression"],
                ):
                    continue  # the runs either side said once, after the last series that changed there alike
                _print_either_side(c.get("diff") or {})
        else:
            print("changes: none")
        for n in doc["notes"]:
            print(f"note: {n}")
    if args.fail_on == "regression" and regressed:
        return EXIT_FAIL_ON
    return EXIT_OK


def _print_either_side(d: dict) -> None:
    """What moved across a change: the series over the runs either side, the two runs' steps compared,
    their captures of a common rank compared, and the command that compares the two runs."""
    from ..analysis.history.explain import slower_and_faster

    moved = ", ".join(f"{r['metric']} {r['change']:+.1%}" for r in d.get("series", [])[:4])
    print(f"      runs {len(d.get('before_runs', []))} before -> {len(d.get('after_runs', []))} after: {moved}")
    for f in (d.get("steps") or {}).get("findings", [])[:3]:
        print(f"      the runs either side, {f['kind']}: {f['evidence']}")
    cap = d.get("captures")
    if cap:
        slow, fast = slower_and_faster(cap)
        more = "; ".join(
            f"{r['kind']} {r['name']} +{r['flagged_ms_per_step'] - r['peer_ms_per_step']:.3f} ms/step"
            for r in d["trace_diff"][:3]
        )
        print(
            f"      rank {slow['rank']}'s captures, the slower run ({os.path.basename(slow['run'])}, steps "
            f"{slow['steps'][0]}-{slow['steps'][1]}) against the faster ({os.path.basename(fast['run'])}, "
            f"steps {fast['steps'][0]}-{fast['steps'][1]}): " + (more or "nothing takes longer per step")
        )
    for n in d.get("notes", []):
        print(f"      ({n})")
    if d.get("command"):
        print(f"      steps, ops and collectives: {d['command']}")

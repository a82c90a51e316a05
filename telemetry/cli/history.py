"""``telemetry history``: many runs in time order, and the runs after which something changed."""

from __future__ import annotations

import argparse
import json
import sys
import time

from .common import EXIT_FAIL_ON, EXIT_OK, EXIT_USAGE


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.2f}"


def cmd_history(args: argparse.Namespace) -> int:
    from ..analysis.history import HistoryParams, find_runs, history, run_summary

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
            for c in doc["changes"]:
                what = "slower" if c["regression"] else "better"
                print(
                    f"  from run {c['run']} ({c['runs'][1]}, commit {str(c['commits'][1] or '-')[:12]}): "
                    f"{c['metric']} {c['change']:+.1%} ({what}; {c['before']:.6g} -> {c['after']:.6g}, p={c['p']:.4f})"
                )
                d = c.get("diff") or {}
                moved = ", ".join(f"{r['metric']} {r['change']:+.1%}" for r in d.get("series", [])[:4])
                print(
                    f"      runs {len(d.get('before_runs', []))} before -> {len(d.get('after_runs', []))} after: {moved}"
                )
                if d.get("command"):
                    print(f"      steps, ops and collectives: {d['command']}")
        else:
            print("changes: none")
        for n in doc["notes"]:
            print(f"note: {n}")
    if args.fail_on == "regression" and regressed:
        return EXIT_FAIL_ON
    return EXIT_OK

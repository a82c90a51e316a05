"""The ``telemetry`` command: demo, analyze, diff, export."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Iterable, Sequence

from .analysis.findings import SEVERITIES


def _positive_int(lo: int, hi: int):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{v} is out of range; accepted: {lo} to {hi}")
        return v
    return parse


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{v} must be above 0")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="telemetry", description="Telemetry for distributed PyTorch training.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    d = sub.add_parser("demo", help="run a real multi-rank training job, instrumented, then analyze it")
    d.add_argument("--ranks", type=_positive_int(2, 16), default=4, help="ranks (processes), 2-16 (default 4)")
    d.add_argument("--steps", type=_positive_int(20, 100000), default=200, help="training steps (default 200)")
    d.add_argument("--run-dir", help="run directory (default runs/demo-<date>-<time>)")
    d.add_argument("--inject", action="append", default=[], metavar="SPEC",
                   help="a fault: straggler:rank=R,phase=P,factor=F[,start=S] | data_stall:rank=R,delay_ms=D[,start=S] "
                        "| regression:factor=F,start=S[,phase=P] | slow_comm:factor=F[,start=S] | hang:rank=R,step=S")
    d.add_argument("--overwrite", action="store_true", help="replace an existing --run-dir")
    d.add_argument("--hang-after", type=_seconds, help="seconds without a finished step that count as a hang "
                   "(default: 30x the median step, at least 10)")
    d.add_argument("--json", action="store_true", help="print the findings JSON instead of the report")

    a = sub.add_parser("analyze", help="find stragglers and hangs in a run directory or steps table")
    a.add_argument("path", help="run directory, or a steps table (.csv / .parquet)")
    a.add_argument("--json", action="store_true", help="print the findings JSON")
    a.add_argument("--hang-after", type=_seconds, help="hang bound in seconds (default: learned)")
    a.add_argument("--fail-on", choices=SEVERITIES, help="exit 3 when a finding reaches this severity")

    df = sub.add_parser("diff", help="compare two runs or steps tables: regressions by phase")
    df.add_argument("base", help="the run to compare against (run directory, .csv, .parquet)")
    df.add_argument("new", help="the run under test")
    df.add_argument("--json", action="store_true", help="print the findings JSON")
    df.add_argument("--min-effect", type=float, default=0.05, help="smallest change reported (default 0.05 = 5%%)")
    df.add_argument("--fail-on", choices=SEVERITIES, help="exit 3 when a regression reaches this severity")

    e = sub.add_parser("export", help="write a run's steps table, or its timeline for Perfetto")
    e.add_argument("run_dir")
    e.add_argument("--to", required=True, metavar="FILE",
                   help="FILE.parquet or FILE.csv (steps table), FILE.json (Chrome/Perfetto trace)")
    e.add_argument("--steps", metavar="A:B", help="trace only steps A to B (inclusive; either may be empty)")
    return p


def _print_analysis(path: str, as_json: bool, hang_after: float | None, extra: dict | None = None):
    from .analysis.load import open_input
    from .analysis.report import render
    from .analysis.detectors import StragglerParams, analyze

    run = open_input(path)
    result = analyze(run.table, run.progress, run.world_size, hang_after)
    if as_json:
        doc = result.to_json()
        if extra:
            doc["summary"].update(extra)
        if run.warnings:
            doc["summary"]["warnings"] = run.warnings
        print(json.dumps(doc, indent=2))
    else:
        n = result.summary.get("steps", 0)
        print(render(result, path, StragglerParams().warmup(n), run.warnings))
    return result


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo.faults import InjectError, check_against_job, parse_inject
    from .demo.launcher import DemoError, log_tail, run_demo

    try:
        faults = [parse_inject(s) for s in args.inject]
        check_against_job(faults, args.ranks, args.steps)
    except InjectError as exc:
        print(f"telemetry demo: {exc}", file=sys.stderr)
        return 2
    run_dir = args.run_dir or os.path.join("runs", time.strftime("demo-%Y%m%d-%H%M%S"))
    out = sys.stderr if args.json else sys.stdout
    what = ", ".join(args.inject) if args.inject else "no fault injected"
    print(f"telemetry demo: {args.ranks} ranks (gloo on 127.0.0.1), {args.steps} steps, {what}\n"
          f"  run directory: {run_dir}", file=out, flush=True)
    try:
        result = run_demo(args.ranks, args.steps, run_dir, faults, overwrite=args.overwrite, out=out,
                          hang_after_s=args.hang_after)
    except DemoError as exc:
        print(f"telemetry demo: {exc}", file=sys.stderr)
        return 2
    print(f"  job {result.outcome} in {result.wall_s:.1f} s"
          + (f": {result.message}" if result.message else ""), file=out, flush=True)
    if result.outcome == "failed":
        for r, code in sorted(result.exit_codes.items()):
            if code not in (0, None):
                print(f"--- rank {r} log (last lines) ---\n{log_tail(run_dir, r)}", file=sys.stderr)
    print(file=out)
    _print_analysis(run_dir, args.json, result.hang_bound_s or args.hang_after,
                    extra={"demo": {"outcome": result.outcome, "injected": args.inject, "run_dir": run_dir}})
    return 1 if result.outcome == "failed" else 0


def cmd_analyze(args: argparse.Namespace) -> int:
    from .analysis.table import TableError

    try:
        result = _print_analysis(args.path, args.json, args.hang_after)
    except TableError as exc:
        print(f"telemetry analyze: {exc}", file=sys.stderr)
        return 2
    return _exit_code((f.severity for f in result.findings), args.fail_on)


def cmd_diff(args: argparse.Namespace) -> int:
    from .analysis.load import open_input
    from .analysis.table import TableError
    from .analysis.detectors.diff import DiffParams, diff

    if not 0 < args.min_effect < 1:
        print(f"telemetry diff: --min-effect {args.min_effect}; accepted: a fraction above 0 and below 1, "
              "e.g. 0.05 for 5%", file=sys.stderr)
        return 2
    try:
        base, new = open_input(args.base).table, open_input(args.new).table
    except TableError as exc:
        print(f"telemetry diff: {exc}", file=sys.stderr)
        return 2
    if not len(base) or not len(new):
        print("telemetry diff: a run with no steps cannot be compared", file=sys.stderr)
        return 2
    doc = diff(base, new, DiffParams(min_effect=args.min_effect))
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        s = doc["summary"]
        print(f"{args.base} -> {args.new}: step {s['base_step_s'] * 1e3:.2f} ms -> {s['new_step_s'] * 1e3:.2f} ms "
              f"({s['step_change']:+.1%})")
        print("  series        base ms     new ms    change        p")
        for name, c in sorted(s["series"].items()):
            print(f"  {name:<12} {c['base_s'] * 1e3:8.2f}   {c['new_s'] * 1e3:8.2f}   {c['change']:+7.1%}   {c['p']:.1e}")
        if not doc["findings"]:
            print(f"No significant change of {s['min_effect']:.0%} or more.")
        for f in doc["findings"]:
            print(f"  [{f['severity']}] {f['kind']}: {f['evidence']}")
    return _exit_code((f["severity"] for f in doc["findings"] if f["kind"] == "regression"), args.fail_on)


def _exit_code(severities: Iterable[str], fail_on: str | None) -> int:
    """3 when ``--fail-on`` was given and one of ``severities`` reaches it, else 0."""
    if fail_on and any(SEVERITIES.index(s) >= SEVERITIES.index(fail_on) for s in severities):
        return 3
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from .analysis.exports import export_for, export_suffixes
    from .analysis.load import RUN_DIR, open_input
    from .analysis.table import TABLE_OUTPUTS, TableError, write_table

    try:
        first, last = _step_range(args.steps)
    except ValueError as exc:
        print(f"telemetry export: {exc}", file=sys.stderr)
        return 2
    try:
        run = open_input(args.run_dir)
        if run.kind != RUN_DIR:
            raise TableError(f"{args.run_dir!r} is not a run directory; accepted: a run directory")
        export = None if args.to.lower().endswith(TABLE_OUTPUTS) else export_for(args.to)
        if export is not None:
            print(export.write(run, args.to, first, last))
            return 0
        if not args.to.lower().endswith(TABLE_OUTPUTS):
            raise TableError(f"{args.to!r}: unknown output type; accepted: .csv or .parquet (steps table), "
                             + ", ".join(export_suffixes()) + " (trace)")
        if args.steps:
            print("telemetry export: --steps applies to a trace only", file=sys.stderr)
            return 2
        write_table(run.table, args.to)
    except (TableError, OSError) as exc:
        print(f"telemetry export: {exc}", file=sys.stderr)
        return 2
    table = run.table
    print(f"wrote {len(table)} rows ({table['rank'].nunique() if len(table) else 0} ranks) to {args.to}")
    return 0


def _step_range(text: str | None) -> tuple[int | None, int | None]:
    if not text:
        return None, None
    a, sep, b = text.partition(":")
    try:
        first = int(a) if a.strip() else None
        last = int(b) if b.strip() else None
    except ValueError:
        raise ValueError(f"--steps {text!r}: accepted A:B with integers, e.g. 100:200, 100: or :50") from None
    if not sep:
        last = first
    if first is not None and last is not None and last < first:
        raise ValueError(f"--steps {text!r}: the end is before the start")
    return first, last


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")  # the CLI is an application
    args = build_parser().parse_args(argv)
    handler = {"demo": cmd_demo, "analyze": cmd_analyze, "diff": cmd_diff, "export": cmd_export}[args.command]
    try:
        return handler(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

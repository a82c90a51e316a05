"""The ``telemetry`` command: demo, analyze, diff, export, dashboard, simulate, stack.

Exit codes: :mod:`telemetry.exitcodes` (the one list; ``--help`` prints it).
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import sys
import textwrap
import time
from typing import Iterable, Sequence

from .analysis.findings import SEVERITIES
from .demo.faults import SIMULATED, spec_help
from .exitcodes import ExitCode, epilog
from .version import __version__

EXIT_OK, EXIT_JOB_FAILED, EXIT_USAGE, EXIT_FAIL_ON, EXIT_JOB_HUNG, EXIT_OUTPUT, EXIT_INTERRUPTED = (
    ExitCode.OK,
    ExitCode.JOB_FAILED,
    ExitCode.USAGE,
    ExitCode.FAIL_ON,
    ExitCode.JOB_HUNG,
    ExitCode.OUTPUT,
    ExitCode.INTERRUPTED,
)
# An output that cannot be written: a full or read-only disk, a reader that went away (`| head`).
_OUTPUT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EPIPE, errno.EIO, errno.EROFS, errno.EFBIG)
EXIT_CODES = epilog()


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


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"{v}; accepted: a fraction above 0 and at most 1 (0.8 = 80%)")
    return v


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=90)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="telemetry",
        description=_wrap(
            "Telemetry for distributed PyTorch training: run the instrumented demo job, analyze a run for "
            "stragglers, data stalls, slow communication, regressions, memory growth and hangs, compare two "
            "runs, export a run."
        ),
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"telemetry {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    d = sub.add_parser("demo", help="run a real multi-rank training job, instrumented, then analyze it")
    d.add_argument("--ranks", type=_positive_int(2, 16), default=4, help="ranks (processes), 2-16 (default 4)")
    d.add_argument("--steps", type=_positive_int(20, 100000), default=200, help="training steps (default 200)")
    d.add_argument("--run-dir", help="run directory (default runs/demo-<date>-<time>)")
    d.add_argument(
        "--inject",
        action="append",
        default=[],
        metavar="SPEC",
        help="a fault: " + spec_help(),
    )
    d.add_argument("--overwrite", action="store_true", help="replace an existing --run-dir")
    d.add_argument(
        "--hang-after",
        type=_seconds,
        help="seconds without a finished step that count as a hang (default: 30x the median step, at least 10)",
    )
    d.add_argument("--json", action="store_true", help="print the findings JSON instead of the report")
    d.add_argument(
        "--busy-bound",
        type=_fraction,
        default=0.8,
        metavar="FRACTION",
        help="low_utilization: the busy share of the job's time under which a sustained stretch is "
        "a finding (default 0.8)",
    )

    a = sub.add_parser(
        "analyze",
        help="find what slows a run: stragglers, stalls, slow communication, regressions, hangs",
        description=_wrap(
            "Analyze a run directory, a steps table or a per-operation trace: a per-rank, "
            "per-phase table, then the findings (stragglers named by rank and phase, data "
            "stalls, stage and moving imbalance, regressions, slow communication, memory "
            "growth, hangs), each with its evidence and what-if cost."
        ),
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    a.add_argument(
        "path",
        help="run directory, a steps table or per-operation trace (.csv / .parquet), or "
        "a directory of per-rank PyTorch profiler traces (.json / .json.gz)",
    )
    a.add_argument("--json", action="store_true", help="print the findings JSON")
    a.add_argument("--hang-after", type=_seconds, help="hang bound in seconds (default: learned)")
    a.add_argument("--fail-on", choices=SEVERITIES, help="exit 3 when a finding reaches this severity")
    a.add_argument("--steps", metavar="A:B", help="analyze steps A to B only (inclusive; either may be empty)")
    a.add_argument("--last", type=_positive_int(1, 10**9), metavar="N", help="analyze the last N steps only")
    a.add_argument(
        "--window-rows",
        type=_positive_int(1000, 10**10),
        metavar="ROWS",
        help="a run directory larger than this many rows (ranks x steps) is analyzed in windows of "
        "steps and the findings merged (default 12,000,000: about 3.5 GiB at its peak)",
    )
    a.add_argument(
        "--busy-bound",
        type=_fraction,
        default=0.8,
        metavar="FRACTION",
        help="low_utilization: the busy share of the job's time (compute, device-timed or wall) under "
        "which a sustained stretch is a finding (default 0.8)",
    )

    df = sub.add_parser("diff", help="compare two runs or steps tables: regressions by phase")
    df.add_argument("base", help="the run to compare against (run directory, .csv, .parquet)")
    df.add_argument("new", help="the run under test")
    df.add_argument("--json", action="store_true", help="print the findings JSON")
    df.add_argument("--min-effect", type=float, default=0.05, help="smallest change reported (default 0.05 = 5%%)")
    df.add_argument("--fail-on", choices=SEVERITIES, help="exit 3 when a regression reaches this severity")
    df.add_argument(
        "--steps", metavar="A:B", help="compare steps A to B of each run only (inclusive; either may be empty)"
    )

    ds = sub.add_parser("dashboard", help="open the Streamlit dashboard on a run (no argument: choose among runs/)")
    ds.add_argument(
        "path",
        nargs="?",
        help="run directory or steps table (default: pick one of the run directories under runs/ in the page)",
    )
    ds.add_argument("--port", type=_positive_int(1, 65535), default=8501, help="port (default 8501)")
    ds.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    ds.add_argument(
        "--base", metavar="BASE", help="a second run or steps table for the Compare view (PATH against BASE)"
    )
    ds.add_argument(
        "--prometheus",
        metavar="URL",
        help="show a live job from this Prometheus server's HTTP API "
        "instead of a run directory (e.g. http://127.0.0.1:9090)",
    )
    ds.add_argument("--job", help="with --prometheus: the training job (default: choose in the page)")

    sm = sub.add_parser(
        "simulate",
        help="write a simulated run directory (with its ground truth) to try the tools or benchmark them at scale",
        description=_wrap(
            "Simulate a synchronous data-parallel job (telemetry.demo.simulate) and write it as a run "
            "directory through the run store's segment writer, with the injected faults in "
            "RUN_DIR/truth.json. No spans; eight ranks per node."
        ),
    )
    sm.add_argument("--ranks", type=_positive_int(2, 100000), required=True, help="ranks (2-100000)")
    sm.add_argument("--steps", type=_positive_int(10, 10_000_000), required=True, help="steps (10-10000000)")
    sm.add_argument("--out", required=True, metavar="RUN_DIR", help="the run directory to write")
    sm.add_argument(
        "--inject",
        action="append",
        default=[],
        metavar="SPEC",
        help="a fault, as for demo: " + spec_help(SIMULATED),
    )
    sm.add_argument("--seed", type=_positive_int(0, 2**31), default=0, help="random seed (default 0)")
    sm.add_argument("--overwrite", action="store_true", help="replace an existing run directory at --out")

    e = sub.add_parser("export", help="write a run's steps table, or its timeline for Perfetto")
    e.add_argument("run_dir", help="run directory, or a directory of PyTorch profiler traces (steps table only)")
    e.add_argument(
        "--to",
        required=True,
        metavar="FILE",
        help="FILE.parquet or FILE.csv (steps table), FILE.json (Chrome/Perfetto trace)",
    )
    e.add_argument("--steps", metavar="A:B", help="trace only steps A to B (inclusive; either may be empty)")

    st = sub.add_parser(
        "stack", help="write the monitoring stack (Prometheus, Alertmanager, Grafana, collector, compose)"
    )
    st_sub = st.add_subparsers(dest="stack_command", required=True, metavar="ACTION")
    si = st_sub.add_parser(
        "init",
        help="write the stack's files into DIR",
        description=_wrap(
            "Write the monitoring stack for this installed package into DIR: Prometheus (config, recording "
            "and alert rules, their promtool tests), Alertmanager, Grafana provisioning and dashboards, the "
            "OpenTelemetry Collector's config, a docker-compose.yml that runs them and the dashboard, and "
            "the Dockerfile of the dashboard's image. Your training job runs where you run it; the printed "
            "next steps say how Prometheus reaches its ranks."
        ),
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    si.add_argument("dir", metavar="DIR", help="a new or empty directory")
    si.add_argument("--force", action="store_true", help="write into a non-empty DIR, over the stack's files there")
    si.add_argument(
        "--wheel",
        metavar="WHEEL",
        help="a training_telemetry wheel to copy into DIR/wheels/ for the dashboard's image (default: the wheel "
        "this package was installed from, when pip recorded one)",
    )
    return p


def _print_analysis(
    path: str,
    as_json: bool,
    hang_after: float | None,
    extra: dict | None = None,
    busy_bound: float = 0.8,
    steps: tuple[int, int] | None = None,
    last: int | None = None,
    window_rows: int | None = None,
):
    from .analysis.detectors import StragglerParams, UtilizationParams, analyze
    from .analysis.findings import compare_online
    from .analysis.load import open_input
    from .analysis.report import render
    from .analysis.windows import WINDOW_ROWS, analyze_windows, plan
    from .store.segments import step_range

    window_rows = window_rows or WINDOW_ROWS
    util = UtilizationParams(bound=busy_bound)
    span = step_range(path) if os.path.isdir(path) else None
    if span is not None and steps is not None:
        span = (max(span[0], steps[0]), min(span[1], steps[1]), span[2])
    if span is not None and last is not None:
        span = (max(span[0], span[1] - last + 1), span[1], span[2])
    windows = plan(*span, rows=window_rows) if span is not None and span[0] <= span[1] else []
    if len(windows) > 1:  # too long to hold at once: windows, findings merged
        opened = {}

        def one(w: tuple[int, int], first: bool, final: bool):
            opened.pop("run", None)  # the last window's table goes before this one is read
            run = opened["run"] = open_input(path, w)
            return analyze(
                run.table,
                run.progress if final else None,
                run.world_size,
                hang_after,
                straggler=None if first else StragglerParams(warmup_steps=0),
                utilization=util,
            )

        result = analyze_windows(windows, one)
        run = opened["run"]
        print(
            f"telemetry analyze: {span[2]:,} ranks x {span[1] - span[0] + 1:,} steps analyzed in {len(windows)} "
            f"windows of {windows[0][1] - windows[0][0] + 1:,} steps (at most {window_rows:,} rows at once)",
            file=sys.stderr,
        )
    else:
        if steps is None and last is None:
            window = None  # everything, format 1 lines included
        elif span is not None:
            window = (span[0], span[1])
        else:  # a table (or format 1 lines only): its steps are known once read
            whole = open_input(path).table
            hi = int(whole["step"].max()) if len(whole) else 0
            window = steps or (0, hi)
            if last is not None:
                window = (max(window[0], min(window[1], hi) - last + 1), window[1])
        run = open_input(path, window)
        result = analyze(run.table, run.progress, run.world_size, hang_after, utilization=util, ops=run.ops)
    online = compare_online(result.findings, run.online_findings) if run.online_findings else None
    if as_json:
        doc = result.to_json()
        if extra:
            doc["summary"].update(extra)
        if run.warnings:
            doc["summary"]["warnings"] = run.warnings
        if online is not None:
            doc["summary"]["online_findings"] = online
        print(json.dumps(doc, indent=2))
    else:
        n = result.summary.get("steps", 0)
        print(render(result, path, StragglerParams().warmup(n), run.warnings, online))
    return result


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo.faults import InjectError, check_against_job, parse_inject
    from .demo.launcher import DemoError, log_tail, run_demo

    try:
        faults = [parse_inject(s) for s in args.inject]
        check_against_job(faults, args.ranks, args.steps)
    except InjectError as exc:
        print(f"telemetry demo: {exc}", file=sys.stderr)
        return EXIT_USAGE
    run_dir = args.run_dir or os.path.join("runs", time.strftime("demo-%Y%m%d-%H%M%S"))
    out = sys.stderr if args.json else sys.stdout
    what = ", ".join(args.inject) if args.inject else "no fault injected"
    print(
        f"telemetry demo: {args.ranks} ranks (gloo on 127.0.0.1), {args.steps} steps, {what}\n"
        f"  run directory: {run_dir}",
        file=out,
        flush=True,
    )
    try:
        result = run_demo(
            args.ranks, args.steps, run_dir, faults, overwrite=args.overwrite, out=out, hang_after_s=args.hang_after
        )
    except DemoError as exc:
        print(f"telemetry demo: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"\ntelemetry demo: interrupted; the ranks were stopped. {_kept(run_dir)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(
        f"  job {result.outcome} in {result.wall_s:.1f} s" + (f": {result.message}" if result.message else ""),
        file=out,
        flush=True,
    )
    if result.outcome == "failed":
        for r, code in sorted(result.exit_codes.items()):
            if code not in (0, None):
                print(f"--- rank {r} log (last lines) ---\n{log_tail(run_dir, r)}", file=sys.stderr)
    print(file=out)
    _print_analysis(
        run_dir,
        args.json,
        result.hang_bound_s or args.hang_after,
        extra={"demo": {"outcome": result.outcome, "injected": args.inject, "run_dir": run_dir}},
        busy_bound=args.busy_bound,
    )
    code = {"failed": EXIT_JOB_FAILED, "hang": EXIT_JOB_HUNG}.get(result.outcome, EXIT_OK)
    if code:
        print(
            f"telemetry demo: exit {code}: the job {'failed' if code == EXIT_JOB_FAILED else 'hung'}", file=sys.stderr
        )
    return code


def _kept(run_dir: str) -> str:
    """What an interrupted demo leaves: the steps recorded so far, and how to look at them."""
    from .analysis.load import open_input
    from .analysis.table import TableError

    try:
        t = open_input(run_dir).table
    except (TableError, OSError):
        return f"Nothing was recorded in {run_dir}."
    ranks = t["rank"].nunique() if len(t) else 0
    return (
        f"Kept: {run_dir} with {len(t)} step record{'s' if len(t) != 1 else ''} from {ranks} "
        f"rank{'s' if ranks != 1 else ''}; see them with: telemetry analyze {run_dir}"
    )


def cmd_analyze(args: argparse.Namespace) -> int:
    from .analysis.table import TableError

    try:
        steps = _steps(args.steps)
    except ValueError as exc:
        print(f"telemetry analyze: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = _print_analysis(
            args.path,
            args.json,
            args.hang_after,
            busy_bound=args.busy_bound,
            steps=steps,
            last=args.last,
            window_rows=args.window_rows,
        )
    except TableError as exc:
        print(f"telemetry analyze: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return _exit_code((f.severity for f in result.findings), args.fail_on)


def cmd_diff(args: argparse.Namespace) -> int:
    from .analysis.detectors.diff import DiffParams, diff
    from .analysis.load import open_input
    from .analysis.table import TableError

    if not 0 < args.min_effect < 1:
        print(
            f"telemetry diff: --min-effect {args.min_effect}; accepted: a fraction above 0 and below 1, "
            "e.g. 0.05 for 5%",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        steps = _steps(args.steps)
    except ValueError as exc:
        print(f"telemetry diff: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        base, new = open_input(args.base, steps).table, open_input(args.new, steps).table
    except TableError as exc:
        print(f"telemetry diff: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not len(base) or not len(new):
        print("telemetry diff: a run with no steps cannot be compared", file=sys.stderr)
        return EXIT_USAGE
    doc = diff(base, new, DiffParams(min_effect=args.min_effect))
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        s = doc["summary"]
        print(
            f"{args.base} -> {args.new}: step {s['base_step_s'] * 1e3:.2f} ms -> {s['new_step_s'] * 1e3:.2f} ms "
            f"({s['step_change']:+.1%})"
        )
        print("  series        base ms     new ms    change        p")
        for name, c in sorted(s["series"].items()):
            print(
                f"  {name:<12} {c['base_s'] * 1e3:8.2f}   {c['new_s'] * 1e3:8.2f}   {c['change']:+7.1%}   {c['p']:.1e}"
            )
        for name, why in s["undecided"].items():
            print(f"  undecided: {name}: {why}")
        if not doc["findings"]:
            print(
                f"No significant change of {s['min_effect']:.0%} or more"
                + (" among the series decided." if s["undecided"] else ".")
            )
        for f in doc["findings"]:
            print(f"  [{f['severity']}] {f['kind']}: {f['evidence']}")
    return _exit_code((f["severity"] for f in doc["findings"] if f["kind"] == "regression"), args.fail_on)


def _exit_code(severities: Iterable[str], fail_on: str | None) -> int:
    """3 when ``--fail-on`` was given and one of ``severities`` reaches it, else 0."""
    if fail_on and any(SEVERITIES.index(s) >= SEVERITIES.index(fail_on) for s in severities):
        return EXIT_FAIL_ON
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from .demo.faults import InjectError
    from .demo.simrun import parse_faults, write_simulated_run
    from .demo.simulate import Scenario

    try:
        faults = parse_faults(args.inject, args.ranks, args.steps)
    except InjectError as exc:
        print(f"telemetry simulate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    sc = Scenario(name="simulated", ranks=args.ranks, steps=args.steps, seed=args.seed, faults=faults)
    try:
        done = write_simulated_run(sc, args.out, overwrite=args.overwrite)
    except (FileExistsError, OSError) as exc:
        print(f"telemetry simulate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(
        f"telemetry simulate: wrote {done['records']:,} step records ({args.ranks:,} ranks x {args.steps:,} steps) "
        f"to {args.out} in {done['seconds']:.1f} s; ground truth in {os.path.join(args.out, 'truth.json')}\n"
        f"  analyze it with: telemetry analyze {args.out}"
    )
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from .analysis.exports import ExportError, export_for, export_suffixes
    from .analysis.load import KINETO_TRACES, RUN_DIR, open_input
    from .analysis.table import TABLE_OUTPUTS, TableError, write_table

    try:
        first, last = _steps(args.steps) or (None, None)
    except ValueError as exc:
        print(f"telemetry export: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        run = open_input(args.run_dir)
        if run.kind not in (RUN_DIR, KINETO_TRACES):
            raise TableError(
                f"{args.run_dir!r} is not a run directory; accepted: a run directory or a "
                "directory of PyTorch profiler traces"
            )
        export = None if args.to.lower().endswith(TABLE_OUTPUTS) else export_for(args.to)
        if export is not None:
            if getattr(export, "needs_records", False) and run.kind != RUN_DIR:
                raise TableError(
                    f"{args.to!r}: a trace export needs a run directory; a directory of "
                    "profiler traces is one already (open its files in ui.perfetto.dev); "
                    "accepted here: .csv or .parquet (steps table)"
                )
            _check_steps_in_run(run.table, args.steps, first, last)
            print(export.write(run, args.to, first, last))
            return 0
        if not args.to.lower().endswith(TABLE_OUTPUTS):
            raise TableError(
                f"{args.to!r}: unknown output type; accepted: .csv or .parquet (steps table), "
                + ", ".join(export_suffixes())
                + " (trace)"
            )
        if args.steps:
            print("telemetry export: --steps applies to a trace only", file=sys.stderr)
            return EXIT_USAGE
        write_table(run.table, args.to)
    except (TableError, ExportError, OSError) as exc:  # ExportError: a plug-in says why it cannot write the run
        print(f"telemetry export: {exc}", file=sys.stderr)
        return EXIT_USAGE
    table = run.table
    ranks = table["rank"].nunique() if len(table) else 0
    print(
        f"wrote {len(table)} row{'s' if len(table) != 1 else ''} ({ranks} rank{'s' if ranks != 1 else ''}) to {args.to}"
    )
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    """Start the Streamlit app on the run, print its URL, serve until interrupted; the server (a
    child process in its own session) is stopped with us."""
    import importlib.util
    import subprocess

    if importlib.util.find_spec("streamlit") is None:
        print(
            "telemetry dashboard: needs Streamlit, an optional extra: pip install 'training-telemetry[dashboard]'",
            file=sys.stderr,
        )
        return EXIT_USAGE
    env = {k: v for k, v in os.environ.items() if not k.startswith("TELEMETRY_DASHBOARD_")}
    if args.prometheus:
        if args.path or args.base:
            print(
                "telemetry dashboard: --prometheus shows a live job; give it no run directory and no --base",
                file=sys.stderr,
            )
            return EXIT_USAGE
        if not args.prometheus.startswith(("http://", "https://")):
            print(
                f"telemetry dashboard: --prometheus {args.prometheus!r}; accepted: an http:// or https:// URL, "
                "e.g. http://127.0.0.1:9090",
                file=sys.stderr,
            )
            return EXIT_USAGE
        env["TELEMETRY_DASHBOARD_PROMETHEUS"] = args.prometheus.rstrip("/")
        env["TELEMETRY_DASHBOARD_JOB"] = args.job or ""
    elif args.job:
        print("telemetry dashboard: --job goes with --prometheus URL", file=sys.stderr)
        return EXIT_USAGE
    for name, given in (("TELEMETRY_DASHBOARD_PATH", args.path), ("TELEMETRY_DASHBOARD_BASE", args.base)):
        if not given:
            continue
        if not os.path.exists(given):
            print(
                f"telemetry dashboard: {given!r} does not exist; accepted: a run directory or a steps table",
                file=sys.stderr,
            )
            return EXIT_USAGE
        env[name] = os.path.abspath(given)
    if not args.path and not args.prometheus:
        env["TELEMETRY_DASHBOARD_ROOT"] = os.path.abspath("runs")
    # serve.py imports and exercises the app's modules before it serves (a plain `streamlit run` makes
    # the first visitor wait for them), then runs the app's script; see serve.command for why isolated.
    from .dashboards.serve import command

    cmd = command(
        [
            "--server.headless",
            "true",
            "--server.address",
            args.host,
            "--server.port",
            str(args.port),
            "--browser.gatherUsageStats",
            "false",
            "--server.fileWatcherType",
            "none",
        ]
    )
    from . import children

    # its own session (a Ctrl-C reaches only us, and we stop it); it dies with us even when we are SIGKILLed
    proc = subprocess.Popen(cmd, env=children.child_env(env), start_new_session=True, stdout=subprocess.DEVNULL)
    what = (
        f"job {args.job or '(choose in the page)'} on {args.prometheus}"
        if args.prometheus
        else args.path or "runs under runs/"
    )
    print(f"telemetry dashboard: starting on {args.host}:{args.port} ({what})", flush=True)
    previous = children.interrupt_on_signals()  # SIGTERM, SIGHUP: stop the server, as Ctrl-C does
    try:
        local = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
        if not _wait_healthy(proc, f"http://{local}:{args.port}"):
            print(
                f"telemetry dashboard: the server did not start (exit {proc.poll()}; is port {args.port} free? "
                "--port picks another)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        print(f"telemetry dashboard: http://{args.host}:{args.port} (Ctrl-C stops it)", flush=True)
        code = proc.wait()
        return EXIT_OK if code == 0 else EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        with children.signals_held():  # a second signal waits until the server is stopped
            children.stop_group([proc], grace_s=5.0)
            children.restore(previous)


def cmd_stack(args: argparse.Namespace) -> int:
    from .stack import StackError, init_stack

    try:
        init_stack(args.dir, force=args.force, wheel=args.wheel)
    except StackError as exc:
        print(f"telemetry stack init: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        if exc.errno in _OUTPUT_ERRNOS:
            raise
        print(f"telemetry stack init: cannot write {exc.filename or args.dir}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


def _wait_healthy(proc, url: str, timeout_s: float = 60.0) -> bool:
    """Wait until the Streamlit server at ``url`` answers its health check; False if it exits first
    or never answers."""
    import time
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            time.sleep(0.2)
    return False


def _check_steps_in_run(table, text: str | None, first: int | None, last: int | None) -> None:
    """--steps that select no step of the run is an error, not an empty trace."""
    from .analysis.table import TableError

    if text is None:
        return
    steps = table["step"]
    if not len(steps):
        raise TableError("the run has no steps to export")
    chosen = ((steps >= first) if first is not None else True) & ((steps <= last) if last is not None else True)
    if not chosen.any():
        raise TableError(
            f"--steps {text}: the run has steps {int(steps.min())}-{int(steps.max())}; nothing to export in that range"
        )


def _steps(text: str | None) -> tuple[int, int] | None:
    """``--steps A:B`` of every command, through the one parser (analysis.windows.parse_steps)."""
    from .analysis.windows import parse_steps

    return parse_steps(text) if text else None


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")  # the CLI is an application
    args = build_parser().parse_args(argv)
    handler = {
        "demo": cmd_demo,
        "analyze": cmd_analyze,
        "diff": cmd_diff,
        "export": cmd_export,
        "dashboard": cmd_dashboard,
        "simulate": cmd_simulate,
        "stack": cmd_stack,
    }[args.command]
    try:
        return handler(args)
    except KeyboardInterrupt:
        print("telemetry: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as exc:
        if exc.errno not in _OUTPUT_ERRNOS:
            raise
        return _output_failed(exc)


def _output_failed(exc: OSError) -> int:
    """The report could not be written: say so once (unless the reader simply went away), and send
    what stdout still holds nowhere, so that the interpreter's exit does not fail on it again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    if exc.errno != errno.EPIPE:
        try:
            print(f"telemetry: cannot write the output: {exc.strerror or exc}", file=sys.stderr)
        except OSError:
            pass
    return EXIT_OUTPUT


if __name__ == "__main__":
    sys.exit(main())

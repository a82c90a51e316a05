"""The command line: every subcommand, its flags and their help (``telemetry --help``)."""

from __future__ import annotations

import argparse
import textwrap

from ..analysis.findings import SEVERITIES
from ..analysis_options import ANALYZE, DASHBOARD, DEMO, flags
from ..demo.faults import SIMULATED, spec_help
from ..version import __version__
from .common import EXIT_CODES


def _job_name(text: str) -> str:
    from ..config import _JOB_RE

    if not _JOB_RE.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is invalid; accepted: 1-128 characters of letters, digits and . _ : -"
        )
    return text


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


def _number_in(hi: float, accepted: str):
    """A parser of a number above 0 and at most ``hi``; ``accepted`` says so in the error."""

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not 0 < v <= hi:
            raise argparse.ArgumentTypeError(f"{v}; accepted: {accepted}")
        return v

    return parse


_fraction = _number_in(1, "a fraction above 0 and at most 1 (0.8 = 80%)")
_rate = _number_in(1000, "a rate above 0 and at most 1000 per hour")


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=90)


def _at_least_two(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 2:
        raise argparse.ArgumentTypeError(f"{text!r}; accepted: a whole number, 2 or more")
    return n


def _option_flags(p: argparse.ArgumentParser, names: tuple[str, ...]) -> None:
    """One flag per field of AnalysisOptions in ``names``: its flag, help and value kind from the field."""
    types = {
        "seconds": _seconds,
        "fraction": _fraction,
        "rate": _rate,
        "rows": _positive_int(1000, 10**10),
    }
    for f in flags(names):
        meta = f.metadata
        if meta["kind"] == "switch":
            p.add_argument(meta["flag"], dest=f.name, action="store_true", help=meta["help"])
            continue
        p.add_argument(
            meta["flag"],
            dest=f.name,
            type=types.get(meta["kind"]),  # pyright: ignore[reportArgumentType] - None (count, path): argparse's default, the text
            metavar=meta["metavar"],
            help=meta["help"],
        )


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
    d.add_argument(
        "--checkpoint-every",
        type=_positive_int(1, 100000),
        help="save a checkpoint (torch.distributed.checkpoint, each rank its own) every N steps "
        "(default: none, or 25 with a slow_checkpoint injected)",
    )
    d.add_argument(
        "--job",
        type=_job_name,
        metavar="NAME",
        help="the job's name (default: the run directory's): give runs of one job one name, and "
        "`telemetry history` compares them (it groups by the job name, world size, phases and tags)",
    )
    d.add_argument("--overwrite", action="store_true", help="replace an existing --run-dir")
    d.add_argument("--json", action="store_true", help="print the findings JSON instead of the report")
    _option_flags(d, DEMO)

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
        nargs="?",
        help="run directory, a steps table or per-operation trace (.csv / .parquet), or "
        "a directory of per-rank PyTorch profiler traces (.json / .json.gz); none with --prometheus",
    )
    a.add_argument(
        "--prometheus",
        metavar="URL",
        help="read a live job from this Prometheus server's HTTP API instead of a path (e.g. "
        "http://127.0.0.1:9090): the same report and findings JSON; until the job has 8 windows with "
        "steps, summary.collecting says what is missing",
    )
    a.add_argument("--job", help="with --prometheus: the training job (default: the only one on the server)")
    a.add_argument("--json", action="store_true", help="print the findings JSON")
    a.add_argument("--fail-on", choices=SEVERITIES, help="exit 3 when a finding reaches this severity")
    _option_flags(a, ANALYZE)

    df = sub.add_parser(
        "diff",
        help="compare two runs or steps tables (regressions by phase), or two profiler traces (a slow rank "
        "against a peer: ops, kernels and collectives by self time per step)",
    )
    df.add_argument(
        "base", help="the run to compare against (run directory, .csv, .parquet), or a peer's profiler trace"
    )
    df.add_argument("new", help="the run under test, or the slow rank's profiler trace (.json, .json.gz)")
    df.add_argument("--json", action="store_true", help="print the findings JSON")
    df.add_argument("--min-effect", type=float, default=0.05, help="smallest change reported (default 0.05 = 5%%)")
    df.add_argument("--fail-on", choices=SEVERITIES, help="exit 3 when a regression reaches this severity")
    df.add_argument(
        "--steps", metavar="A:B", help="compare steps A to B of each run only (inclusive; either may be empty)"
    )

    cp = sub.add_parser(
        "capture",
        help="ask a running job for profiler traces of some ranks (RUN_DIR/captures/<id>/rank-N.json.gz)",
        description=_wrap(
            "Writes a request in RUN_DIR/captures/requests/, which rank 0's online detection takes within "
            "a few seconds: the ranks are profiled (torch.profiler) for the steps asked, from a step a little "
            "ahead, and their traces written to RUN_DIR/captures/<id>/. Needs a multi-rank job with online "
            "detection and capture on (the defaults); counts toward capture_max. Compare two of its traces "
            "with telemetry diff PEER_TRACE SLOW_TRACE."
        ),
    )
    cp.add_argument("run_dir", metavar="RUN_DIR", help="the running job's run directory (rank 0's)")
    cp.add_argument("--ranks", required=True, help="ranks to profile, separated by commas (e.g. 1,3)")
    cp.add_argument("--num-steps", type=_positive_int(1, 50), default=3, help="steps to profile (1-50, default 3)")
    cp.add_argument("--wait", type=float, default=0.0, metavar="S", help="wait up to S seconds for the traces")

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
        "--history",
        nargs="+",
        metavar="DIR_OR_RUN",
        help="runs of the job for the History view, as telemetry history takes them: run directories or folders "
        "of run directories (default: no History; the run's sibling runs are not taken by themselves)",
    )
    ds.add_argument(
        "--prometheus",
        metavar="URL",
        help="show a live job from this Prometheus server's HTTP API "
        "instead of a run directory (e.g. http://127.0.0.1:9090)",
    )
    ds.add_argument("--job", help="with --prometheus: the training job (default: choose in the page)")
    _option_flags(ds, DASHBOARD)
    ds.add_argument(
        "--trace-ui-url",
        metavar="URL",
        help="link each finding's traces (its trace_ids) to this trace UI, {trace_id} where the id goes, e.g. "
        "http://127.0.0.1:16686/trace/{trace_id} (Jaeger); default: the run's own trace_ui_url setting",
    )

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
    sm.add_argument(
        "--series",
        type=_positive_int(2, 10000),
        metavar="N",
        help="write N runs of the job as OUT/run-01 ... (one a day, seeds SEED+1 ...), for telemetry history",
    )
    sm.add_argument(
        "--from-run",
        type=_positive_int(1, 10000),
        default=1,
        metavar="K",
        help="with --series: the --inject faults hold from run K on (default 1: every run)",
    )
    sm.add_argument(
        "--run-noise",
        type=_number_in(0.5, "a fraction above 0 and at most 0.5 (0.01 = 1%%)"),
        default=0.01,
        help="with --series: each run's compute scaled by a draw of N(1, this) (default 0.01: 1%% run to run)",
    )
    sm.add_argument(
        "--start",
        metavar="ISO8601",
        help="the (first) run's start time, e.g. 2026-11-01T02:00:00+00:00 (default: now; with --series, N days ago)",
    )

    hi = sub.add_parser(
        "history",
        help="many runs in time order: their step time, throughput and phases, and the runs after which "
        "something changed",
        description=_wrap(
            "One row per run (from RUN_DIR/summary.json, made on first use and kept while the run's files are "
            "unchanged), like runs grouped by --by TAG or by their settings hash, and the change points across "
            "each group's runs for every key metric and phase (a max-T permutation test: a group with no "
            "change reports one with probability at most --alpha)."
        ),
    )
    hi.add_argument("paths", nargs="+", metavar="DIR_OR_RUN", help="run directories, or folders holding them")
    hi.add_argument(
        "--metric",
        action="append",
        metavar="NAME",
        help="only this series (step_time_s, tokens_per_s, mfu, compute_share, or a phase such as backward_s); "
        "repeat for more",
    )
    hi.add_argument("--by", metavar="TAG", help="group runs by this tag's value (default: the settings hash)")
    hi.add_argument("--json", action="store_true", help="print the history as JSON")
    hi.add_argument("--fail-on", choices=("regression",), help="exit 3 when a change that made a group slower is found")
    hi.add_argument(
        "--alpha",
        type=_number_in(0.5, "a probability above 0 and at most 0.5"),
        default=0.005,
        help="false alarm rate of a group with no change (default 0.005)",
    )
    hi.add_argument(
        "--min-change",
        type=_number_in(1, "a fraction above 0 and at most 1"),
        default=0.01,
        help="smallest change reported, a share of the level before (default 0.01 = 1%%)",
    )
    hi.add_argument("--refresh", action="store_true", help="make every run's summary again")
    hi.add_argument(
        "--no-diff",
        action="store_true",
        help="do not open the runs either side of each change (their steps compared, and their profiler "
        "captures of a common rank: which op, kernel or collective moved)",
    )

    e = sub.add_parser("export", help="write a run's steps table, or its timeline for Perfetto")
    e.add_argument("run_dir", help="run directory, or a directory of PyTorch profiler traces (steps table only)")
    e.add_argument(
        "--to",
        required=True,
        metavar="FILE",
        help="FILE.parquet or FILE.csv (steps table), FILE.json (Chrome/Perfetto trace)",
    )
    e.add_argument("--steps", metavar="A:B", help="trace only steps A to B (inclusive; either may be empty)")

    co = sub.add_parser(
        "compact",
        help="merge a run directory's sealed segments into a few files per rank",
        description=_wrap(
            "Merge each rank's sealed segments (one per 2,048 steps) into compacted segments of up to "
            "--segments each, in the order written; a run's writers do this themselves while the job runs, "
            "so this is for finished runs, simulated ones and runs written before. Ranks a live process "
            "writes are left to it. Safe to stop at any moment: nothing is lost or read twice, and the next "
            "compact (or the rank's next session) finishes the job. Then, for a run of more than 4,000,000 "
            "rows (ranks x steps) that no process is writing, its analysis from its blocks of steps is kept in "
            "RUN/summary/: telemetry analyze and the dashboard read it in a second while the run is unchanged; "
            "beyond 256 ranks, with its picture step by step (each band of ranks' highest, the step time's "
            "percentiles), which the dashboard's zoom into every rank draws."
        ),
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    co.add_argument("run_dir", help="run directory")
    co.add_argument(
        "--segments",
        type=_at_least_two,
        default=16,
        metavar="N",
        help="sealed segments per compacted segment (default 16, about 32,768 steps; at least 2)",
    )

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

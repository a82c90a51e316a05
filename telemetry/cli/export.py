"""``telemetry export``: a run as a steps table, or through an export plug-in (Perfetto)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, cast

from .common import EXIT_USAGE, step_range

if TYPE_CHECKING:
    import pandas as pd


def cmd_export(args: argparse.Namespace) -> int:
    from ..analysis.exports import ExportError, export_for, export_suffixes
    from ..analysis.inputs.load import KINETO_TRACES, RUN_DIR, open_input
    from ..steptable.table import TABLE_OUTPUTS, TableError, write_table

    try:
        first, last = step_range(args.steps) or (None, None)
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


def _check_steps_in_run(table: pd.DataFrame, text: str | None, first: int | None, last: int | None) -> None:
    """--steps that select no step of the run is an error, not an empty trace."""
    from ..steptable.table import TableError

    if not text:  # no range (step_range: None), as for every command
        return
    steps = table["step"]
    if not len(steps):
        raise TableError("the run has no steps to export")
    # a range given: step_range set both ends, so a Series (never True & True)
    chosen = cast(
        "pd.Series", ((steps >= first) if first is not None else True) & ((steps <= last) if last is not None else True)
    )
    if not chosen.any():
        raise TableError(
            f"--steps {text}: the run has steps {int(steps.min())}-{int(steps.max())}; nothing to export in that range"
        )

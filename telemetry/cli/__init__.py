"""The ``telemetry`` command: demo, analyze, diff, history, export, compact, dashboard, simulate, stack.

One module per command (each a ``cmd_*`` handler: parse what is left, run, print, return an exit
code); :mod:`.parser` holds every subcommand's flags, :mod:`.common` what they share. Exit codes:
:mod:`telemetry.exitcodes` (the one list; ``--help`` prints it).
"""

from __future__ import annotations

import logging
import sys
from typing import Sequence

from .analyze import cmd_analyze
from .capture import cmd_capture
from .common import EXIT_INTERRUPTED, OUTPUT_ERRNOS, output_failed
from .compact import cmd_compact
from .dashboard import cmd_dashboard
from .demo import cmd_demo
from .diff import cmd_diff
from .export import cmd_export
from .history import cmd_history
from .parser import build_parser
from .simulate import cmd_simulate
from .stack import cmd_stack


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")  # the CLI is an application
    args = build_parser().parse_args(argv)
    handler = {
        "demo": cmd_demo,
        "analyze": cmd_analyze,
        "diff": cmd_diff,
        "capture": cmd_capture,
        "export": cmd_export,
        "compact": cmd_compact,
        "dashboard": cmd_dashboard,
        "simulate": cmd_simulate,
        "history": cmd_history,
        "stack": cmd_stack,
    }[args.command]
    try:
        return handler(args)
    except KeyboardInterrupt:
        print("telemetry: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as exc:
        if exc.errno not in OUTPUT_ERRNOS:
            raise
        return output_failed(exc)


__all__ = ["build_parser", "main"]

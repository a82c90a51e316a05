"""``telemetry stack init``: the monitoring stack's files for a pip user."""

from __future__ import annotations

import argparse
import sys

from .common import EXIT_OK, EXIT_USAGE, OUTPUT_ERRNOS


def cmd_stack(args: argparse.Namespace) -> int:
    from ..stack import StackError, init_stack

    try:
        init_stack(args.dir, force=args.force, wheel=args.wheel)
    except StackError as exc:
        print(f"telemetry stack init: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        if exc.errno in OUTPUT_ERRNOS:
            raise
        print(f"telemetry stack init: cannot write {exc.filename or args.dir}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK

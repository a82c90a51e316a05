"""What every command shares: exit codes, ``--fail-on``, ``--steps``, an output that cannot be written."""

from __future__ import annotations

import errno
import os
import sys
from typing import Iterable

from ..analysis.findings import SEVERITIES
from ..exitcodes import ExitCode, epilog

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
OUTPUT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EPIPE, errno.EIO, errno.EROFS, errno.EFBIG)
EXIT_CODES = epilog()


def exit_code(severities: Iterable[str], fail_on: str | None) -> int:
    """3 when ``--fail-on`` was given and one of ``severities`` reaches it, else 0."""
    if fail_on and any(SEVERITIES.index(s) >= SEVERITIES.index(fail_on) for s in severities):
        return EXIT_FAIL_ON
    return 0


def step_range(text: str | None) -> tuple[int, int] | None:
    """``--steps A:B`` of every command, through the one parser (analysis_options.parse_steps)."""
    from ..analysis_options import parse_steps

    return parse_steps(text) if text else None


def output_failed(exc: OSError) -> int:
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

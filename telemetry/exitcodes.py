"""The ``telemetry`` command's exit codes, in one place: the CLI returns them, its ``--help`` lists
them, and the manual's reference page is generated from :data:`CODES`.

>>> int(ExitCode.FAIL_ON), ExitCode.FAIL_ON.meaning
(3, '--fail-on: a finding reached that severity (analyze, diff)')
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """What a ``telemetry`` command's exit status means."""

    OK = 0
    JOB_FAILED = 1
    USAGE = 2
    FAIL_ON = 3
    JOB_HUNG = 4
    OUTPUT = 5
    INTERRUPTED = 130

    @property
    def meaning(self) -> str:
        return CODES[self]


CODES: dict[ExitCode, str] = {
    ExitCode.OK: "done",
    ExitCode.JOB_FAILED: "demo: the job failed (a rank exited with an error, or no step completed); capture "
    "--wait: the traces did not come in time",
    ExitCode.USAGE: "bad arguments or input (a sentence on stderr says which and what is accepted)",
    ExitCode.FAIL_ON: "--fail-on: a finding reached that severity (analyze, diff)",
    ExitCode.JOB_HUNG: "demo: the job hung and its watchdog stopped it",
    ExitCode.OUTPUT: "the output could not be written (disk full, read-only, a closed pipe)",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C, or SIGTERM to telemetry dashboard)",
}


def epilog() -> str:
    """The exit codes as ``--help`` prints them."""
    return "exit codes:\n" + "\n".join(f"  {int(c):<4} {m}" for c, m in CODES.items())

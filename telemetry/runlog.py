"""The run's own log: what the ``telemetry`` logger warns, also kept in ``RUN_DIR/logs/rank-N.log``.

:class:`RunLog` is a handler on the package's logger (never the root's), from the moment a session knows
its rank until it shuts down. A warning is said once on the console as before (Python's last-resort
handler says it when the application configured no logging; the application's handlers when it did)
and appended to the rank's file (made at the first warning: a healthy run has none). A file
that is the process's stderr already (the demo sends its ranks' output there) is not written twice.
"""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger("telemetry")
LOGS_DIR = "logs"


def path_for(run_dir: str, rank: int) -> str:
    return os.path.join(run_dir, LOGS_DIR, f"rank-{rank}.log")


class RunLog(logging.Handler):
    def __init__(self, path: str) -> None:
        super().__init__(logging.WARNING)
        self.path = path
        self._failed = False
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(threadName)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if not self._failed and not _is_stderr(self.path):
            try:  # opened for each warning (they are few): no file held open on the run's disk between them
                os.makedirs(os.path.dirname(self.path), exist_ok=True)
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write(self.format(record) + "\n")
            except (OSError, ValueError):  # a full or read-only disk: the console still says it
                self._failed = True
        if not configured() and logging.lastResort is not None:
            if record.levelno >= logging.lastResort.level:
                logging.lastResort.handle(record)


def _is_stderr(path: str) -> bool:
    """Whether ``path`` is where this process's stderr goes already."""
    try:
        a, b = os.fstat(sys.stderr.fileno()), os.stat(path)
    except (OSError, ValueError, AttributeError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def configured() -> bool:
    """Whether the application configured logging for the package's records: a handler other than a
    RunLog on the package's logger or on a logger above it that records propagate to (what Python's
    logging asks before it uses its last resort)."""
    lg: logging.Logger | None = log
    while lg is not None:
        if any(not isinstance(h, RunLog) for h in lg.handlers):
            return True
        lg = lg.parent if lg.propagate else None
    return False


def attach(run_dir: str, rank: int) -> RunLog:
    """The session's log, in place of any an earlier session of this process left (one session at a time:
    a second would say each warning twice)."""
    for old in [h for h in log.handlers if isinstance(h, RunLog)]:
        detach(old)
    handler = RunLog(path_for(run_dir, rank))
    log.addHandler(handler)
    return handler


def detach(handler: RunLog | None) -> None:
    if handler is not None:
        log.removeHandler(handler)
        handler.close()

"""API misuse inside a training loop: warned once and counted, or raised when ``strict``.

A typo in a phase name must not kill a 1,000-GPU job at hour 20, so by default a misuse is logged
once per kind with a message naming the problem and what is accepted, the offending call becomes a
no-op, and the count shows in ``telemetry.stats()``. ``init(strict=True)`` (or
``TELEMETRY_STRICT=1``) raises :class:`TelemetryUsageError` instead, for tests and first runs.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("telemetry")


class TelemetryUsageError(ValueError):
    """The telemetry API was called in a way it does not accept."""


class UsageErrors:
    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def report(self, kind: str, message: str) -> None:
        with self._lock:
            first = kind not in self.counts
            self.counts[kind] = self.counts.get(kind, 0) + 1
        if self.strict:
            raise TelemetryUsageError(message)
        if first:
            log.warning("telemetry: %s (ignored; further cases of this kind are counted, not logged)",
                        message)

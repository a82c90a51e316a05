"""API misuse inside a training loop: warned once and counted, or raised when ``strict``.

A typo in a phase name must not kill a 1,000-GPU job at hour 20, so by default a misuse is logged
once per kind with a message naming the problem and what is accepted, the offending call becomes a
no-op, and the count shows in ``telemetry.stats()``. ``init(strict=True)`` (or
``TELEMETRY_STRICT=1``) raises :class:`TelemetryUsageError` instead, for tests and first runs.
"""

from __future__ import annotations

from .logonce import LogOnce


class TelemetryUsageError(ValueError):
    """The telemetry API was called in a way it does not accept."""


class UsageErrors:
    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self._once = LogOnce()
        self.counts = self._once.counts  # misuses by kind

    def report(self, kind: str, message: str) -> None:
        if self.strict:
            self._once.count(kind)
            raise TelemetryUsageError(message)
        self._once(kind, "telemetry: %s (ignored; further cases of this kind are counted, not logged)", message)

"""Log once, count the rest: how telemetry reports a problem that may repeat every step. Each
:class:`LogOnce` logs the first occurrence of each key and counts every one; ``counts`` is what
``telemetry.stats()`` and the exporters show.

>>> once = LogOnce()
>>> once("export", "telemetry: export failed: %s (further failures counted)", "timeout")
True
>>> once("export", "telemetry: export failed: %s (further failures counted)", "timeout")
False
>>> once.counts
{'export': 2}
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("telemetry")


class LogOnce:
    def __init__(self, logger: logging.Logger = log, level: int = logging.WARNING) -> None:
        self.counts: dict[str, int] = {}
        self._log = logger
        self._level = level
        self._lock = threading.Lock()

    def count(self, key: str) -> bool:
        """Count one occurrence of ``key`` without logging; True if it is the first."""
        with self._lock:
            first = key not in self.counts
            self.counts[key] = self.counts.get(key, 0) + 1
        return first

    def __call__(self, key: str, message: str, *args: object, exc_info: bool = False) -> bool:
        """Count one occurrence of ``key``; log ``message % args`` if it is the first. True then."""
        first = self.count(key)
        if first:
            self._log.log(self._level, message, *args, exc_info=exc_info)
        return first

    @property
    def total(self) -> int:
        return sum(self.counts.values())

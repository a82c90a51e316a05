"""What the OpenTelemetry sinks (traces: ``otlp.py``, metrics: ``otlp_metrics.py``) share: where
traces go, as the config resolved it, and the SDK's own log records of our exports: re-logged as
``telemetry: otlp: ...``, at most once a minute, with the cause kept on the sink (``ErrorNote``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from telemetry.config import Config

log = logging.getLogger("telemetry")


def traces_exporter(config: Config) -> str:
    """Where spans go: ``otlp``, ``console`` or ``none``, as the config resolved it (its field
    ``otlp_traces_exporter``, else ``OTEL_TRACES_EXPORTER``, validated there); ``otlp`` when unset."""
    return getattr(config, "otlp_traces_exporter", "") or "otlp"


# ---- the OTel SDK's log records of our exports -------------------------------------------------
_ours = threading.local()


class ErrorNote:
    """``last_error``: the first error message of the latest run of failed exports (its cause, not
    the retry and shutdown noise that follows it); a success ends the run."""

    last_error = ""
    _failing = False

    def note_error(self, message: str) -> None:
        if not self._failing:
            self.last_error = message[:300]
            self._failing = True

    def note_ok(self) -> None:
        self._failing = False


@contextlib.contextmanager
def sdk_calls(owner: ErrorNote) -> Iterator[None]:
    """Marks the OTel SDK calls this thread makes inside the block as ``owner``'s, so that
    :class:`_SdkLogRouter` routes their log records (and notes their errors on the owner)."""
    prev = getattr(_ours, "owner", None)
    _ours.owner = owner
    try:
        yield
    finally:
        _ours.owner = prev


class _SdkLogRouter(logging.Filter):
    """The SDK's exporters log every retry and failure under their own logger names and words; a
    dead collector must neither flood the training log nor speak without saying it is telemetry's.

    A record made inside :func:`sdk_calls` is noted on its owner (:class:`ErrorNote`, WARNING and
    above) and re-logged through the ``telemetry`` logger as ``telemetry: otlp: <message>``, at
    most once a minute per SDK logger (the rest are counted in ``suppressed``); the original record
    is stopped. Records made outside (the application's own use of the SDK) pass untouched."""

    def __init__(self) -> None:
        super().__init__()
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()
        self.suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        owner = getattr(_ours, "owner", None)
        if owner is None:
            return True
        message = record.getMessage()
        if record.levelno >= logging.WARNING:
            owner.note_error(message)
        now = time.monotonic()
        with self._lock:
            last = self._last.get(record.name)
            if last is not None and now - last < 60.0:
                self.suppressed += 1
                return False
            self._last[record.name] = now
        log.log(
            record.levelno,
            "telemetry: otlp: %s (from the OpenTelemetry SDK; such messages are logged at most once a minute)",
            message,
        )
        return False


_SDK_LOG_ROUTER = _SdkLogRouter()
_SDK_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.proto.http._common",
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    "opentelemetry.exporter.otlp.proto.grpc.metric_exporter",
    "opentelemetry.exporter.otlp.proto.common._internal",
    "opentelemetry.exporter.otlp.common.http",
    "opentelemetry.sdk.metrics._internal.export",
    "opentelemetry.sdk.trace.export",
)


def route_sdk_loggers() -> None:
    """Install :class:`_SdkLogRouter` on the SDK's exporter loggers; done when a sink starts, not
    when this module is imported (importing a library must not change another library's loggers).
    Idempotent; it touches only records made inside :func:`sdk_calls`."""
    for name in _SDK_LOGGERS:
        logger = logging.getLogger(name)
        if _SDK_LOG_ROUTER not in logger.filters:
            logger.addFilter(_SDK_LOG_ROUTER)

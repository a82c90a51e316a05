"""The recorder that the hot-path API writes to now, and the decorators that look it up per call.

``telemetry.step``, ``log``, ``watch`` and the collective hooks read ``current._active`` at call
time, ``telemetry.phase`` the active recorder's phase contexts, ``current._phases``: a :class:`~telemetry.recorder.null.NullRecorder` before ``init``, after ``shutdown``
and in forked children; the session's recorder in between. Functions decorated at import, before
``init``, therefore record once it runs.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

_active: Any = None  # set to the null recorder by the package's __init__, before any use
_phases: Any = None  # _active's phase contexts by name (a name's is made by _active.phase at its first use)


def active() -> Any:
    return _active


def set_active(rec: Any) -> None:
    global _active, _phases
    _active = rec
    _phases = rec._phases


def step_decorator(fn: Callable, tokens: Any = None, samples: Any = None) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _active.step(tokens, samples):
            return fn(*args, **kwargs)

    return wrapper


def phase_decorator(fn: Callable, name: str) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _active.phase(name):
            return fn(*args, **kwargs)

    return wrapper

"""The recorder that the hot-path API writes to now, and the decorators that look it up per call.

``telemetry.step``, ``log``, ``watch`` and the collective hooks read ``current._active`` at call
time, ``telemetry.phase`` the active recorder's phase contexts, ``current._phases``: a :class:`~telemetry.recorder.null.NullRecorder` before ``init``, after ``shutdown``
and in forked children; the session's recorder in between. Functions decorated at import, before
``init``, therefore record once it runs.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable, Mapping, ParamSpec, TypeVar, cast

if TYPE_CHECKING:
    from .null import NullPhase, NullRecorder
    from .wall import PhaseContext, Recorder

P = ParamSpec("P")
R = TypeVar("R")

# set to the null recorder by the package's __init__, before any use
_active = cast("Recorder | NullRecorder", None)
# _active's phase contexts by name (a name's is made by _active.phase at its first use)
_phases = cast("Mapping[str, PhaseContext | NullPhase]", None)


def active() -> Recorder | NullRecorder:
    return _active


def set_active(rec: Recorder | NullRecorder) -> None:
    global _active, _phases
    _active = rec
    _phases = rec._phases


def step_decorator(fn: Callable[P, R], tokens: int | None = None, samples: int | None = None) -> Callable[P, R]:
    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with _active.step(tokens, samples):
            return fn(*args, **kwargs)

    return wrapper


def phase_decorator(fn: Callable[P, R], name: str) -> Callable[P, R]:
    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with _active.phase(name):
            return fn(*args, **kwargs)

    return wrapper

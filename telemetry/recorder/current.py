"""The recorder that the hot-path API writes to now (the decorators that look it up per call: :mod:`.decorators`).

``telemetry.step``, ``log``, ``watch`` and the collective hooks read ``current._active`` at call
time, ``telemetry.phase`` the active recorder's phase contexts, ``current._phases``: a :class:`~telemetry.recorder.null.NullRecorder` before ``init``, after ``shutdown``
and in forked children; the session's recorder in between. Functions decorated at import, before
``init``, therefore record once it runs (:func:`set_active` sets the decorators' ``_active`` too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, cast

from . import decorators

# re-exported (telemetry.step's bare form imports step_decorator from here)
from .decorators import phase_decorator as phase_decorator
from .decorators import step_decorator as step_decorator

if TYPE_CHECKING:
    from .null import NullPhase, NullRecorder
    from .wall import PhaseContext, Recorder

# set to the null recorder by the package's __init__, before any use
_active = cast("Recorder | NullRecorder", None)
# _active's phase contexts by name (a name's is made by _active.phase at its first use)
_phases = cast("Mapping[str, PhaseContext | NullPhase]", None)


def active() -> Recorder | NullRecorder:
    return _active


def set_active(rec: Recorder | NullRecorder) -> None:
    global _active, _phases
    _active = rec
    decorators._active = rec  # what the decorators read at each call
    _phases = rec._phases

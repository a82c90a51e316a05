"""The decorators that look up the active recorder per call (what ``@telemetry.step``, ``@telemetry.phase`` and
the step and phase contexts used as decorators return).

Each call reads this module's ``_active``, which :func:`telemetry.recorder.current.set_active` sets together
with ``current._active``: functions decorated at import, before ``init``, therefore record once it runs. Kept
below the recorders (:mod:`.wall`, :mod:`.null`), which return these decorators; it knows the active recorder
by what it calls on it (:class:`~.protocols.ActiveRecorder`).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable, ParamSpec, TypeVar, cast

if TYPE_CHECKING:
    from .protocols import ActiveRecorder

P = ParamSpec("P")
R = TypeVar("R")

# set with current._active by current.set_active (the package's __init__ sets the null recorder), before any use
_active = cast("ActiveRecorder", None)


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

"""The null recorder: active before ``init``, after ``shutdown`` and in forked children.

Its calls cost a method call and record nothing; its contexts still work as decorators, so a
function decorated before ``init`` records once ``init`` runs.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Literal, ParamSpec, TypeVar

from ..usage import UsageErrors
from .decorators import phase_decorator, step_decorator

if TYPE_CHECKING:
    from .protocols import TimingEvent

P = ParamSpec("P")
R = TypeVar("R")


class NullContext:
    """A context manager and decorator that does nothing (also what a rejected phase name gets)."""

    __slots__ = ()

    def __enter__(self) -> "NullContext":
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        return False

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]:
        return fn  # a rejected phase name decorates nothing (the rejection was reported)


NULL_CONTEXT = NullContext()


class NullStep(NullContext):
    __slots__ = ("_tokens", "_samples", "_index")

    def __init__(self, tokens: int | None = None, samples: int | None = None) -> None:
        self._tokens = tokens
        self._samples = samples
        self._index: int | None = None

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]:
        return step_decorator(fn, self._tokens, self._samples)


class NullPhase(NullContext):
    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]:
        return phase_decorator(fn, self._name)  # decorated before init: records once init runs


class NullRecorder:
    """Records nothing; has the recorder's interface."""

    usage = UsageErrors(strict=False)
    step_index = 0
    open_step: tuple[int, int] | None = None
    current_phase: str | None = None
    current_collective: tuple[str, int, str, int] | None = None
    waiting_collective: tuple[str, int, str, int] | None = None
    mark: Callable[[], TimingEvent] | None = None
    dropped = 0
    buffered = 0

    _open = None  # no step is ever open: telemetry.step loads and hands out _step

    def __init__(self) -> None:
        self._phases: dict[str, NullPhase] = {}
        self._step = NullStep()

    def step(self, tokens: int | None = None, samples: int | None = None, index: int | None = None) -> NullStep:
        return NullStep(tokens, samples)

    def phase(self, name: str) -> NullPhase:
        try:
            return self._phases[name]
        except KeyError:
            ctx = self._phases[name] = NullPhase(name)
            return ctx
        except TypeError:  # unhashable
            return NullPhase(name)

    def log(self, values: dict[str, Any]) -> None:
        return None

    def emit(self, event: tuple) -> None:
        return None

    def now(self) -> int:
        return time.perf_counter_ns()

    def drain(self, limit: int | None = None) -> list[tuple]:
        return []


NULL = NullRecorder()

"""The null recorder: active before ``init``, after ``shutdown`` and in forked children.

Its calls cost a method call and record nothing; its contexts still work as decorators, so a
function decorated before ``init`` records once ``init`` runs.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from ..usage import UsageErrors
from .current import phase_decorator, step_decorator


class NullContext:
    """A context manager and decorator that does nothing (also what a rejected phase name gets)."""

    __slots__ = ()

    def __enter__(self) -> "NullContext":
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False

    def __call__(self, fn: Callable) -> Callable:
        return fn  # a rejected phase name decorates nothing (the rejection was reported)


NULL_CONTEXT = NullContext()


class NullStep(NullContext):
    __slots__ = ("_tokens", "_samples", "_index")

    def __init__(self, tokens: Any = None, samples: Any = None) -> None:
        self._tokens = tokens
        self._samples = samples
        self._index = None

    def __call__(self, fn: Callable) -> Callable:
        return step_decorator(fn, self._tokens, self._samples)


class NullPhase(NullContext):
    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, fn: Callable) -> Callable:
        return phase_decorator(fn, self._name)  # decorated before init: records once init runs


class NullRecorder:
    """Records nothing; has the recorder's interface."""

    usage = UsageErrors(strict=False)
    step_index = 0
    open_step = current_phase = current_collective = mark = None
    dropped = 0
    buffered = 0

    _open = None  # no step is ever open: telemetry.step loads and hands out _step

    def __init__(self) -> None:
        self._phases: dict[Any, NullPhase] = {}
        self._step = NullStep()

    def step(self, tokens: Any = None, samples: Any = None, index: Any = None) -> NullStep:
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

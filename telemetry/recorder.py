"""The hot path: timestamps into a bounded in-memory buffer, nothing else.

A :class:`Recorder` is what ``telemetry.step``, ``phase``, ``log``, ``watch`` and the collective
hooks write to. Each call reads the clock and appends one tuple (see :mod:`telemetry.events`); it
does no I/O, takes no lock that is held across user code, never touches the device, and decides
nothing per call that could have been decided at ``init``. When the buffer is full the event is
dropped and counted. The pipeline thread drains the buffer.

Before ``init`` (and in forked children) the active recorder is a :class:`NullRecorder`, whose
calls cost a method call and record nothing.

>>> rec = Recorder(capacity=1024)
>>> with rec.step(tokens=128):
...     with rec.phase("forward"):
...         pass
>>> [e[0] for e in rec.drain()]   # STEP_BEGIN, PHASE, STEP_END
[0, 2, 1]
"""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from typing import Any, Callable

from . import events as ev
from .usage import UsageErrors
from .values import NotANumber, convert

_PLAIN = (float, int)


class Recorder:
    def __init__(self, capacity: int, *, strict: bool = False, start_step: int = 0,
                 clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self._buf: deque = deque()
        self._cap = capacity
        self._clock = clock
        self._dropped = 0
        self._drop_lock = threading.Lock()
        self._in_step = False
        self._names: set[str] = set()
        self.usage = UsageErrors(strict)
        self.step_index = start_step
        # Read by the pipeline for the progress heartbeat (which step / phase / collective is open).
        self.open_step: tuple[int, int] | None = None  # (index, t_begin)
        self.current_phase: str | None = None
        self.current_collective: tuple[str, int] | None = None  # (op, t_begin)
        # Device-side marker (CudaRecorder: record a CUDA event); None: wall clock only.
        self.mark: Callable[[], Any] | None = None

    # ---- hot path ---------------------------------------------------------------------
    def step(self, tokens: int | None = None, samples: int | None = None,
             index: int | None = None) -> "_Step":
        return _Step(self, tokens, samples, index)

    def phase(self, name: str) -> "_Phase | _NullContext":
        try:
            known = name in self._names
        except TypeError:  # unhashable
            known = False
        if not known and not self._accept_name(name):
            return _NULL_CONTEXT
        return _Phase(self, name)

    def log(self, values: dict[str, Any]) -> None:
        for value in values.values():
            if type(value) not in _PLAIN:
                values = self._convert_values(values)
                if not values:
                    return
                break
        buf = self._buf
        if len(buf) < self._cap:
            buf.append((ev.LOG, self._clock(), values))
        else:
            self._drop()

    def emit(self, event: tuple) -> None:
        """Append one event (used by hooks); drops and counts when the buffer is full."""
        buf = self._buf
        if len(buf) < self._cap:
            buf.append(event)
        else:
            self._drop()

    def now(self) -> int:
        return self._clock()

    # ---- pipeline side ----------------------------------------------------------------
    def drain(self, limit: int | None = None) -> list[tuple]:
        """Remove and return buffered events in order (called by the pipeline thread)."""
        buf = self._buf
        out = []
        pop = buf.popleft
        n = len(buf) if limit is None else min(limit, len(buf))
        for _ in range(n):
            out.append(pop())
        return out

    @property
    def dropped(self) -> int:
        return self._dropped

    @property
    def buffered(self) -> int:
        return len(self._buf)

    # ---- internals --------------------------------------------------------------------
    def _drop(self) -> None:
        with self._drop_lock:
            self._dropped += 1

    def _convert_values(self, values: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for key, value in values.items():
            if type(value) in _PLAIN:
                out[key] = value
                continue
            try:
                out[key] = convert(value)
            except NotANumber as exc:
                self.usage.report("log-value", f"telemetry.log({key}=...) got {exc}; accepted: "
                                  "a number or a one-element tensor")
        return out

    def _accept_name(self, name: Any) -> bool:
        if not isinstance(name, str) or not name.isidentifier() or name in ev.RESERVED_PHASES:
            self.usage.report(
                "phase-name",
                f"telemetry.phase({name!r}): a phase name must be a Python identifier "
                f"(letters, digits, _; not starting with a digit), since it becomes the steps-table "
                f"column '<name>_s'; reserved: {', '.join(sorted(ev.RESERVED_PHASES))}")
            return False
        self._names.add(name)
        return True


class _Step:
    """One training step; a context manager, and a decorator through ``telemetry.step``."""

    __slots__ = ("_rec", "_tokens", "_samples", "_index", "_t0", "_live")

    def __init__(self, rec: Recorder, tokens: Any, samples: Any, index: Any) -> None:
        self._rec = rec
        self._tokens = tokens
        self._samples = samples
        self._index = index
        self._live = False

    def __enter__(self) -> "_Step":
        rec = self._rec
        if rec._in_step:
            rec.usage.report(
                "nested-step",
                f"telemetry.step() entered while step {rec.open_step[0] if rec.open_step else '?'} "
                "is still open; steps cannot nest (use telemetry.phase() for parts of a step)")
            return self
        index = self._index
        if index is None:
            index = rec.step_index
        elif type(index) is not int or index < 0:
            rec.usage.report("step-index", f"telemetry.step(index={index!r}): accepted: an int >= 0")
            index = rec.step_index
        self._index = index
        rec._in_step = True
        self._live = True
        t0 = rec._clock()
        self._t0 = t0
        rec.open_step = (index, t0)
        buf = rec._buf
        if len(buf) < rec._cap:
            buf.append((ev.STEP_BEGIN, t0, index))
        else:
            rec._drop()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if not self._live:
            return False
        rec = self._rec
        t1 = rec._clock()
        self._live = False
        rec._in_step = False
        rec.open_step = None
        rec.step_index = self._index + 1
        buf = rec._buf
        if len(buf) < rec._cap:
            buf.append((ev.STEP_END, t1, self._index, self._t0, exc_type is None,
                        self._tokens, self._samples))
        else:
            rec._drop()
        return False

    def __call__(self, fn: Callable) -> Callable:
        return step_decorator(fn, self._tokens, self._samples)


class _Phase:
    __slots__ = ("_rec", "_name", "_t0", "_prev")

    def __init__(self, rec: Recorder, name: str) -> None:
        self._rec = rec
        self._name = name

    def __enter__(self) -> "_Phase":
        rec = self._rec
        self._prev = rec.current_phase
        rec.current_phase = self._name
        self._t0 = rec._clock()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        rec = self._rec
        t1 = rec._clock()
        rec.current_phase = self._prev
        buf = rec._buf
        if len(buf) < rec._cap:
            buf.append((ev.PHASE, t1, self._name, self._t0, exc_type is None))
        else:
            rec._drop()
        return False

    def __call__(self, fn: Callable) -> Callable:
        return phase_decorator(fn, self._name)


class _NullContext:
    __slots__ = ()

    def __enter__(self) -> "_NullContext":
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False

    def __call__(self, fn: Callable) -> Callable:
        return fn  # a rejected phase name decorates nothing (the rejection was reported)


_NULL_CONTEXT = _NullContext()


class NullRecorder:
    """Active before ``init``, after ``shutdown`` and in forked children: records nothing."""

    usage = UsageErrors(strict=False)
    step_index = 0
    open_step = current_phase = current_collective = mark = None
    dropped = 0
    buffered = 0

    def step(self, tokens: Any = None, samples: Any = None, index: Any = None) -> "_NullStep":
        return _NullStep(tokens, samples)

    def phase(self, name: str) -> "_NullPhase":
        return _NullPhase(name)

    def log(self, values: dict[str, Any]) -> None:
        return None

    def emit(self, event: tuple) -> None:
        return None

    def now(self) -> int:
        return time.perf_counter_ns()

    def drain(self, limit: int | None = None) -> list[tuple]:
        return []


class _NullStep(_NullContext):
    __slots__ = ("_tokens", "_samples")

    def __init__(self, tokens: Any, samples: Any) -> None:
        self._tokens = tokens
        self._samples = samples

    def __call__(self, fn: Callable) -> Callable:
        return step_decorator(fn, self._tokens, self._samples)


class _NullPhase(_NullContext):
    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, fn: Callable) -> Callable:
        return phase_decorator(fn, self._name)  # decorated before init: records once init runs


NULL = NullRecorder()
_active: Recorder | NullRecorder = NULL


def active() -> Recorder | NullRecorder:
    return _active


def set_active(rec: Recorder | NullRecorder) -> None:
    global _active
    _active = rec


# Decorators look the recorder up at call time: functions decorated at import, before init, record.
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

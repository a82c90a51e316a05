"""The wall-clock recorder: timestamps into a bounded in-memory buffer, nothing else.

A :class:`Recorder` is what ``telemetry.step``, ``phase``, ``log``, ``watch`` and the collective
hooks write to. Each call reads the clock and appends one tuple (see :mod:`.events`); it does no
I/O, takes no lock that is held across user code, never touches the device, and decides nothing
per call that could have been decided at ``init``. When the buffer is full the event is dropped
and counted. The pipeline thread drains the buffer.

Strategies (the CUDA-event recorder in :mod:`.cuda`) subclass :class:`Recorder` through a small
protected interface: :func:`strategy_methods` makes their ``step()`` and ``phase()`` around their
own context types; contexts read the clock with ``_clock()``, append inline
(``buf = rec._buf``; append while ``len(buf) < rec._cap``, else ``rec._drop()``: a call to
``emit()`` would cost as much as the append itself), open a step with ``_begin_step(ctx)`` (which
checks nesting and the index) and close it inline, as ``StepContext.__exit__`` does.

>>> rec = Recorder(capacity=1024)
>>> with rec.step(tokens=128):
...     with rec.phase("forward"):
...         pass
>>> [e[0] for e in rec.drain()]   # STEP_BEGIN, PHASE, STEP_END
[0, 2, 1]
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable

from ..usage import UsageErrors
from . import events as ev
from .current import phase_decorator, step_decorator
from .null import NULL_CONTEXT
from .values import NotANumber, convert

_PLAIN = (float, int)


class Recorder:
    """The wall-clock strategy: every interval is timed with the host clock."""

    step: Callable[..., "StepContext"]  # (tokens=None, samples=None, index=None) -> a step context
    phase: Callable[[str], Any]  # (name) -> a phase context, or NULL_CONTEXT for a rejected name

    def __init__(
        self,
        capacity: int,
        *,
        strict: bool = False,
        start_step: int = 0,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
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
        # A profiler capture armed for this rank (recorder/capture.py): asked at each step's begin while set.
        self.capture: Any = None

    # ---- hot path ---------------------------------------------------------------------
    # step() and phase() are made for each strategy by strategy_methods() below, around its context
    # types: the type is then a closure variable, the cheapest read there is (a class attribute
    # read per call cost 3% of a phase here, counted with callgrind).

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

    # ---- protected: for the step and phase contexts of every strategy ------------------
    def _begin_step(self, ctx: "StepContext") -> bool:
        """Open ``ctx``'s step (its index checked, STEP_BEGIN appended); False if one is open."""
        if self._in_step:
            self.usage.report(
                "nested-step",
                f"telemetry.step() entered while step {self.open_step[0] if self.open_step else '?'} "
                "is still open; steps cannot nest (use telemetry.phase() for parts of a step), and a "
                "process has one step open at a time (a step entered from another thread meanwhile is "
                "ignored too)",
            )
            return False
        index = ctx._index
        if index is None:
            index = self.step_index
        elif type(index) is not int or index < 0:
            self.usage.report("step-index", f"telemetry.step(index={index!r}): accepted: an int >= 0")
            index = self.step_index
        ctx._index = index
        self._in_step = True
        ctx._live = True
        if self.capture is not None:  # armed only around a planned capture (it never raises)
            self.capture.on_step(index)
        t0 = self._clock()
        ctx._t0 = t0
        self.open_step = (index, t0)
        buf = self._buf
        if len(buf) < self._cap:
            buf.append((ev.STEP_BEGIN, t0, index))
        else:
            self._drop()
        return True

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
                self.usage.report(
                    "log-value", f"telemetry.log({key}=...) got {exc}; accepted: a number or a one-element tensor"
                )
        return out

    def _accept_name(self, name: Any) -> bool:
        if not isinstance(name, str) or not name.isidentifier() or name in ev.RESERVED_PHASES:
            self.usage.report(
                "phase-name",
                f"telemetry.phase({name!r}): a phase name must be a Python identifier "
                f"(letters, digits, _; not starting with a digit), since it becomes the steps-table "
                f"column '<name>_s'; reserved: {', '.join(sorted(ev.RESERVED_PHASES))}",
            )
            return False
        self._names.add(name)
        return True


class StepContext:
    """One training step; a context manager, and a decorator through ``telemetry.step``."""

    __slots__ = ("_rec", "_tokens", "_samples", "_index", "_t0", "_live")

    def __init__(self, rec: Recorder, tokens: Any, samples: Any, index: Any) -> None:
        self._rec = rec
        self._tokens = tokens
        self._samples = samples
        self._index = index
        self._live = False

    def __enter__(self) -> "StepContext":
        self._rec._begin_step(self)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if not self._live:
            return False
        rec = self._rec
        t1 = rec._clock()
        self._live = False  # the step is closed here, inline: a call would cost a third of the exit
        rec._in_step = False
        rec.open_step = None
        rec.step_index = self._index + 1
        buf = rec._buf
        if len(buf) < rec._cap:
            buf.append((ev.STEP_END, t1, self._index, self._t0, exc_type is None, self._tokens, self._samples))
        else:
            rec._drop()
        return False

    def __call__(self, fn: Callable) -> Callable:
        return step_decorator(fn, self._tokens, self._samples)


class PhaseContext:
    __slots__ = ("_rec", "_name", "_t0", "_prev")

    def __init__(self, rec: Recorder, name: str) -> None:
        self._rec = rec
        self._name = name

    def __enter__(self) -> "PhaseContext":
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


def strategy_methods(step_context: type, phase_context: type) -> tuple[Callable, Callable]:
    """``step`` and ``phase`` of a recorder whose contexts are these types."""

    def step(self: Recorder, tokens: int | None = None, samples: int | None = None, index: int | None = None) -> Any:
        return step_context(self, tokens, samples, index)

    def phase(self: Recorder, name: str) -> Any:
        try:
            known = name in self._names
        except TypeError:  # unhashable
            known = False
        if not known and not self._accept_name(name):
            return NULL_CONTEXT
        return phase_context(self, name)

    return step, phase


Recorder.step, Recorder.phase = strategy_methods(StepContext, PhaseContext)

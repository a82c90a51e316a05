"""The wall-clock recorder (:class:`Recorder`, what ``telemetry.step``, ``phase``, ``log``, ``watch`` and the
collective hooks write to): each call reads the clock and appends one tuple (:mod:`.events`) to a
bounded buffer, nothing else: no I/O, no lock held across user code, no device, nothing decided per
call that ``init`` could decide. A full buffer drops and counts; the pipeline thread drains it.
Strategies (:mod:`.cuda`) subclass :class:`Recorder` (its docstring says how).

>>> rec = Recorder(capacity=1024)
>>> with rec.step(tokens=128):
...     with rec.phase("forward"):
...         pass
>>> [e[0] for e in rec.drain()]   # PHASE, STEP_END
[2, 1]
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Literal, ParamSpec, TypeVar

from ..usage import UsageErrors
from . import events as ev
from .decorators import phase_decorator, step_decorator
from .null import NULL_CONTEXT
from .values import NotANumber, convert

if TYPE_CHECKING:
    from types import TracebackType

    from .capture import ProfilerCapture
    from .null import NullContext
    from .protocols import TimingEvent

P = ParamSpec("P")
R = TypeVar("R")

_PLAIN = (float, int)
# The kinds the contexts append, as this module's globals (one lookup, not two)
_STEP_END, _PHASE, _LOG = ev.STEP_END, ev.PHASE, ev.LOG


class Recorder:
    """The wall-clock strategy: every interval is timed with the host clock.

    Strategies subclass it through a small protected interface: they name their context types
    (``_step_type``, ``_phase_type``), which the recorder makes ahead and hands out again at each call.
    Contexts read the clock through a local (``clock = self._clock; clock()``: a callable held in an
    attribute is looked up unspecialized when called as ``self._clock()``), append inline (``buf =
    self._buf``; append while ``len(buf) < self._cap``, else ``rec._drop()``: a call to ``emit()`` would
    cost as much as the append itself), open a step inline when they can and with ``_begin_step(ctx)``
    otherwise (nesting, an index to check, a capture armed), and close it inline, as
    :class:`StepContext` does. The open step and phase are read off the contexts by the pipeline
    (``open_step``, ``current_phase``), never written by the hot path."""

    # This strategy's context types (a strategy's subclass names its own): the step context is made
    # once per recorder and handed out again at every step; a phase context once per phase name.
    _step_type: type[StepContext]
    _phase_type: type[PhaseContext]

    def __init__(
        self,
        capacity: int,
        *,
        strict: bool = False,
        start_step: int = 0,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self._buf: deque[tuple] = deque()
        self._cap = capacity
        self._clock = clock
        self._dropped = 0
        self._drop_lock = threading.Lock()
        self.usage = UsageErrors(strict)
        self.step_index = start_step
        # Read by the pipeline for the progress heartbeat: which collective is open (the open step
        # and phase are the properties open_step and current_phase, read off the contexts).
        # (op, t_begin, group instance id, call number): the collective the training thread is in
        self.current_collective: tuple[str, int, str, int] | None = None
        # the same for a wait no wrapper sees: DDP's finalize, waiting for its buckets (hooks/ddp.py)
        self.waiting_collective: tuple[str, int, str, int] | None = None
        # Device-side marker (CudaRecorder: record a CUDA event); None: wall clock only.
        self.mark: Callable[[], TimingEvent] | None = None
        # A profiler capture armed for this rank (recorder/capture.py): asked at each step's begin while set.
        self.capture: ProfilerCapture | None = None
        self._open: StepContext | None = None  # the step open now
        self._phases: dict[str, PhaseContext] = {}  # a phase name's context, made at the name's first use
        self._step = self._step_type(self)

    # ---- hot path ---------------------------------------------------------------------
    # Contexts are made ahead, not per call: the step context once per recorder, a phase's at its
    # name's first use; each holds the clock and the buffer itself (one attribute read, not two).
    # Counted with callgrind, a call's frame or an object made per call is a sixth of a phase.

    def step(self, tokens: int | None = None, samples: int | None = None, index: int | None = None) -> "StepContext":
        """The recorder's step context, loaded with this step's counts; a new one while a step is
        open (entered, it is reported as nested and ignored)."""
        ctx = self._step
        if self._open is not None:
            ctx = self._step_type(self)
        ctx._tokens = tokens
        ctx._samples = samples
        ctx._index = index
        return ctx

    def phase(self, name: str) -> PhaseContext | NullContext:
        """The context of phase ``name`` (the same object at each call), or NULL_CONTEXT for a
        rejected name (reported at each call: a rejected name is not kept)."""
        try:
            return self._phases[name]
        except (KeyError, TypeError):  # the name's first use (or unhashable: no name)
            if not self._accept_name(name):
                return NULL_CONTEXT
            ctx = self._phases[name] = self._phase_type(self, name)
            return ctx

    def log(self, values: dict[str, Any]) -> None:
        for value in values.values():
            if type(value) not in _PLAIN:
                values = self._convert_values(values)
                if not values:
                    return
                break
        clock = self._clock
        buf = self._buf
        if len(buf) < self._cap:
            buf.append((_LOG, clock(), values))
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

    @property
    def open_step(self) -> tuple[int, int] | None:
        """(index, t_begin) of the step open now, or None (for the progress heartbeat)."""
        ctx = self._open
        if ctx is None:
            return None
        index, t0 = ctx._index, ctx._t0
        # None while the step's start is being read (the training thread sets _open, then _t0)
        return None if index is None or t0 is None else (index, t0)

    @property
    def current_phase(self) -> str | None:
        """The innermost phase open now (the one that began last), or None."""
        name, last = None, -1
        for key, ctx in list(self._phases.items()):  # one C call: atomic against the training thread
            t0 = ctx._t0
            if t0 is not None and t0 > last:
                name, last = key, t0
        return name

    # ---- protected: for the step and phase contexts of every strategy ------------------
    def _begin_step(self, ctx: "StepContext") -> bool:
        """Open ``ctx``'s step (its index checked, its start read); False if one is open.

        The contexts' ``__enter__`` open a step inline when no step is open, no index is given and
        no capture is armed, and call this otherwise."""
        if self._open is not None:
            self.usage.report(
                "nested-step",
                f"telemetry.step() entered while step {self._open._index} "
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
        self._open = ctx
        if self.capture is not None:  # armed only around a planned capture (it never raises)
            self.capture.on_step(index)
        clock = self._clock
        ctx._t0 = clock()
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

    def _accept_name(self, name: object) -> bool:
        if not isinstance(name, str) or not name.isidentifier() or name in ev.RESERVED_PHASES:
            self.usage.report(
                "phase-name",
                f"telemetry.phase({name!r}): a phase name must be a Python identifier "
                f"(letters, digits, _; not starting with a digit), since it becomes the steps-table "
                f"column '<name>_s'; reserved: {', '.join(sorted(ev.RESERVED_PHASES))}",
            )
            return False
        return True


class StepContext:
    """One training step; a context manager, and a decorator through ``telemetry.step``.

    A recorder hands out the same one at every step (``Recorder.step`` loads the step's counts)."""

    __slots__ = ("_rec", "_tokens", "_samples", "_index", "_t0", "_clock", "_buf", "_cap")
    _tokens: int | None
    _samples: int | None
    _index: int | None  # an int while the step is open
    _t0: int | None
    _clock: Callable[[], int]
    _buf: deque[tuple]
    _cap: int

    def __init__(self, rec: Recorder) -> None:
        self._rec = rec
        self._clock = rec._clock
        self._buf = rec._buf
        self._cap = rec._cap
        self._tokens = self._samples = self._index = self._t0 = None

    def __enter__(self) -> "StepContext":
        rec = self._rec
        if rec._open is not None or self._index is not None or rec.capture is not None:
            rec._begin_step(self)  # nested, an index to check, or a capture to ask
            return self
        # _begin_step, inline (a call is a large share of the step's cost)
        self._index = rec.step_index
        rec._open = self
        clock = self._clock
        self._t0 = clock()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        rec = self._rec
        if rec._open is not self:  # never opened (nested: ignored)
            return False
        clock = self._clock
        t1 = clock()
        rec._open = None
        index = self._index
        rec.step_index = index + 1  # pyright: ignore[reportOptionalOperand] - open: __enter__ set an int
        buf = self._buf
        if len(buf) < self._cap:
            buf.append((_STEP_END, t1, index, self._t0, exc_type is None, self._tokens, self._samples))
        else:
            rec._drop()
        return False

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]:
        return step_decorator(fn, self._tokens, self._samples)


class PhaseContext:
    """A named part of a step. A recorder makes one per phase name and hands it out at every call:
    ``_t0`` is None while the phase is closed. Entered again while open (the same name nested, or
    open on two threads at once), the outer interval's start is kept in ``_outer`` and restored at
    the inner one's exit, so nesting on one thread times both; on two threads at once, the
    intervals are recorded but their starts may be swapped."""

    __slots__ = ("_rec", "_name", "_t0", "_outer", "_clock", "_buf", "_cap")
    _name: str
    _t0: int | None
    _outer: tuple | None  # the enclosing open's start and its own _outer (a strategy adds its fields)
    _clock: Callable[[], int]
    _buf: deque[tuple]
    _cap: int

    def __init__(self, rec: Recorder, name: str) -> None:
        self._rec = rec
        self._name = name
        self._clock = rec._clock
        self._buf = rec._buf
        self._cap = rec._cap
        self._t0 = self._outer = None

    def __enter__(self) -> "PhaseContext":
        if self._t0 is not None:  # open already
            self._outer = (self._t0, self._outer)
        clock = self._clock
        self._t0 = clock()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        clock = self._clock
        t1 = clock()
        buf = self._buf
        if len(buf) < self._cap:
            buf.append((_PHASE, t1, self._name, self._t0, exc_type is None))
        else:
            self._rec._drop()
        outer = self._outer
        if outer is None:
            self._t0 = None
        else:
            self._t0, self._outer = outer
        return False

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]:
        return phase_decorator(fn, self._name)


Recorder._step_type = StepContext
Recorder._phase_type = PhaseContext

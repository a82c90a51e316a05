"""The CUDA-event recorder: CUDA events recorded on the hot path, read on the pipeline thread.

On a GPU the host returns from a launch long before the kernel ends, so wall-clock phase times measure
launches, not work. With ``device_timing`` on (the default with CUDA), every step, phase and collective
also records a CUDA event on the current stream at its start and end (``event.record()``: no
synchronization), in the device-timed kinds of :mod:`.events`. The pipeline waits until the step's end
event has completed (``event.query()``, never blocking), places every event on the GPU timeline from
the step's start event, and returns the events to the pool. An async collective also records events
around its ``wait()``, where the current stream starts to wait for the communication stream.

>>> pool = EventPool(factory=lambda: FakeEvent())     # doctest: +SKIP
"""

from __future__ import annotations

import collections
import sys
from typing import TYPE_CHECKING, Any, Callable, Literal

from . import events as ev
from .protocols import TimingEvent as TimingEvent  # re-exported: where the hooks and the pipeline name it
from .wall import PhaseContext, Recorder, StepContext

if TYPE_CHECKING:
    from types import TracebackType

_STEP_END_DEV, _PHASE_DEV = ev.STEP_END_DEV, ev.PHASE_DEV


class EventPool:
    """Reusable timing events; ``mark()`` takes one and records it (the hooks' call; the step and
    phase contexts do the same inline, with ``take`` and ``new``)."""

    def __init__(self, factory: Callable[[], TimingEvent]) -> None:
        self._factory = factory  # events are made on first need, then reused
        self._free: collections.deque[TimingEvent] = collections.deque()
        self.take = self._free.popleft  # a free event; IndexError when none is free
        self.created = 0

    def new(self) -> TimingEvent:
        self.created += 1
        return self._factory()

    def mark(self) -> TimingEvent:
        take = self.take
        try:
            e = take()
        except IndexError:
            e = self.new()
        e.record()
        return e

    def release(self, events: list[TimingEvent]) -> None:
        self._free.extend(events)


# CudaPhase and CudaStep repeat their base classes' enter and exit with the event marks woven in
# (the pool's mark inline), rather than calling a hook from the base: the wall-clock path must not
# pay for a call it does not need (the strategy is chosen once, at init), and the CUDA one pays
# the wall clock's cost plus taking and recording its events, no call more.
class CudaPhase(PhaseContext):
    __slots__ = ("_e0", "_take", "_pool")
    _e0: TimingEvent | None

    def __init__(self, rec: "CudaRecorder", name: str) -> None:
        super().__init__(rec, name)
        self._pool = rec.pool
        self._take = rec.pool.take
        self._e0 = None

    def __enter__(self) -> "CudaPhase":
        if self._t0 is not None:  # open already (see PhaseContext)
            self._outer = (self._t0, self._e0, self._outer)
        try:
            take = self._take
            e0 = take()
        except IndexError:
            e0 = self._pool.new()
        e0.record()
        self._e0 = e0
        clock = self._clock
        self._t0 = clock()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        clock = self._clock
        t1 = clock()
        try:
            take = self._take
            e1 = take()
        except IndexError:
            e1 = self._pool.new()
        e1.record()
        buf = self._buf
        if len(buf) < self._cap:
            buf.append((_PHASE_DEV, t1, self._name, self._t0, exc_type is None, self._e0, e1))
        else:
            self._rec._drop()
        outer = self._outer
        if outer is None:
            self._t0 = None
        else:
            self._t0, self._e0, self._outer = outer
        return False


class CudaStep(StepContext):
    __slots__ = ("_e0", "_take", "_pool")
    _e0: TimingEvent | None

    def __init__(self, rec: "CudaRecorder") -> None:
        super().__init__(rec)
        self._pool = rec.pool
        self._take = rec.pool.take
        self._e0 = None

    def __enter__(self) -> "CudaStep":
        rec = self._rec
        if rec._open is not None or self._index is not None or rec.capture is not None:
            if rec._begin_step(self):
                self._e0 = self._pool.mark()  # rec.mark, the recorder's pool's
            return self
        self._index = rec.step_index
        rec._open = self
        clock = self._clock
        self._t0 = clock()
        try:
            take = self._take
            e0 = take()
        except IndexError:
            e0 = self._pool.new()
        e0.record()
        self._e0 = e0
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        rec = self._rec
        if rec._open is not self:  # never opened (nested: ignored)
            return False
        try:
            take = self._take
            e1 = take()
        except IndexError:
            e1 = self._pool.new()
        e1.record()
        clock = self._clock
        t1 = clock()
        rec._open = None
        index = self._index
        rec.step_index = index + 1  # pyright: ignore[reportOptionalOperand] - open: __enter__ set an int
        buf = self._buf
        if len(buf) < self._cap:
            buf.append(
                (_STEP_END_DEV, t1, index, self._t0, exc_type is None, self._tokens, self._samples, self._e0, e1)
            )
        else:
            rec._drop()
        return False


class CudaRecorder(Recorder):
    """Each interval also carries a start and an end CUDA event."""

    _step_type = CudaStep
    _phase_type = CudaPhase

    def __init__(self, capacity: int, pool: EventPool, **kwargs: Any) -> None:
        self.pool = pool  # before the base makes the step context, which holds it
        super().__init__(capacity, **kwargs)
        self.mark = pool.mark


def build_cuda_recorder(
    capacity: int, recorder_cls: type[CudaRecorder] = CudaRecorder, **kwargs: Any
) -> CudaRecorder | None:
    """A CudaRecorder (or ``recorder_cls``, a subclass) when torch sees a CUDA device, else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch
        except ImportError:
            return None
        torch = sys.modules["torch"]
    if not torch.cuda.is_available():
        return None
    pool = EventPool(lambda: torch.cuda.Event(enable_timing=True))
    return recorder_cls(capacity, pool, **kwargs)

"""The CUDA-event recorder: CUDA events recorded on the hot path, read on the pipeline thread.

On a GPU the host returns from a kernel launch long before the kernel ends, so wall-clock phase
times measure launches, not work. With ``device_timing`` on (the default when CUDA is available),
every step, phase and collective also records a CUDA event on the current stream at its start and
end (``event.record()``: no synchronization), in the device-timed event kinds of :mod:`.events`.
The pipeline waits until the step's end event has completed (``event.query()``, which never
blocks), places every event on the GPU timeline relative to the step's start event, and assembles
the record from those GPU times; the events then go back to the pool. An async collective also
records events around its ``wait()``, where the current stream starts to wait for the
communication stream.

>>> pool = EventPool(factory=lambda: FakeEvent())     # doctest: +SKIP
"""

from __future__ import annotations

import collections
import sys
from typing import Any, Callable

from . import events as ev
from .wall import PhaseContext, Recorder, StepContext, strategy_methods


class EventPool:
    """Reusable timing events; ``mark()`` is the hot-path call (take one, record it)."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self._factory = factory  # events are made on first need, then reused
        self._free: collections.deque = collections.deque()
        self.created = 0

    def mark(self) -> Any:
        try:
            e = self._free.popleft()
        except IndexError:
            e = self._factory()
            self.created += 1
        e.record()
        return e

    def release(self, events: list) -> None:
        self._free.extend(events)


# CudaPhase and CudaStep.__exit__ repeat their base classes' code with the event marks woven in,
# rather than calling a hook from the base: the wall-clock path must not pay for a call it does not
# need (the strategy is chosen once, at init).
class CudaPhase(PhaseContext):
    __slots__ = ("_e0",)

    def __enter__(self) -> "CudaPhase":
        rec = self._rec
        self._prev = rec.current_phase
        rec.current_phase = self._name
        self._e0 = rec.mark()
        self._t0 = rec._clock()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        rec = self._rec
        t1 = rec._clock()
        e1 = rec.mark()
        rec.current_phase = self._prev
        buf = rec._buf
        if len(buf) < rec._cap:
            buf.append((ev.PHASE_DEV, t1, self._name, self._t0, exc_type is None, self._e0, e1))
        else:
            rec._drop()
        return False


class CudaStep(StepContext):
    __slots__ = ("_e0",)

    def __enter__(self) -> "CudaStep":
        rec = self._rec
        if rec._begin_step(self):
            self._e0 = rec.mark()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if not self._live:
            return False
        rec = self._rec
        e1 = rec.mark()
        t1 = rec._clock()
        self._live = False
        rec._in_step = False
        rec.open_step = None
        rec.step_index = self._index + 1
        rec.emit(
            (ev.STEP_END_DEV, t1, self._index, self._t0, exc_type is None, self._tokens, self._samples, self._e0, e1)
        )
        return False


class CudaRecorder(Recorder):
    """Each interval also carries a start and an end CUDA event."""

    step, phase = strategy_methods(CudaStep, CudaPhase)

    def __init__(self, capacity: int, pool: EventPool, **kwargs: Any) -> None:
        super().__init__(capacity, **kwargs)
        self.pool = pool
        self.mark = pool.mark


def build_cuda_recorder(capacity: int, recorder_cls: type = CudaRecorder, **kwargs: Any) -> CudaRecorder | None:
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

"""Device-side timing on CUDA: CUDA events recorded on the hot path, read on the pipeline thread.

On a GPU the host returns from a kernel launch long before the kernel ends, so wall-clock phase
times measure launches, not work. With ``device_timing`` on (the default when CUDA is available),
every step, phase and collective also records a CUDA event on the current stream at its start and
end (``event.record()``: no synchronization). The pipeline waits until the step's end event has
completed (``event.query()``, which never blocks), places every event on the GPU timeline relative
to the step's start event, and assembles the record from those GPU times; the events then go back
to the pool. An async collective also records events around its ``wait()``, where the current
stream starts to wait for the communication stream.

>>> pool = EventPool(factory=lambda: FakeEvent())     # doctest: +SKIP
"""

from __future__ import annotations

import collections
from typing import Any, Callable

from .. import events as ev
from ..recorder import Recorder, _Phase, _Step


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


# _CudaPhase and _CudaStep repeat their base classes' enter/exit with the event marks woven in,
# rather than calling a hook from the base: the wall-clock hot path must not pay for a call it does
# not need (the strategy is chosen once, at init).
class _CudaPhase(_Phase):
    __slots__ = ("_e0",)

    def __enter__(self) -> "_CudaPhase":
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
            buf.append((ev.PHASE, t1, self._name, self._t0, exc_type is None, self._e0, e1))
        else:
            rec._drop()
        return False


class _CudaStep(_Step):
    __slots__ = ("_e0",)

    def __enter__(self) -> "_CudaStep":
        live_before = self._rec._in_step
        out = super().__enter__()
        if not live_before and self._live:
            self._e0 = self._rec.mark()
        return out

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
        buf = rec._buf
        if len(buf) < rec._cap:
            buf.append((ev.STEP_END, t1, self._index, self._t0, exc_type is None,
                        self._tokens, self._samples, self._e0, e1))
        else:
            rec._drop()
        return False


class CudaRecorder(Recorder):
    """The recorder strategy for CUDA: each interval also carries a start and an end event."""

    def __init__(self, capacity: int, pool: EventPool, **kwargs: Any) -> None:
        super().__init__(capacity, **kwargs)
        self.pool = pool
        self.mark = pool.mark

    def step(self, tokens: int | None = None, samples: int | None = None,
             index: int | None = None) -> _CudaStep:
        return _CudaStep(self, tokens, samples, index)

    def phase(self, name: str) -> Any:
        try:
            known = name in self._names
        except TypeError:
            known = False
        if not known and not self._accept_name(name):
            from ..recorder import _NULL_CONTEXT

            return _NULL_CONTEXT
        return _CudaPhase(self, name)


def device_events_of(e: tuple) -> tuple[Any, Any] | None:
    """The (start, end) CUDA events an event tuple carries, if any."""
    kind = e[0]
    if kind == ev.PHASE and len(e) == 7:
        return e[5], e[6]
    if kind == ev.COLLECTIVE and len(e) == 11:
        return e[9], e[10]
    if kind == ev.STEP_END and len(e) == 9:
        return e[7], e[8]
    return None


def build_cuda_recorder(capacity: int, **kwargs: Any) -> CudaRecorder | None:
    """A CudaRecorder when torch sees a CUDA device, else None."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch  # noqa: F401  (device timing needs torch; init may run before the user imports it)
        except ImportError:
            return None
        torch = sys.modules["torch"]
    if not torch.cuda.is_available():
        return None
    pool = EventPool(lambda: torch.cuda.Event(enable_timing=True))
    return CudaRecorder(capacity, pool, **kwargs)

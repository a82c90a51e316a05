"""Profiler ranges: every step and phase also opens a ``torch.profiler`` range (``profiler_ranges``).

With ``init(profiler_ranges=True)`` the recorder is one of the two classes below (chosen once, at
``init``; the default recorders do not change and pay nothing). Each step opens a range named
``telemetry.step#N`` (N: the step's index, as the run store numbers it) and each phase a range
named after the phase (``forward``, ...), so that a PyTorch profiler (Kineto) trace of the job
shows telemetry's steps and phases, and ``telemetry analyze TRACE_DIR`` (:mod:`telemetry.analysis.
kineto`) reads them back as the run store's own steps and phases. The ranges are user-scope record
functions (category ``user_annotation`` in the trace, projected onto the GPU timeline as
``gpu_user_annotation`` by Kineto), opened with ``torch._C._autograd._record_function_with_args_
enter``/``_exit``: about 2.5 us a range here, with or without a profiler running; a step with three
phases costs about 10-13 us more than with the default recorder (``bench/profiler_ranges.py``).
``torch.autograd.profiler.record_function``, the fallback where torch lacks them, costs about 7 us;
``_RecordFunctionFast`` 0.5 us, but its ranges are ``cpu_op``s, which Kineto does not project onto
the GPU timeline and no tool reads as annotations. The ranges are open whether or not a profiler
is recording (checking would save the cost between profiled windows, but
``_profiler_enabled()`` does not see on-demand (dynolog) profiling or other RecordFunction
observers such as execution traces). torch is imported only when this is on.

A phase's range encloses its timed interval; a step's range opens just after the step's start is
read (its index is known then) and closes after its end is read. A step's range therefore holds
its phases' ranges, which is how the trace reader tells telemetry's phases from other annotations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from .cuda import CudaPhase, CudaRecorder, CudaStep
from .wall import PhaseContext, Recorder, StepContext

if TYPE_CHECKING:
    from types import TracebackType

    from torch.autograd.profiler import record_function

    # The mixins below are mixed before a strategy's class (at run time their base is object): to the
    # checker, they extend it, and read its attributes.
    _StepBase = StepContext
    _PhaseBase = PhaseContext
    _RecorderBase = Recorder
else:
    _StepBase = _PhaseBase = _RecorderBase = object

STEP_RANGE = "telemetry.step#"  # + the step index: the name of a step's range in a profiler trace
WARMUP_RANGE = "telemetry.init"  # one empty range at init (see range_functions)

# enter(name) -> a range's handle; exit(handle)
RangeFunctions = tuple[Callable[[str], Any], Callable[[Any], Any]]


def range_functions() -> RangeFunctions:
    """(enter, exit): ``enter(name)`` opens a user-scope profiler range and returns its handle,
    ``exit(handle)`` closes it. The cheapest pair torch offers."""
    import torch

    autograd = getattr(torch._C, "_autograd", None)
    enter: Callable[[str], Any] | None = getattr(autograd, "_record_function_with_args_enter", None)
    leave: Callable[[Any], Any] | None = getattr(autograd, "_record_function_with_args_exit", None)
    if enter is None or leave is None:
        from torch.autograd.profiler import record_function

        def enter_function(name: str) -> record_function:
            r = record_function(name)
            r.__enter__()
            return r

        def leave_function(r: record_function) -> None:
            r.__exit__(None, None, None)

        enter, leave = enter_function, leave_function

    # torch's first range sets itself up (about 0.1 ms here, later ones 2-14 us): pay it now, at init,
    # not inside the first step, where it would lengthen step 0 and its first phase.
    leave(enter(WARMUP_RANGE))
    return enter, leave


class _RangedStep(_StepBase):
    """A step context that is also a profiler range: mixed before a strategy's step class, named in
    ``_base`` (called directly: super() costs about 3 us a step more here)."""

    __slots__ = ()
    _base: type[StepContext]
    _rec: _RangedRecorder
    _range: Any  # the open range's handle (range_functions)

    def __enter__(self) -> _RangedStep:
        self._base.__enter__(self)
        if self._rec._open is self:
            self._range = self._rec._range_enter(STEP_RANGE + str(self._index))
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if self._rec._open is not self:
            return False
        self._base.__exit__(self, exc_type, exc, tb)
        self._rec._range_exit(self._range)
        return False


class _RangedPhase(_PhaseBase):
    """A phase context that is also a profiler range, enclosing the phase's timed interval; the
    strategy's phase class is ``_base``. Its ranges are a stack: a phase context is entered again
    while open when its name nests (see PhaseContext)."""

    __slots__ = ()
    _base: type[PhaseContext]
    _rec: _RangedRecorder
    _ranges: list[Any]  # the open ranges' handles, innermost last

    def __init__(self, rec: _RangedRecorder, name: str) -> None:
        super().__init__(rec, name)
        self._ranges = []

    def __enter__(self) -> _RangedPhase:
        self._ranges.append(self._rec._range_enter(self._name))
        self._base.__enter__(self)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        self._base.__exit__(self, exc_type, exc, tb)
        self._rec._range_exit(self._ranges.pop())
        return False


class RangedStep(_RangedStep, StepContext):
    __slots__ = ("_range",)
    _base = StepContext


class RangedPhase(_RangedPhase, PhaseContext):
    __slots__ = ("_ranges",)
    _base = PhaseContext


class RangedCudaStep(_RangedStep, CudaStep):
    __slots__ = ("_range",)
    _base = CudaStep


class RangedCudaPhase(_RangedPhase, CudaPhase):
    __slots__ = ("_ranges",)
    _base = CudaPhase


class _RangedRecorder(_RecorderBase):
    """A recorder that holds the range functions its contexts call: mixed before a strategy."""

    def __init__(self, *args: Any, ranges: RangeFunctions, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._range_enter, self._range_exit = ranges


class RangedRecorder(_RangedRecorder, Recorder):
    """The wall-clock recorder, each step and phase also a profiler range."""

    _step_type = RangedStep
    _phase_type = RangedPhase


class RangedCudaRecorder(_RangedRecorder, CudaRecorder):
    """The CUDA-event recorder, each step and phase also a profiler range."""

    _step_type = RangedCudaStep
    _phase_type = RangedCudaPhase

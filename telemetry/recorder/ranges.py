"""Profiler ranges: every step and phase also opens a ``torch.profiler`` range (``profiler_ranges``).

With ``init(profiler_ranges=True)`` the recorder is one of the two classes below (chosen once, at
``init``; the default recorders do not change and pay nothing; torch is imported only then). A step
opens ``telemetry.step#N`` (N: the run store's step index) and a phase a range of its name, user-scope
record functions (:func:`range_functions`), so that a Kineto trace shows telemetry's steps and phases
and ``telemetry analyze TRACE_DIR`` reads them back. The rule the trace reader relies on: a phase's
range encloses its timed interval, and a step's range (opened just after its start is read, closed
after its end) holds its phases' ranges. The cost per step: bench/RESULTS.md, "Profiler ranges".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Literal

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
    ``exit(handle)`` closes it. The cheapest pair torch offers whose ranges Kineto projects onto the GPU
    timeline (``user_annotation``, ``gpu_user_annotation``): ``torch.autograd.profiler.record_function``
    is the slower fallback where torch lacks it; ``_RecordFunctionFast``'s ranges are ``cpu_op``s, which
    Kineto does not project and no tool reads as annotations. The ranges are open whether or not a
    profiler is recording: ``_profiler_enabled()`` does not see on-demand (dynolog) profiling or other
    RecordFunction observers such as execution traces."""
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

    # torch's first range sets itself up, far slower than the later ones: pay it now, at init, not
    # inside the first step, where it would lengthen step 0 and its first phase.
    leave(enter(WARMUP_RANGE))
    return enter, leave


class _RangedStep(_StepBase):
    """A step context that is also a profiler range: mixed before a strategy's step class, named in
    ``_base`` (called directly: super() would cost more on every step)."""

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
    ) -> Literal[False]:
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
    ) -> Literal[False]:
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

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

from typing import Any, Callable

from .cuda import CudaPhase, CudaRecorder, CudaStep
from .wall import PhaseContext, Recorder, StepContext, strategy_methods

STEP_RANGE = "telemetry.step#"  # + the step index: the name of a step's range in a profiler trace


def range_functions() -> tuple[Callable[[str], Any], Callable[[Any], Any]]:
    """(enter, exit): ``enter(name)`` opens a user-scope profiler range and returns its handle,
    ``exit(handle)`` closes it. The cheapest pair torch offers."""
    import torch  # noqa: F401  (only when profiler ranges are on)

    autograd = getattr(torch._C, "_autograd", None)
    enter = getattr(autograd, "_record_function_with_args_enter", None)
    leave = getattr(autograd, "_record_function_with_args_exit", None)
    if enter is not None and leave is not None:
        return enter, leave
    from torch.autograd.profiler import record_function

    def enter_slow(name: str) -> Any:
        r = record_function(name)
        r.__enter__()
        return r

    return enter_slow, lambda r: r.__exit__(None, None, None)


class RangedStep(StepContext):
    __slots__ = ("_range",)

    def __enter__(self) -> "RangedStep":
        rec = self._rec
        if rec._begin_step(self):
            self._range = rec._range_enter(STEP_RANGE + str(self._index))
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if not self._live:
            return False
        StepContext.__exit__(self, exc_type, exc, tb)
        self._rec._range_exit(self._range)
        return False


class RangedPhase(PhaseContext):
    __slots__ = ("_range",)

    def __enter__(self) -> "RangedPhase":
        self._range = self._rec._range_enter(self._name)
        PhaseContext.__enter__(self)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        PhaseContext.__exit__(self, exc_type, exc, tb)
        self._rec._range_exit(self._range)
        return False


class RangedCudaStep(CudaStep):
    __slots__ = ("_range",)

    def __enter__(self) -> "RangedCudaStep":
        rec = self._rec
        if rec._begin_step(self):
            self._e0 = rec.mark()
            self._range = rec._range_enter(STEP_RANGE + str(self._index))
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if not self._live:
            return False
        CudaStep.__exit__(self, exc_type, exc, tb)
        self._rec._range_exit(self._range)
        return False


class RangedCudaPhase(CudaPhase):
    __slots__ = ("_range",)

    def __enter__(self) -> "RangedCudaPhase":
        self._range = self._rec._range_enter(self._name)
        CudaPhase.__enter__(self)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        CudaPhase.__exit__(self, exc_type, exc, tb)
        self._rec._range_exit(self._range)
        return False


class RangedRecorder(Recorder):
    """The wall-clock recorder, each step and phase also a profiler range."""

    step, phase = strategy_methods(RangedStep, RangedPhase)

    def __init__(self, capacity: int, *, ranges: tuple[Callable, Callable], **kwargs: Any) -> None:
        super().__init__(capacity, **kwargs)
        self._range_enter, self._range_exit = ranges


class RangedCudaRecorder(CudaRecorder):
    """The CUDA-event recorder, each step and phase also a profiler range."""

    step, phase = strategy_methods(RangedCudaStep, RangedCudaPhase)

    def __init__(self, capacity: int, pool: Any, *, ranges: tuple[Callable, Callable], **kwargs: Any) -> None:
        super().__init__(capacity, pool, **kwargs)
        self._range_enter, self._range_exit = ranges

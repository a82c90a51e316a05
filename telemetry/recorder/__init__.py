"""The hot path: where ``step``, ``phase``, ``log``, ``watch`` and the hooks put their timestamps.

Three strategies side by side, chosen once at ``init`` by :func:`build_recorder`: the wall-clock
:class:`Recorder` (:mod:`.wall`), the CUDA-event :class:`~.cuda.CudaRecorder` (:mod:`.cuda`) and the
:class:`NullRecorder` (:mod:`.null`) that is active when telemetry is off. :mod:`.current` holds
the one that is active now; :mod:`.events` the tuples they append; :mod:`.values` turns logged
values into numbers without synchronizing the device.
"""

from __future__ import annotations

from typing import Any

from ..config import ConfigError
from . import current
from .cuda import build_cuda_recorder
from .null import NULL, NullRecorder
from .wall import Recorder

current.set_active(NULL)


def build_recorder(
    capacity: int, device_timing: str = "wall", profiler_ranges: bool = False, **kwargs: Any
) -> Recorder:
    """The strategy for this process: CUDA events when timing on the device, else the wall clock;
    with ``profiler_ranges`` the same, each step and phase also a torch.profiler range
    (:mod:`.ranges`, which imports torch; not imported at all otherwise).

    ``device_timing``: ``wall``; ``auto`` (CUDA when torch sees a device); ``cuda`` (required:
    raises ConfigError without a device).
    """
    wall_cls: type[Recorder] = Recorder
    cuda_kwargs: dict[str, Any] = {}
    if profiler_ranges:
        from . import ranges

        try:
            functions = ranges.range_functions()
        except ImportError:
            raise ConfigError(
                "profiler_ranges=True needs torch (torch.profiler), which is not "
                "installed; accepted here: profiler_ranges=False"
            ) from None
        wall_cls = ranges.RangedRecorder
        kwargs = {**kwargs, "ranges": functions}
        cuda_kwargs = {"recorder_cls": ranges.RangedCudaRecorder}
    if device_timing != "wall":
        rec = build_cuda_recorder(capacity, **cuda_kwargs, **kwargs)
        if rec is not None:
            return rec
        if device_timing == "cuda":
            raise ConfigError("device_timing='cuda' but torch sees no CUDA device; accepted here: auto or wall")
    return wall_cls(capacity, **kwargs)


__all__ = ["NULL", "NullRecorder", "Recorder", "build_recorder", "current"]

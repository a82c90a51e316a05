"""Turning what ``telemetry.log`` receives into numbers without synchronizing the device.

A CPU tensor or NumPy scalar is read at once (no device involved). A CUDA tensor is copied to host
memory asynchronously behind a CUDA event on the caller's stream; the pipeline reads it once the
event has completed, so the training thread never waits for the GPU.
"""

from __future__ import annotations

import sys
from typing import Any


class PendingValue:
    """A device scalar on its way to the host; ``ready()`` never blocks."""

    __slots__ = ("host", "event")

    def __init__(self, host: Any, event: Any) -> None:
        self.host = host
        self.event = event

    def ready(self) -> bool:
        return self.event is None or bool(self.event.query())

    def value(self) -> float:
        return float(self.host.item())


class NotANumber(TypeError):
    pass


def convert(value: Any) -> Any:
    """Return a float/int, or a PendingValue for a CUDA tensor. Raises NotANumber otherwise."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise NotANumber(f"a tensor of shape {tuple(value.shape)}")
        if value.device.type == "cpu":
            return value.item()
        v = value.detach().reshape(())
        host = v.to("cpu", non_blocking=True)
        event = torch.cuda.Event() if v.device.type == "cuda" else None
        if event is not None:
            event.record()
        return PendingValue(host, event)
    if isinstance(value, bool):
        return int(value)
    try:
        out = float(value)  # NumPy scalars, Decimal, ...
    except (TypeError, ValueError):
        raise NotANumber(type(value).__name__) from None
    return out

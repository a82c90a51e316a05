"""Turning what ``telemetry.log`` receives into numbers without synchronizing the device.

A CPU tensor or NumPy scalar is read at once (no device involved). A CUDA tensor is copied to host
memory asynchronously behind a CUDA event on the caller's stream; the pipeline reads it once the
event has completed, so the training thread never waits for the GPU.
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any, final

if TYPE_CHECKING:
    import torch


@final
class PendingValue:
    """A device scalar on its way to the host; ``ready()`` never blocks."""

    __slots__ = ("host", "event")

    def __init__(self, host: torch.Tensor, event: torch.cuda.Event | None) -> None:
        self.host = host
        self.event = event

    def ready(self) -> bool:
        return self.event is None or bool(self.event.query())

    def value(self) -> float:
        return float(self.host.item())


class NotANumber(TypeError):
    pass


def convert(value: Any) -> int | float | PendingValue:
    """Return a float/int, or a PendingValue for a CUDA tensor. Raises NotANumber otherwise.

    A real number only: text, bytes and complex numbers are refused (``float("nan")`` of a string
    would turn a typo into a diverged loss), and a number too large for a float becomes an
    infinity of its sign (then counted as non-finite), never an OverflowError in the caller."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise NotANumber(f"a tensor of shape {tuple(value.shape)}")
        if value.is_complex():
            raise NotANumber(f"a complex tensor ({value.dtype})")
        if value.device.type == "cpu":
            return _real(value.item())
        v = value.detach().reshape(())
        host = v.to("cpu", non_blocking=True)
        event = torch.cuda.Event() if v.device.type == "cuda" else None
        if event is not None:
            event.record()
        return PendingValue(host, event)
    return _real(value)


def _real(value: Any) -> int | float:
    if isinstance(value, bool):
        return int(value)
    if type(value) is int:
        return value if -_MAX_INT <= value <= _MAX_INT else (math.inf if value > 0 else -math.inf)
    if isinstance(value, (str, bytes, bytearray, complex)):
        raise NotANumber(type(value).__name__)
    try:
        return float(value)  # NumPy scalars, Decimal, Fraction, ...
    except OverflowError:
        try:
            return math.inf if value > 0 else -math.inf
        except Exception:  # noqa: BLE001 - a user type: whatever it raises stays out of the training loop
            raise NotANumber(type(value).__name__) from None
    except Exception:  # noqa: BLE001 - TypeError, ValueError, or anything a user type's __float__ raises
        raise NotANumber(type(value).__name__) from None


_MAX_INT = 2**1023  # about the largest float; an int beyond it cannot be stored as one

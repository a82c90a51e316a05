"""The pipeline thread and what flows through it: events -> step records -> sinks.

:mod:`.thread` drains the recorder every flush interval; :mod:`.assembler` turns events into
:mod:`.records`; :mod:`.sinks` is the one small interface every backend implements, and the guard
that isolates a failing one.
"""

from .records import OnlineResult, Progress, Span, StepRecord
from .sinks import Sink
from .thread import Pipeline

__all__ = ["OnlineResult", "Pipeline", "Progress", "Sink", "Span", "StepRecord"]

"""What the recorder's modules need of one another, as Protocols: the bottom of the folder, importing none of
them, so that the modules that name these types import downward only.

- :class:`TimingEvent`: a device timing event (``torch.cuda.Event(enable_timing=True)``), what the CUDA
  recorder records and the null and wall-clock recorders' ``mark`` returns.
- :class:`ActiveRecorder`: what the decorators of :mod:`.decorators` call on the recorder active now (the
  wall-clock :class:`~.wall.Recorder`, a strategy's subclass, or the :class:`~.null.NullRecorder`), and
  :class:`Interval`, the step or phase context it hands out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from types import TracebackType


class TimingEvent(Protocol):
    """What the recorder needs of a timing event: ``torch.cuda.Event(enable_timing=True)``'s calls."""

    def record(self) -> None: ...

    def query(self) -> bool: ...

    def elapsed_time(self, end_event: "TimingEvent", /) -> float: ...


class Interval(Protocol):
    """A step or phase context, as a ``with`` statement uses it: its exit never swallows the exception
    (``Literal[False]``), so a decorated function returns what it returns or raises what it raises."""

    def __enter__(self) -> object: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None, /
    ) -> Literal[False]: ...


class ActiveRecorder(Protocol):
    """What the decorators call on the active recorder at each call of a decorated function."""

    def step(self, tokens: int | None = None, samples: int | None = None, index: int | None = None) -> Interval: ...

    def phase(self, name: str) -> Interval: ...

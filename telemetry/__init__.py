"""training-telemetry: per-step, per-rank telemetry for distributed PyTorch training.

>>> import telemetry
>>> telemetry.init(run_dir="runs/exp1", job="exp1")          # doctest: +SKIP
>>> for batch in telemetry.watch(loader):                      # doctest: +SKIP
...     with telemetry.step(tokens=n_tokens, samples=bs):
...         with telemetry.phase("forward"): ...
...         telemetry.log(loss=loss)
>>> telemetry.shutdown()                                       # doctest: +SKIP

Importing this package is cheap: it imports no torch, starts no thread and opens no file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, ParamSpec, TypeVar, overload

from .api import init, session, shutdown, stats
from .config import Config, ConfigError
from .hooks.checkpoint import CheckpointTimer
from .hooks.collectives import instrument_collectives, uninstrument_collectives
from .hooks.dataloader import watch
from .hooks.ddp import ddp_comm_hook, instrument_ddp
from .recorder import current as _current
from .recorder.current import step_decorator
from .usage import TelemetryUsageError
from .version import __version__ as __version__  # re-exported: telemetry.__version__

if TYPE_CHECKING:
    from .hooks.dataset import WatchedDataset, WatchedIterableDataset
    from .recorder.null import NullContext, NullStep
    from .recorder.wall import PhaseContext, StepContext

P = ParamSpec("P")
R = TypeVar("R")


@overload
def step(fn: Callable[P, R], /) -> Callable[P, R]: ...


@overload
def step(
    fn: None = None, /, tokens: int | None = None, samples: int | None = None, index: int | None = None
) -> StepContext | NullStep: ...


def step(
    fn: Callable[P, R] | None = None,
    /,
    tokens: int | None = None,
    samples: int | None = None,
    index: int | None = None,
) -> Callable[P, R] | StepContext | NullStep:
    """One training step: ``with telemetry.step(tokens=n):`` or ``@telemetry.step``.

    ``tokens`` and ``samples`` count the work done (for throughput); ``index`` overrides the step
    number (by default steps count up from ``init(start_step=...)``, 0 unless set). Pass them by
    keyword. (They are not declared keyword-only: CPython 3.11 specializes no call to a function
    with keyword-only parameters, and the generic call cost a tenth of the step here.)
    """
    if fn is not None:
        if not callable(fn):
            raise TypeError(
                "telemetry.step takes keyword arguments only (tokens=, samples=, index=), "
                f"or is used bare as a decorator; got {fn!r}"
            )
        return step_decorator(fn)
    # Recorder.step, inline (a call is a large share of the step's cost): the active recorder's step
    # context, loaded with this step's counts; a new one while a step is open (nested: ignored).
    rec = _current._active
    if rec._open is not None:
        return rec.step(tokens, samples, index)
    ctx = rec._step
    ctx._tokens = tokens
    ctx._samples = samples
    ctx._index = index
    return ctx


def phase(name: str) -> PhaseContext | NullContext:
    """A named part of a step (``forward``, ``backward``, ...): context manager or decorator."""
    try:
        return _current._phases[name]  # the active recorder's context for this name
    except (KeyError, TypeError):  # the name's first use (or no name): the recorder checks it
        return _current._active.phase(name)


def checkpoint(kind: str = "save", path: str | None = None, nbytes: int | None = None) -> CheckpointTimer:
    """A checkpoint save or load done by any means: ``with telemetry.checkpoint("save", path=p):``.

    The block's time is the blocking checkpoint time of the step it ends in (``io.checkpoint_s``);
    ``nbytes`` (or set ``.nbytes`` inside the block), else the size of ``path`` (a file or a directory)
    after the block, is ``io.checkpoint_bytes``. ``torch.distributed.checkpoint``'s save, async_save and
    load are timed without it (``init(checkpoints=True)``, the default).
    """
    return CheckpointTimer(kind, path, nbytes)


def watch_dataset(dataset: Any) -> WatchedDataset | WatchedIterableDataset:
    """``dataset`` wrapped so that the time its DataLoader's workers spend fetching items is measured
    (``dev.input_fetch_seconds``, ``dev.input_fetched_items``, ``dev.input_workers``): wrap it before the
    DataLoader is built, ``DataLoader(telemetry.watch_dataset(ds), num_workers=4)``. Imports torch."""
    from .hooks.dataset import watch_dataset as _watch_dataset

    return _watch_dataset(dataset)


def log(**values: Any) -> None:
    """Attach scalars to the current step; tensors are read without synchronizing the device.

    ``tokens=`` and ``samples=`` are added to the step's counts.
    """
    _current._active.log(values)


__all__ = [
    "Config",
    "ConfigError",
    "TelemetryUsageError",
    "checkpoint",
    "ddp_comm_hook",
    "init",
    "instrument_collectives",
    "instrument_ddp",
    "log",
    "phase",
    "session",
    "shutdown",
    "stats",
    "step",
    "uninstrument_collectives",
    "watch",
    "watch_dataset",
]

"""``telemetry.watch(loader)``: time the training loop spends blocked waiting for the next batch.

The wait of each ``next()`` is appended as one event and lands in the ``data_s`` column of the step
that follows (see :mod:`telemetry.pipeline.assembler`). The batch size is read from the batch when it is a
tensor, or a tuple, list or dict whose first tensor has a leading batch dimension; ``tokens`` may
be an int per batch or a function of the batch.

>>> for batch in watch(range(3)):   # any iterable works
...     pass
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Iterable, Iterator

from ..recorder import current as _current
from ..recorder import events as ev


def _batch_size(batch: Any) -> int | None:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() > 0 else None
    if isinstance(batch, dict):
        batch = next(iter(batch.values()), None)
        return _batch_size(batch) if isinstance(batch, torch.Tensor) else None
    if isinstance(batch, (tuple, list)) and batch:
        first = batch[0]
        if isinstance(first, torch.Tensor):
            return int(first.shape[0]) if first.dim() > 0 else None
    return None


class Watched:
    """An iterable that times each ``next()`` of the one it wraps; ``len()`` passes through."""

    def __init__(
        self,
        iterable: Iterable,
        tokens: int | Callable[[Any], int] | None = None,
        samples: int | Callable[[Any], int] | None = None,
    ) -> None:
        self.iterable = iterable
        self.tokens = tokens
        self.samples = samples

    def __len__(self) -> int:
        return len(self.iterable)  # pyright: ignore[reportArgumentType] - an iterable without len() raises here, as unwrapped

    def __iter__(self) -> Iterator:
        tokens, samples = self.tokens, self.samples
        rec = _current._active
        t0 = rec.now()
        it = iter(self.iterable)  # starting workers is part of the first wait
        while True:
            try:
                batch = next(it)
            except StopIteration:
                return
            rec = _current._active
            t1 = rec.now()
            n_samples = (
                samples(batch) if callable(samples) else (samples if samples is not None else _batch_size(batch))
            )
            n_tokens = tokens(batch) if callable(tokens) else tokens
            rec.emit((ev.DATA, t1, t0, n_samples, n_tokens))
            yield batch
            t0 = rec.now()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.iterable, name)


def watch(
    iterable: Iterable,
    *,
    tokens: int | Callable[[Any], int] | None = None,
    samples: int | Callable[[Any], int] | None = None,
) -> Watched:
    return Watched(iterable, tokens=tokens, samples=samples)

"""``telemetry.watch_dataset(dataset)``: the time a DataLoader's workers spend fetching, seen from the
dataset they fetch from (the DataLoader's own internals are never touched).

:class:`WatchedDataset` (map-style) and :class:`WatchedIterableDataset` time each fetch in whatever
process runs it; each worker adds its fetch time and item count to its own slot of a small
shared-memory table (:class:`_Slots`, made before the workers start, so forked and spawned workers
write the same memory), and the rank's sampler reads the sums off the training thread
(:class:`_Fetches`): ``input_fetch_seconds``, ``input_fetched_items``, ``input_workers``. Limits: at
most ``SLOTS`` workers have a slot of their own (two sharing one may lose an addition made at the same
instant); a worker killed mid-item loses that item's time; the collate function is not counted. More:
docs/instrumenting.md, "The input pipeline".
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Iterator

import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from ..recorder import readers

if TYPE_CHECKING:
    import numpy as np

SLOTS = 64  # worker slots; slot 0 is the rank's own process, worker k writes slot 1 + k % SLOTS
FETCH_S, ITEMS, WORKERS = 0, 1, 2  # the table's columns


class _Slots:
    """The shared table of one watched dataset: (1 + SLOTS) rows of fetch seconds, items, and the
    worker count the writer saw."""

    def __init__(self) -> None:
        self.table = torch.zeros((1 + SLOTS, 3), dtype=torch.float64).share_memory_()
        self._view: np.ndarray | None = None  # a numpy view, made in whichever process writes (never pickled)

    def __getstate__(self) -> dict[str, torch.Tensor]:
        return {"table": self.table}

    def __setstate__(self, state: dict[str, torch.Tensor]) -> None:
        self.table = state["table"]
        self._view = None

    def add(self, seconds: float, items: int) -> None:
        view = self._view
        if view is None:
            view = self._view = self.table.numpy()
        info = get_worker_info()
        if info is None:
            row = view[0]
        else:
            row = view[1 + info.id % SLOTS]
            row[WORKERS] = info.num_workers
        row[FETCH_S] += seconds
        row[ITEMS] += items

    def sums(self) -> tuple[float, float, float]:
        t = self.table.numpy()
        return float(t[:, FETCH_S].sum()), float(t[:, ITEMS].sum()), float(t[1:, WORKERS].max())


class _Fetches:
    """The one reader the sampler reads: every watched dataset's table, summed. Tables are held for
    the process's life (a few hundred bytes each), so a dataset dropped mid-run does not take its
    counts back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: list[_Slots] = []

    def add(self, slots: _Slots) -> None:
        with self._lock:
            self._slots.append(slots)

    def read(self) -> dict[str, float]:
        with self._lock:
            slots = list(self._slots)
        fetch = items = workers = 0.0
        for s in slots:
            f, n, w = s.sums()
            fetch, items, workers = fetch + f, items + n, max(workers, w)
        return {"input_fetch_seconds": fetch, "input_fetched_items": items, "input_workers": workers}


_FETCHES = _Fetches()


class WatchedDataset(Dataset):
    """A map-style dataset whose fetches are timed; ``len()`` and attributes pass through."""

    def __init__(self, dataset: Any, slots: _Slots) -> None:
        self.dataset = dataset
        self._slots = slots

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: Any) -> Any:
        t0 = time.perf_counter()
        item = self.dataset[index]
        self._slots.add(time.perf_counter() - t0, 1)
        return item

    def __getitems__(self, indices: list) -> list:
        t0 = time.perf_counter()
        many = getattr(self.dataset, "__getitems__", None)
        items = many(indices) if many is not None else [self.dataset[i] for i in indices]
        self._slots.add(time.perf_counter() - t0, len(indices))
        return items

    def __getattr__(self, name: str) -> Any:
        if name in ("dataset", "_slots"):  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.dataset, name)


class WatchedIterableDataset(IterableDataset):
    """An iterable dataset whose every ``next()`` is timed, in the worker that runs it."""

    def __init__(self, dataset: Any, slots: _Slots) -> None:
        self.dataset = dataset
        self._slots = slots

    def __iter__(self) -> Iterator:
        it = iter(self.dataset)
        add = self._slots.add
        while True:
            t0 = time.perf_counter()
            try:
                item = next(it)
            except StopIteration:
                return
            add(time.perf_counter() - t0, 1)
            yield item

    def __getattr__(self, name: str) -> Any:
        if name in ("dataset", "_slots"):
            raise AttributeError(name)
        return getattr(self.dataset, name)


def watch_dataset(dataset: Any) -> WatchedDataset | WatchedIterableDataset:
    """``dataset`` wrapped so that its fetches, in the DataLoader's workers or in the rank itself, are
    timed and counted (readings ``input_fetch_seconds``, ``input_fetched_items``, ``input_workers``).
    Wrap it before building the DataLoader: ``DataLoader(telemetry.watch_dataset(ds), num_workers=4)``."""
    if isinstance(dataset, (WatchedDataset, WatchedIterableDataset)):
        return dataset
    if not hasattr(dataset, "__getitem__") and not hasattr(dataset, "__iter__"):
        raise TypeError(
            f"telemetry.watch_dataset: dataset must be a map-style dataset (with __getitem__) or an iterable "
            f"one (with __iter__); got {type(dataset).__name__}"
        )
    slots = _Slots()
    _FETCHES.add(slots)
    readers.add(_FETCHES)
    if isinstance(dataset, IterableDataset) or not hasattr(dataset, "__getitem__"):
        return WatchedIterableDataset(dataset, slots)
    return WatchedDataset(dataset, slots)

"""``telemetry.watch_dataset``: the workers' fetch time and items, read by the sampler from a shared
table (telemetry/hooks/dataset.py), with a real DataLoader and its worker processes."""

import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

import telemetry
from telemetry.hooks.dataset import _FETCHES
from telemetry.recorder import readers


class Slow(Dataset):
    def __init__(self, n: int, sleep_s: float) -> None:
        self.n, self.sleep_s = n, sleep_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.sleep_s)
        return torch.full((4,), float(i))


class Stream(IterableDataset):
    def __iter__(self):
        for i in range(6):
            time.sleep(0.002)
            yield torch.tensor([i])


def _read() -> dict[str, float]:
    return _FETCHES.read()


@pytest.mark.real_clock  # a fetch time measured against sleeps of known real length
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_workers_fetch_time_and_items_reach_the_sampler(context):
    before = _read()
    ds = telemetry.watch_dataset(Slow(16, 0.005))
    assert len(ds) == 16 and ds.sleep_s == 0.005  # passes through
    loader = DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context=context)
    got = torch.cat([b for b in loader])
    assert got.shape == (16, 4)
    after = _read()
    assert after["input_fetched_items"] - before["input_fetched_items"] == 16
    # every item slept 5 ms in a worker: at least 80 ms of fetching, summed over the two workers
    assert after["input_fetch_seconds"] - before["input_fetch_seconds"] >= 16 * 0.005
    assert after["input_workers"] >= 2
    assert _FETCHES in readers.current()  # the sampler reads it


@pytest.mark.real_clock  # a fetch time measured against sleeps of known real length
def test_no_workers_and_an_iterable_dataset_are_timed_in_the_process_that_fetches():
    before = _read()
    assert [b.item() for b in DataLoader(telemetry.watch_dataset(Stream()), batch_size=None)] == list(range(6))
    items = list(DataLoader(telemetry.watch_dataset(Slow(3, 0.0)), batch_size=3))  # __getitems__ path
    assert len(items) == 1
    after = _read()
    assert after["input_fetched_items"] - before["input_fetched_items"] == 9
    assert after["input_fetch_seconds"] - before["input_fetch_seconds"] >= 6 * 0.002


def test_a_watched_dataset_is_not_wrapped_twice_and_a_non_dataset_is_refused():
    ds = telemetry.watch_dataset(Slow(2, 0.0))
    assert telemetry.watch_dataset(ds) is ds
    with pytest.raises(TypeError, match="map-style dataset .* or an iterable"):
        telemetry.watch_dataset(42)

"""telemetry.watch(loader) (telemetry/hooks/dataloader.py): the wait measured per step, for every kind
of DataLoader (forked workers here; spawned ones in tests/integration/test_dataloader_spawn.py)."""

import os
import statistics

import pytest
import torch

import telemetry
from telemetry.analysis.inputs.load import open_input
from tests.helpers.loader_datasets import SleepyMap, SleepyStream, watched, workers_record_nothing


@pytest.mark.real_clock  # a measured wait against a sleep of known real length
def test_measured_wait_matches_a_known_delay_within_10_percent(run_dir):
    # num_workers=0: each next() builds a batch of 4 items at 25 ms each, 100 ms in all
    t = watched(run_dir, torch.utils.data.DataLoader(SleepyMap(40, 0.025), batch_size=4))
    assert len(t) == 10 and (t["samples"] == 4).all()
    assert statistics.median(t["data_s"]) == pytest.approx(0.100, rel=0.10)
    assert (t["duration_s"] < 0.01).all()  # the wait is outside the step's own time


def test_worker_processes_record_nothing_and_start_nothing(run_dir, tmp_path):
    workers_record_nothing(run_dir, tmp_path, "fork")


def test_persistent_workers_across_epochs(run_dir):
    loader = torch.utils.data.DataLoader(
        SleepyMap(8, 0.005), batch_size=2, num_workers=2, persistent_workers=True, multiprocessing_context="fork"
    )
    t = watched(run_dir, loader, epochs=2)
    assert list(t["step"]) == list(range(8)) and (t["samples"] == 2).all()


def test_iterable_dataset_with_tokens_from_the_batch(run_dir):
    loader = torch.utils.data.DataLoader(
        SleepyStream(12, 0.002), batch_size=3, num_workers=2, multiprocessing_context="fork"
    )
    t = watched(run_dir, loader, tokens=lambda b: int(b["input_ids"].numel()))
    assert len(t) == 4
    assert (t["tokens"] == 3 * 32).all() and (t["samples"] == 3).all()


def test_step_counts_override_the_batch(run_dir):
    telemetry.init(run_dir=run_dir, job="dl", sinks=["store"])
    for _batch in telemetry.watch([torch.zeros(5, 2)] * 2):
        with telemetry.step(samples=99):
            pass
    telemetry.shutdown()
    assert open_input(run_dir).table["samples"].tolist() == [99, 99]


def test_dataloader_with_forked_workers_times_the_wait(run_dir):
    torch = pytest.importorskip("torch")
    import time

    class Slow(torch.utils.data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            time.sleep(0.02)
            return torch.zeros(3)

    telemetry.init(run_dir=run_dir, job="dl", sinks=["store"])
    loader = torch.utils.data.DataLoader(Slow(), batch_size=2, num_workers=2, multiprocessing_context="fork")
    for _batch in telemetry.watch(loader):
        with telemetry.step():
            pass
    telemetry.shutdown()
    t = open_input(run_dir).table
    assert len(t) == 4 and t["samples"].tolist() == [2, 2, 2, 2]
    assert (t["data_s"] > 0).all()
    # none from the workers: rank 0's meta, progress, a segment (step columns, spans, aggregates), the lock
    assert len(os.listdir(os.path.join(run_dir, "ranks"))) == 6

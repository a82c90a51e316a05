"""Datasets for the data-loader tests (importable by spawned workers), and the loop that watches them."""

import os
import time

import torch


class SleepyMap(torch.utils.data.Dataset):
    """Each item takes `delay_s` to produce; records which processes produced items."""

    def __init__(self, n, delay_s, marker_dir=None):
        self.n, self.delay_s, self.marker_dir = n, delay_s, marker_dir

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.delay_s)
        if self.marker_dir:
            import telemetry
            from telemetry import recorder

            state = "on" if recorder.current.active() is not recorder.NULL or telemetry.session() else "off"
            with open(os.path.join(self.marker_dir, f"{os.getpid()}.txt"), "w") as f:
                f.write(state)
        return torch.full((16,), float(i)), torch.zeros(16, dtype=torch.long)


class SleepyStream(torch.utils.data.IterableDataset):
    def __init__(self, n, delay_s):
        self.n, self.delay_s = n, delay_s

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, self.n, step):
            time.sleep(self.delay_s)
            yield {"input_ids": torch.zeros(32, dtype=torch.long), "i": i}


def watched(run_dir, loader, epochs=1, **watch_kw):
    """Every batch of `loader` (for `epochs`) through telemetry.watch, one empty step each: the table."""
    import telemetry
    from telemetry.analysis.inputs.load import open_input

    telemetry.init(run_dir=run_dir, job="dl", sinks=["store"], strict=True)
    for _ in range(epochs):
        for _batch in telemetry.watch(loader, **watch_kw):
            with telemetry.step():
                pass
    telemetry.shutdown()
    return open_input(run_dir).table


def workers_record_nothing(run_dir, tmp_path, context):
    """Two workers started by `context` (fork or spawn): telemetry is off in both, and they add no
    file to the run directory."""
    markers = tmp_path / "markers"
    markers.mkdir()
    loader = torch.utils.data.DataLoader(
        SleepyMap(16, 0.01, str(markers)), batch_size=2, num_workers=2, multiprocessing_context=context
    )
    t = watched(run_dir, loader)
    assert len(t) == 8 and (t["data_s"] > 0).all()
    states = [p.read_text() for p in markers.iterdir()]
    assert len(states) == 2 and set(states) == {"off"}  # two workers, telemetry off in both
    assert sorted(os.listdir(os.path.join(run_dir, "ranks"))) == [
        "rank-00000.agg-000001.arrows",  # the segment's aggregates over blocks of steps
        "rank-00000.json",
        "rank-00000.lock",  # the session's claim on rank 0's files (telemetry.store.claim)
        "rank-00000.progress.json",
        "rank-00000.seg-000001.parquet",
        "rank-00000.spans-000001.parquet",
    ]

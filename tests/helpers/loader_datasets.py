"""Datasets for the data-loader tests (importable by spawned workers)."""

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

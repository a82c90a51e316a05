"""Device readings (host, GPU via NVML, CUDA memory) as Prometheus metrics, read at scrape time.

The sink keeps the latest reading the pipeline saw (it arrives with every step record and every
heartbeat, so a hung rank's GPU still shows); this collector turns it into metric families.
Cumulative readings (energy, ECC errors, PCIe replays, NVLink bytes and errors, NIC bytes and
errors, CPU seconds, allocator retries, OOMs) are counters; the rest are gauges. A GPU's readings
carry the label ``gpu``; the host's and the node's (NIC) do not.
"""

from __future__ import annotations

from typing import Callable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from telemetry.metrics import names as N


class DeviceCollector(Collector):
    def __init__(self, base: dict[str, str], latest: Callable[[], dict | None], gpu_label: str) -> None:
        self.base = base
        self.latest = latest
        self.gpu = gpu_label

    def collect(self):
        d = self.latest() or {}
        keys, values = list(self.base), list(self.base.values())
        for reading, m in N.DEVICE.items():
            if reading in d:
                fam = _family(m, keys)
                fam.add_metric(values + ([self.gpu] if m.labels else []), d[reading])
                yield fam
        families: dict[N.Metric, list[tuple[str, float]]] = {}  # metric -> [(label value, value)]
        for k, v in d.items():
            found = N.device_family(k)  # one family at most (the longest prefix decides)
            if found is not None:
                families.setdefault(found[0], []).append((found[2], v))
        for m, found in families.items():
            gpu = [self.gpu] if "gpu" in m.labels else []  # a GPU's family; the node's NICs have no gpu label
            fam = _family(m, keys)
            for label, v in found:
                fam.add_metric(values + gpu + [label], v)
            yield fam


def _family(m: N.Metric, keys: list[str]) -> CounterMetricFamily | GaugeMetricFamily:
    return (CounterMetricFamily if m.kind == "counter" else GaugeMetricFamily)(
        m.name, m.help, labels=keys + list(m.labels)
    )

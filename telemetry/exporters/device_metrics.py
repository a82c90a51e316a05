"""Device readings (host, GPU via NVML, CUDA memory) as Prometheus metrics, read at scrape time.

The sink keeps the latest reading the pipeline saw (it arrives with every step record and every
heartbeat, so a hung rank's GPU still shows); this collector turns it into metric families.
Cumulative readings (energy, ECC errors, PCIe replays, NVLink bytes, CPU seconds, allocator
retries, OOMs) are counters; the rest are gauges.
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
        for prefix, (m, _, suffix) in N.DEVICE_FAMILIES.items():
            found = [(k[len(prefix) : len(k) - len(suffix)], v) for k, v in d.items() if k.startswith(prefix)]
            if found:
                fam = _family(m, keys)
                for label, v in found:
                    fam.add_metric(values + [self.gpu, label], v)
                yield fam


def _family(m: N.Metric, keys: list[str]) -> CounterMetricFamily | GaugeMetricFamily:
    return (CounterMetricFamily if m.kind == "counter" else GaugeMetricFamily)(
        m.name, m.help, labels=keys + list(m.labels)
    )

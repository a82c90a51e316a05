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

# reading -> (metric, help, counter?, extra label or None)
_PLAIN = {
    "gpu_utilization_ratio": ("train_gpu_utilization_ratio", "GPU busy fraction (NVML)", False),
    "gpu_memory_utilization_ratio": (
        "train_gpu_memory_utilization_ratio",
        "GPU memory-controller busy fraction",
        False,
    ),
    "gpu_memory_used_bytes": ("train_gpu_memory_used_bytes", "GPU memory in use (all processes)", False),
    "gpu_memory_total_bytes": ("train_gpu_memory_total_bytes", "GPU memory size", False),
    "gpu_power_watts": ("train_gpu_power_watts", "GPU board power", False),
    "gpu_energy_joules": ("train_gpu_energy_joules", "GPU energy since the driver loaded", True),
    "gpu_temperature_celsius": ("train_gpu_temperature_celsius", "GPU temperature", False),
    "gpu_sm_clock_hertz": ("train_gpu_sm_clock_hertz", "SM clock", False),
    "gpu_memory_clock_hertz": ("train_gpu_memory_clock_hertz", "Memory clock", False),
    "gpu_pcie_replays": ("train_gpu_pcie_replays", "PCIe replays", True),
    "gpu_xid_errors": ("train_gpu_xid_errors", "XID (critical) errors NVML reported since telemetry started", True),
    "gpu_last_xid": ("train_gpu_last_xid", "The code of the last XID error (e.g. 79: fell off the bus)", False),
    "gpu_sm_activity_ratio": ("train_gpu_sm_activity_ratio", "SM activity (GPM, Hopper and newer)", False),
    "gpu_sm_occupancy_ratio": ("train_gpu_sm_occupancy_ratio", "SM occupancy (GPM)", False),
    "process_cpu_seconds": ("train_process_cpu_seconds", "CPU time of this rank's process", True),
    "process_cpu_ratio": ("train_process_cpu_ratio", "Cores busy with this rank's process", False),
    "process_resident_memory_bytes": ("train_process_resident_memory_bytes", "Resident memory of this rank", False),
    "cuda_memory_allocated_bytes": ("train_cuda_memory_allocated_bytes", "CUDA memory allocated by tensors", False),
    "cuda_memory_reserved_bytes": (
        "train_cuda_memory_reserved_bytes",
        "CUDA memory held by the caching allocator",
        False,
    ),
    "cuda_memory_peak_bytes": ("train_cuda_memory_peak_bytes", "Peak allocated over the last sampling interval", False),
    "cuda_alloc_retries": ("train_cuda_alloc_retries", "Allocator retries after freeing its cache", True),
    "cuda_ooms": ("train_cuda_ooms", "CUDA out-of-memory errors", True),
}
_GPU_LABELLED = tuple(k for k in _PLAIN if k.startswith("gpu_"))


class DeviceCollector(Collector):
    def __init__(self, base: dict[str, str], latest: Callable[[], dict | None], gpu_label: str) -> None:
        self.base = base
        self.latest = latest
        self.gpu = gpu_label

    def collect(self):
        d = self.latest() or {}
        keys, values = list(self.base), list(self.base.values())
        for reading, (name, doc, counter) in _PLAIN.items():
            if reading not in d:
                continue
            labels = keys + (["gpu"] if reading in _GPU_LABELLED else [])
            vals = values + ([self.gpu] if reading in _GPU_LABELLED else [])
            fam = (CounterMetricFamily if counter else GaugeMetricFamily)(name, doc, labels=labels)
            fam.add_metric(vals, d[reading])
            yield fam
        ecc = [(k[len("gpu_ecc_errors_") :], v) for k, v in d.items() if k.startswith("gpu_ecc_errors_")]
        if ecc:
            fam = CounterMetricFamily("train_gpu_ecc_errors", "Volatile ECC errors", labels=keys + ["gpu", "type"])
            for kind, v in ecc:
                fam.add_metric(values + [self.gpu, kind], v)
            yield fam
        events = [(k[len("gpu_clock_event_") :], v) for k, v in d.items() if k.startswith("gpu_clock_event_")]
        if events:
            fam = GaugeMetricFamily(
                "train_gpu_clock_event_active",
                "1 while a clock-event (throttle) reason holds the clocks down",
                labels=keys + ["gpu", "reason"],
            )
            for reason, v in events:
                fam.add_metric(values + [self.gpu, reason], v)
            yield fam
        nv = [(k[len("gpu_nvlink_") : -len("_bytes")], v) for k, v in d.items() if k.startswith("gpu_nvlink_")]
        if nv:
            fam = CounterMetricFamily(
                "train_gpu_nvlink_bytes", "NVLink data bytes, all links", labels=keys + ["gpu", "direction"]
            )
            for direction, v in nv:
                fam.add_metric(values + [self.gpu, direction], v)
            yield fam

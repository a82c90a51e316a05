"""The Input and devices view's tables: data-loader wait per rank, and the device and host signals
sampled with each step (the steps table's ``dev.<signal>`` columns: the latest reading at the
step's end), in display units. No Streamlit here.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pandas as pd

from telemetry.steptable.matrix import StepMatrix, nanmedian, nanpercentile

from .grid import step_columns

# signal -> (label, unit, factor from the stored base unit to the unit shown). Signals not named here
# are still shown, under their own name and base unit.
SIGNALS: dict[str, tuple[str, str, float]] = {
    "gpu_utilization_ratio": ("GPU utilization", "%", 100.0),
    "gpu_sm_activity_ratio": ("SM activity", "%", 100.0),
    "gpu_sm_occupancy_ratio": ("SM occupancy", "%", 100.0),
    "gpu_memory_utilization_ratio": ("GPU memory bandwidth use", "%", 100.0),
    "gpu_sm_clock_hertz": ("SM clock", "MHz", 1e-6),
    "gpu_memory_clock_hertz": ("memory clock", "MHz", 1e-6),
    "gpu_power_watts": ("GPU power", "W", 1.0),
    "gpu_temperature_celsius": ("GPU temperature", "°C", 1.0),
    "gpu_memory_used_bytes": ("GPU memory used", "GiB", 2.0**-30),
    "gpu_memory_total_bytes": ("GPU memory total", "GiB", 2.0**-30),
    "gpu_energy_joules": ("GPU energy (since boot)", "kJ", 1e-3),
    "gpu_pcie_replays": ("PCIe replays (since boot)", "count", 1.0),
    "gpu_nvlink_tx_bytes": ("NVLink sent (since boot)", "GiB", 2.0**-30),
    "gpu_nvlink_rx_bytes": ("NVLink received (since boot)", "GiB", 2.0**-30),
    "nic_bytes_tx": ("RDMA NICs sent (the node's, since start)", "GiB", 2.0**-30),
    "nic_bytes_rx": ("RDMA NICs received (the node's, since start)", "GiB", 2.0**-30),
    "cuda_memory_allocated_bytes": ("CUDA memory allocated", "GiB", 2.0**-30),
    "cuda_memory_reserved_bytes": ("CUDA memory reserved", "GiB", 2.0**-30),
    "cuda_memory_peak_bytes": ("CUDA memory peak", "GiB", 2.0**-30),
    "process_cpu_ratio": ("process CPU", "% of one core", 100.0),
    "process_cpu_seconds": ("process CPU time", "s", 1.0),
    "process_resident_memory_bytes": ("process resident memory", "GiB", 2.0**-30),
    "cpu_running_ratio": ("training thread on a CPU", "% of the time", 100.0),
    "cpu_runqueue_wait_ratio": ("training thread waiting for a CPU (run-queue delay)", "% of the time", 100.0),
    "cpu_runqueue_wait_seconds": ("run-queue wait (since start)", "s", 1.0),
    "cpu_throttled_ratio": ("cgroup throttled by its CPU quota", "ms/s", 1e3),
    "cpu_throttled_seconds": ("cgroup throttled (since start)", "s", 1.0),
    "cpu_throttled_periods_ratio": ("CPU quota periods throttled", "%", 100.0),
    "cpu_throttled_periods": ("CPU quota periods throttled (since start)", "count", 1.0),
    "cpu_quota_cores": ("cgroup CPU quota", "cores", 1.0),
    "cpu_pressure_some_ratio": ("host CPU pressure (PSI some)", "% of the time", 100.0),
}
THROTTLE_PREFIX = "gpu_clock_event_"  # 1 while NVML reports the clock-event (throttle) reason
# What a CPU run shows first, and a GPU run first.
HOST_FIRST = ("process_cpu_ratio", "cpu_runqueue_wait_ratio", "cpu_throttled_ratio", "process_resident_memory_bytes")
GPU_FIRST = (
    "gpu_utilization_ratio",
    "gpu_sm_activity_ratio",
    "gpu_sm_clock_hertz",
    "gpu_power_watts",
    "gpu_temperature_celsius",
    "gpu_memory_used_bytes",
)


def signals(m: StepMatrix) -> list[str]:
    """The sampled signals this run holds (names without ``dev.``), the most telling first; throttle
    reasons are not in this list (see :func:`throttle_reasons`)."""
    have = [c.split(".", 1)[1] for c in m.columns if c.startswith("dev.")]
    have = [s for s in have if not s.startswith(THROTTLE_PREFIX) and np.isfinite(m.columns["dev." + s]).any()]
    first = [s for s in GPU_FIRST + HOST_FIRST if s in have]
    return first + sorted(s for s in have if s not in first)


def has_gpu(m: StepMatrix) -> bool:
    return any(s.startswith("gpu_") for s in signals(m))


def label(signal: str) -> str:
    """``"GPU power (W)"``: the signal's name and unit, for axes and columns."""
    name, unit, _ = SIGNALS.get(signal, (signal.replace("_", " "), "", 1.0))
    return f"{name} ({unit})" if unit else name


def grid(m: StepMatrix, signal: str) -> np.ndarray:
    """(R, S) values of ``signal`` in its display unit (NaN where a step had no reading)."""
    a = m.extra("dev." + signal)
    if a is None:
        raise KeyError(signal)
    return a * SIGNALS.get(signal, ("", "", 1.0))[2]


def summary(m: StepMatrix, steps: tuple[int, int] | None = None) -> pd.DataFrame:
    """Per rank: the median of each sampled signal over the chosen steps, in display units."""
    cols = step_columns(m, steps)
    out = pd.DataFrame({"rank": m.ranks.astype(int)})
    for s in signals(m):
        with np.errstate(all="ignore"):
            out[label(s)] = nanmedian(grid(m, s)[:, cols], axis=1)
    return out


def throttle_reasons(m: StepMatrix, steps: tuple[int, int] | None = None) -> pd.DataFrame:
    """Per (rank, reason) that was ever active: the share of sampled steps it was active in. Empty
    when no reason was seen (or no GPU was sampled)."""
    cols = step_columns(m, steps)
    rows = []
    for c in m.columns:
        if not c.startswith("dev." + THROTTLE_PREFIX):
            continue
        a = cast(np.ndarray, m.extra(c))[:, cols]  # a column it has
        seen = np.isfinite(a).sum(axis=1)
        with np.errstate(all="ignore"):
            share = np.nansum(a > 0, axis=1) / seen
        for r, v, n in zip(m.ranks, share, seen):
            if n and v > 0:
                rows.append((int(r), c[len("dev." + THROTTLE_PREFIX) :].replace("_", " "), float(v)))
    return pd.DataFrame(rows, columns=["rank", "reason", "share of steps"])


def data_wait(m: StepMatrix, steps: tuple[int, int] | None = None) -> pd.DataFrame:
    """Per rank: median and 95th percentile of the data-loader wait per step (ms), and its share of
    the rank's step time (%), over the chosen steps."""
    cols = step_columns(m, steps)
    d = m.data[:, cols] * 1e3
    t = (m.duration + m.data)[:, cols]
    with np.errstate(all="ignore"):
        return pd.DataFrame(
            {
                "rank": m.ranks.astype(int),
                "median ms": nanmedian(d, axis=1),
                "p95 ms": nanpercentile(d, 95, axis=1),
                "% of step time": 100 * np.nansum(d, axis=1) / 1e3 / np.nansum(t, axis=1),
            }
        )

"""Reading this rank's GPU through NVML (nvidia-ml-py, ``import pynvml``).

:class:`NvmlSource` is one GPU's reader; :meth:`read` returns a flat dict of numbers (base units:
ratios, bytes, watts, joules, hertz, celsius) and never raises: a field the device does not
support is tried once, then skipped. Without the library or a GPU, :func:`open_nvml` returns None
and says so in one info line.

Which GPU: the CUDA device this rank uses (``torch.cuda.current_device()`` once CUDA is
initialized, else LOCAL_RANK), mapped through ``CUDA_VISIBLE_DEVICES`` (indices or UUIDs) to the
NVML device.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Callable, Mapping, TypeVar

if TYPE_CHECKING:
    from types import ModuleType

R = TypeVar("R")

log = logging.getLogger("telemetry")

# Clock-event (throttle) reason bits, by the names NVML gives them.
_REASONS = (
    "GpuIdle",
    "ApplicationsClocksSetting",
    "SwPowerCap",
    "HwSlowdown",
    "SyncBoost",
    "SwThermalSlowdown",
    "HwThermalSlowdown",
    "HwPowerBrakeSlowdown",
    "DisplayClockSetting",
)
_NVLINK_MAX_LINKS = 18
# NVLink error counters (NVML field values, each the total over the GPU's links): reading suffix ->
# the field's constant, looked up by name (an older nvidia-ml-py may lack one; Hopper and newer GPUs
# may not support them: a field NVML does not support is dropped after its first reading)
_NVLINK_ERRORS = (
    ("crc_flit", "NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"),
    ("crc_data", "NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL"),
    ("replay", "NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"),
    ("recovery", "NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"),
)


def _visible(environ: Mapping[str, str]) -> list[str] | None:
    raw = environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None or raw.strip() == "":
        return None
    return [x.strip() for x in raw.split(",") if x.strip()]


def cuda_index(local_rank: int) -> int:
    """The CUDA device index this process uses (without initializing CUDA)."""
    import sys

    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return int(torch.cuda.current_device())
    except Exception:  # noqa: BLE001 - a device index is optional; a broken CUDA set-up must not stop sampling
        pass
    return local_rank


def device_handle(nvml: ModuleType, cuda_idx: int, environ: Mapping[str, str]) -> tuple[object, str]:
    """(NVML handle, label) of the CUDA device ``cuda_idx`` as this process sees it."""
    visible = _visible(environ)
    if visible is None:
        return nvml.nvmlDeviceGetHandleByIndex(cuda_idx), str(cuda_idx)
    if cuda_idx >= len(visible):
        raise IndexError(f"CUDA device {cuda_idx} but CUDA_VISIBLE_DEVICES={','.join(visible)}")
    entry = visible[cuda_idx]
    if entry.isdigit():
        return nvml.nvmlDeviceGetHandleByIndex(int(entry)), entry
    return nvml.nvmlDeviceGetHandleByUUID(entry), entry  # GPU-... or MIG-...


class NvmlSource:
    def __init__(self, nvml: ModuleType, handle: object, label: str) -> None:
        self.nvml = nvml
        self.handle = handle
        self.label = label
        self.name = _text(self._try("name", nvml.nvmlDeviceGetName, handle)) or "unknown"
        self._unsupported: set[str] = set()
        # NVLink error counters still read: (reading suffix, field id); those the library names
        self._link_errors = [(k, getattr(nvml, c)) for k, c in _NVLINK_ERRORS if hasattr(nvml, c)]
        self._gpm = self._gpm_setup()
        self._xids = self._xid_setup()
        self.xid_errors = 0  # XID (critical) events seen since this source opened
        self.last_xid: int | None = None

    def _try(self, field: str, fn: Callable[..., R], *args: object) -> R | None:
        try:
            return fn(*args)
        except Exception:  # noqa: BLE001 - NVMLError_NotSupported and friends
            return None

    def _field(self, out: dict[str, float], key: str, fn: Callable, *args: object, scale: float = 1.0) -> None:
        if key in self._unsupported:
            return
        try:
            value = fn(*args)
        except Exception:  # noqa: BLE001 - NVML raises a type per error code; an unsupported field is skipped from now on
            self._unsupported.add(key)
            return
        out[key] = float(value) * scale

    def read(self) -> dict[str, float]:
        n, h, out = self.nvml, self.handle, {}
        if "util" not in self._unsupported:
            try:
                u = n.nvmlDeviceGetUtilizationRates(h)
                out["gpu_utilization_ratio"] = u.gpu / 100.0
                out["gpu_memory_utilization_ratio"] = u.memory / 100.0
            except Exception:  # noqa: BLE001 - NVML raises a type per error code; an unsupported field is skipped from now on
                self._unsupported.add("util")
        if "mem" not in self._unsupported:
            try:
                m = n.nvmlDeviceGetMemoryInfo(h)
                out["gpu_memory_used_bytes"] = float(m.used)
                out["gpu_memory_total_bytes"] = float(m.total)
            except Exception:  # noqa: BLE001 - NVML raises a type per error code; an unsupported field is skipped from now on
                self._unsupported.add("mem")
        self._field(out, "gpu_power_watts", n.nvmlDeviceGetPowerUsage, h, scale=1e-3)
        self._field(out, "gpu_energy_joules", n.nvmlDeviceGetTotalEnergyConsumption, h, scale=1e-3)
        self._field(out, "gpu_temperature_celsius", n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU)
        self._field(out, "gpu_sm_clock_hertz", n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM, scale=1e6)
        self._field(out, "gpu_memory_clock_hertz", n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_MEM, scale=1e6)
        self._field(out, "gpu_pcie_replays", n.nvmlDeviceGetPcieReplayCounter, h)
        for kind, const in (
            ("corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED"),
            ("uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED"),
        ):
            self._field(
                out, f"gpu_ecc_errors_{kind}", n.nvmlDeviceGetTotalEccErrors, h, getattr(n, const), n.NVML_VOLATILE_ECC
            )
        self._clock_events(out)
        self._nvlink(out)
        self._nvlink_errors(out)
        self._gpm_read(out)
        self._xid_read(out)
        return out

    def _xid_setup(self) -> object | None:
        """An NVML event set for this GPU's XID (critical) errors, or None where the driver or the
        user's rights do not allow it (events need no polling thread: each reading drains them)."""
        n = self.nvml
        try:
            es = n.nvmlEventSetCreate()
        except Exception:  # noqa: BLE001 - no XID events without the rights to register them: XIDs are then not read
            return None
        try:
            n.nvmlDeviceRegisterEvents(self.handle, n.nvmlEventTypeXidCriticalError, es)
            return es
        except Exception:  # noqa: BLE001 - NotSupported (e.g. some VMs, MIG), NoPermission
            self._try("xid", n.nvmlEventSetFree, es)
            return None

    def _xid_read(self, out: dict) -> None:
        """Drain the XID events that came since the last reading (a wait of 0 ms: never blocks):
        ``gpu_xid_errors`` counts them since start, ``gpu_last_xid`` is the newest code."""
        if self._xids is None:
            return
        n = self.nvml
        timeout = getattr(n, "NVMLError_Timeout", ())
        for _ in range(256):  # bounded: a storm of events cannot hold the sampler
            try:
                data = n.nvmlEventSetWait_v2(self._xids, 0)
            except timeout:
                break
            except Exception:  # noqa: BLE001 - NVML raises a type per error code; a broken event set is freed and not read again
                self._try("xid", n.nvmlEventSetFree, self._xids)
                self._xids = None
                break
            if int(getattr(data, "eventType", 0)) & int(n.nvmlEventTypeXidCriticalError):
                self.xid_errors += 1
                self.last_xid = int(getattr(data, "eventData", 0))
        out["gpu_xid_errors"] = float(self.xid_errors)
        if self.last_xid is not None:
            out["gpu_last_xid"] = float(self.last_xid)

    def _clock_events(self, out: dict) -> None:
        if "reasons" in self._unsupported:
            return
        n = self.nvml
        fn = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            n, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        if fn is None:  # (as its call would fail)
            self._unsupported.add("reasons")
            return
        try:
            mask = int(fn(self.handle))
        except Exception:  # noqa: BLE001 - NVML raises a type per error code; an unsupported field is skipped from now on
            self._unsupported.add("reasons")
            return
        for reason in _REASONS:
            bit = getattr(n, f"nvmlClocksEventReason{reason}", None)
            if bit is None:
                bit = getattr(n, f"nvmlClocksThrottleReason{reason}", None)
            if bit is not None:
                out[f"gpu_clock_event_{reason}"] = 1.0 if mask & int(bit) else 0.0

    def _nvlink(self, out: dict) -> None:
        if "nvlink" in self._unsupported:
            return
        n = self.nvml
        try:
            ids = [(n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, link) for link in range(_NVLINK_MAX_LINKS)] + [
                (n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, link) for link in range(_NVLINK_MAX_LINKS)
            ]
            values = n.nvmlDeviceGetFieldValues(self.handle, ids)
        except Exception:  # noqa: BLE001 - NVML raises a type per error code; an unsupported field is skipped from now on
            self._unsupported.add("nvlink")
            return
        tx = rx = 0.0
        seen = False
        for i, v in enumerate(values):
            if getattr(v, "nvmlReturn", 0) != 0:
                continue
            seen = True
            kib = float(v.value.ullVal)
            if i < _NVLINK_MAX_LINKS:
                tx += kib * 1024
            else:
                rx += kib * 1024
        if not seen:
            self._unsupported.add("nvlink")
            return
        out["gpu_nvlink_tx_bytes"] = tx
        out["gpu_nvlink_rx_bytes"] = rx

    def _nvlink_errors(self, out: dict) -> None:
        """``gpu_nvlink_errors_<type>``: NVML's CRC (flow-control and data), replay and recovery
        error counts of this GPU, each summed over its links by NVML (the ``*_TOTAL`` fields)."""
        if not self._link_errors:
            return
        n = self.nvml
        try:
            values = n.nvmlDeviceGetFieldValues(self.handle, [(f, 0) for _, f in self._link_errors])
        except Exception:  # noqa: BLE001 - NVML raises a type per error code; an unsupported field is skipped from now on
            self._link_errors = []
            log.info("telemetry: GPU %s: NVLink error counters unavailable: not read", self.label)
            return
        not_supported = getattr(n, "NVML_ERROR_NOT_SUPPORTED", 3)
        dropped = []
        for (kind, field), v in zip(list(self._link_errors), values):
            ret = getattr(v, "nvmlReturn", 0)
            if ret == 0:
                out[f"gpu_nvlink_errors_{kind}"] = float(v.value.ullVal)
            elif ret == not_supported:  # for good: not asked again
                dropped.append(kind)
                self._link_errors.remove((kind, field))
        if dropped:
            log.info(
                "telemetry: GPU %s: NVLink error counters %s not supported: not read", self.label, ", ".join(dropped)
            )

    def _gpm_setup(self) -> list[object] | None:
        n = self.nvml
        try:
            if not n.nvmlGpmQueryDeviceSupport(self.handle).isSupportedDevice:
                return None
            s1, s2 = n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc()
            n.nvmlGpmSampleGet(self.handle, s1)
            return [s1, s2]
        except Exception:  # noqa: BLE001 - pre-Hopper, or the library lacks GPM
            return None

    def _gpm_read(self, out: dict) -> None:
        if self._gpm is None:
            return
        n = self.nvml
        s1, s2 = self._gpm
        try:
            n.nvmlGpmSampleGet(self.handle, s2)
            mg = n.c_nvmlGpmMetricsGet_t()
            mg.version = n.NVML_GPM_METRICS_GET_VERSION
            mg.numMetrics = 2
            mg.sample1, mg.sample2 = s1, s2
            mg.metrics[0].metricId = n.NVML_GPM_METRIC_SM_UTIL
            mg.metrics[1].metricId = n.NVML_GPM_METRIC_SM_OCCUPANCY
            n.nvmlGpmMetricsGet(mg)
            out["gpu_sm_activity_ratio"] = mg.metrics[0].value / 100.0
            out["gpu_sm_occupancy_ratio"] = mg.metrics[1].value / 100.0
            self._gpm = [s2, s1]  # the newer sample is the next interval's start
        except Exception:  # noqa: BLE001 - GPM is optional (Hopper and newer); without it, no SM activity
            self._gpm = None

    def close(self) -> None:
        if self._xids is not None:
            self._try("xid", self.nvml.nvmlEventSetFree, self._xids)
            self._xids = None
        if self._gpm is not None:
            for s in self._gpm:
                self._try("gpm", self.nvml.nvmlGpmSampleFree, s)
        self._try("shutdown", self.nvml.nvmlShutdown)


def _text(value: str | bytes | None) -> str | None:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value


def open_nvml(local_rank: int, environ: Mapping[str, str] | None = None) -> NvmlSource | None:
    """This rank's GPU reader, or None (with one info line saying why)."""
    environ = os.environ if environ is None else environ
    try:
        import pynvml
    except ImportError:
        log.info("telemetry: GPU sampling off: nvidia-ml-py is not installed (pip install 'training-telemetry[gpu]')")
        return None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound on machines without a GPU
        log.info("telemetry: GPU sampling off: NVML unavailable (%s)", type(exc).__name__)
        return None
    try:
        handle, label = device_handle(pynvml, cuda_index(local_rank), environ)
    except Exception as exc:  # noqa: BLE001 - NVML raises a type per error code; no GPU for this rank turns GPU sampling off
        log.info("telemetry: GPU sampling off: no GPU for this rank (%s)", exc)
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting NVML down after a failed start: nothing left to do if it fails
            pass
        return None
    return NvmlSource(pynvml, handle, label)

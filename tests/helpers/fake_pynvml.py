"""A stand-in for the `pynvml` module (nvidia-ml-py) with one fake H100, for machines without a
GPU. Only the library boundary is faked: telemetry's NVML code runs unchanged against it."""

from __future__ import annotations

import types

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
NVML_VOLATILE_ECC = 0
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 138, 139
NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL = 38, 45
NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL = 52, 59
NVML_ERROR_NOT_SUPPORTED = 3
NVML_GPM_METRIC_SM_UTIL, NVML_GPM_METRIC_SM_OCCUPANCY = 2, 3
NVML_GPM_METRICS_GET_VERSION = 1
nvmlClocksEventReasonGpuIdle = 0x1
nvmlClocksEventReasonApplicationsClocksSetting = 0x2
nvmlClocksEventReasonSwPowerCap = 0x4
nvmlClocksEventReasonHwSlowdown = 0x8
nvmlClocksEventReasonSyncBoost = 0x10
nvmlClocksEventReasonSwThermalSlowdown = 0x20
nvmlClocksEventReasonHwThermalSlowdown = 0x40
nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x80
nvmlClocksEventReasonDisplayClockSetting = 0x100
nvmlEventTypeXidCriticalError = 0x8


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLError_Timeout(NVMLError):
    pass


state = types.SimpleNamespace(
    init_error=None,
    calls={},
    handles=[],
    unsupported={"nvmlDeviceGetPcieReplayCounter"},
    gpm=True,
    energy_mj=5_000_000,
    xids=[],
    event_sets=0,
    # NVLink error counters (field id -> count over the links); a field not here is not supported
    nvlink_errors={
        NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL: 5,
        NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL: 0,
        NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL: 7,
        NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL: 1,
    },
)


def _count(name):
    state.calls[name] = state.calls.get(name, 0) + 1
    if name in state.unsupported:
        raise NVMLError_NotSupported(name)


def nvmlInit():
    if state.init_error:
        raise state.init_error


def nvmlShutdown():
    pass


def nvmlDeviceGetHandleByIndex(i):
    state.handles.append(("index", i))
    return ("gpu", i)


def nvmlDeviceGetHandleByUUID(uuid):
    state.handles.append(("uuid", uuid))
    return ("gpu", uuid)


def nvmlDeviceGetName(h):
    return b"NVIDIA H100 80GB HBM3"


def nvmlDeviceGetUtilizationRates(h):
    _count("nvmlDeviceGetUtilizationRates")
    return types.SimpleNamespace(gpu=87, memory=41)


def nvmlDeviceGetMemoryInfo(h):
    return types.SimpleNamespace(used=60 * 2**30, total=80 * 2**30, free=20 * 2**30)


def nvmlDeviceGetPowerUsage(h):
    return 612_000  # mW


def nvmlDeviceGetTotalEnergyConsumption(h):
    state.energy_mj += 600_000
    return state.energy_mj  # mJ


def nvmlDeviceGetTemperature(h, sensor):
    return 71


def nvmlDeviceGetClockInfo(h, clock):
    return {NVML_CLOCK_SM: 1755, NVML_CLOCK_MEM: 2619}[clock]  # MHz


def nvmlDeviceGetPcieReplayCounter(h):
    _count("nvmlDeviceGetPcieReplayCounter")
    return 0


def nvmlDeviceGetTotalEccErrors(h, kind, counter):
    return {NVML_MEMORY_ERROR_TYPE_CORRECTED: 3, NVML_MEMORY_ERROR_TYPE_UNCORRECTED: 0}[kind]


def nvmlDeviceGetCurrentClocksEventReasons(h):
    return nvmlClocksEventReasonSwPowerCap


_NVLINK_ERROR_FIELDS = (
    NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
    NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
    NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,
    NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
)


def nvmlDeviceGetFieldValues(h, ids):
    _count("nvmlDeviceGetFieldValues")
    out = []
    for field, link in ids:
        if field in _NVLINK_ERROR_FIELDS:
            count = state.nvlink_errors.get(field)
            ret = NVML_ERROR_NOT_SUPPORTED if count is None else 0
            out.append(types.SimpleNamespace(nvmlReturn=ret, value=types.SimpleNamespace(ullVal=count or 0)))
            continue
        ok = link < 2  # two active links
        kib = (1000 if field == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX else 2000) * (link + 1)
        out.append(types.SimpleNamespace(nvmlReturn=0 if ok else 1, value=types.SimpleNamespace(ullVal=kib)))
    return out


def nvmlGpmQueryDeviceSupport(h):
    return types.SimpleNamespace(isSupportedDevice=1 if state.gpm else 0)


def nvmlGpmSampleAlloc():
    return object()


def nvmlGpmSampleFree(s):
    pass


def nvmlGpmSampleGet(h, s):
    return s


class _Metric:
    def __init__(self):
        self.metricId = 0
        self.value = 0.0


class c_nvmlGpmMetricsGet_t:
    def __init__(self):
        self.version = 0
        self.numMetrics = 0
        self.sample1 = self.sample2 = None
        self.metrics = [_Metric() for _ in range(8)]


def nvmlGpmMetricsGet(mg):
    for m in mg.metrics[: mg.numMetrics]:
        m.value = {NVML_GPM_METRIC_SM_UTIL: 64.0, NVML_GPM_METRIC_SM_OCCUPANCY: 33.0}[m.metricId]
    return mg


def nvmlEventSetCreate():
    _count("nvmlEventSetCreate")
    state.event_sets += 1
    return ("event_set", state.event_sets)


def nvmlDeviceRegisterEvents(h, types_mask, es):
    _count("nvmlDeviceRegisterEvents")


def nvmlEventSetWait_v2(es, timeout_ms):
    """The next queued XID (state.xids), or NVMLError_Timeout when none waits (as NVML does)."""
    _count("nvmlEventSetWait_v2")
    if not state.xids:
        raise NVMLError_Timeout()
    return types.SimpleNamespace(eventType=nvmlEventTypeXidCriticalError, eventData=state.xids.pop(0))


def nvmlEventSetFree(es):
    state.event_sets -= 1

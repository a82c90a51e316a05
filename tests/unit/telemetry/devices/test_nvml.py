"""GPU readings through NVML (telemetry/devices/nvml.py), faked at the pynvml boundary: decoded into
base units, XID errors, GPM, each rank its own GPU."""

import pytest

from telemetry.devices import nvml as nvml_hook


def test_nvml_readings_are_decoded_into_base_units(fake_nvml):
    src = nvml_hook.open_nvml(local_rank=0, environ={})
    first = src.read()
    second = src.read()
    assert first["gpu_utilization_ratio"] == 0.87 and first["gpu_memory_utilization_ratio"] == 0.41
    assert first["gpu_memory_used_bytes"] == 60 * 2**30 and first["gpu_memory_total_bytes"] == 80 * 2**30
    assert first["gpu_power_watts"] == 612.0 and first["gpu_temperature_celsius"] == 71
    assert second["gpu_energy_joules"] - first["gpu_energy_joules"] == 600.0
    assert first["gpu_sm_clock_hertz"] == 1755e6 and first["gpu_memory_clock_hertz"] == 2619e6
    assert first["gpu_clock_event_SwPowerCap"] == 1.0 and first["gpu_clock_event_HwSlowdown"] == 0.0
    assert first["gpu_ecc_errors_corrected"] == 3 and first["gpu_ecc_errors_uncorrected"] == 0
    assert first["gpu_nvlink_tx_bytes"] == (1000 + 2000) * 1024 and first["gpu_nvlink_rx_bytes"] == (2000 + 4000) * 1024
    assert first["gpu_sm_activity_ratio"] == 0.64 and first["gpu_sm_occupancy_ratio"] == 0.33
    assert "gpu_pcie_replays" not in first  # not supported: tried once, then skipped
    assert fake_nvml.state.calls["nvmlDeviceGetPcieReplayCounter"] == 1
    assert src.name == "NVIDIA H100 80GB HBM3"


def test_xid_errors_are_drained_at_each_reading_and_counted(fake_nvml):
    fake_nvml.state.xids[:] = []
    open_sets = fake_nvml.state.event_sets  # other tests' sources may still hold theirs
    src = nvml_hook.open_nvml(local_rank=0, environ={})
    assert src.read()["gpu_xid_errors"] == 0 and "gpu_last_xid" not in src.read()
    fake_nvml.state.xids[:] = [79, 48]  # fell off the bus, then a double-bit ECC error
    r = src.read()
    assert r["gpu_xid_errors"] == 2 and r["gpu_last_xid"] == 48 and fake_nvml.state.xids == []
    assert src.read()["gpu_xid_errors"] == 2  # a counter since start: it never goes back
    src.close()
    assert fake_nvml.state.event_sets == open_sets


def test_xid_events_not_allowed_leave_the_other_readings(fake_nvml):
    fake_nvml.state.unsupported.add("nvmlDeviceRegisterEvents")
    open_sets = fake_nvml.state.event_sets
    try:
        src = nvml_hook.open_nvml(local_rank=0, environ={})
        r = src.read()
        assert "gpu_xid_errors" not in r and r["gpu_utilization_ratio"] == 0.87
        assert fake_nvml.state.event_sets == open_sets  # the set it could not use was freed
    finally:
        fake_nvml.state.unsupported.discard("nvmlDeviceRegisterEvents")


def test_no_gpm_before_hopper(fake_nvml):
    fake_nvml.state.gpm = False
    try:
        assert "gpu_sm_activity_ratio" not in nvml_hook.open_nvml(0, environ={}).read()
    finally:
        fake_nvml.state.gpm = True


@pytest.mark.parametrize(
    "visible, local_rank, expected",
    [
        (None, 1, ("index", 1)),
        ("2,3", 1, ("index", 3)),
        ("GPU-aaaa,GPU-bbbb", 0, ("uuid", "GPU-aaaa")),
    ],
)
def test_each_rank_samples_its_own_gpu(fake_nvml, visible, local_rank, expected):
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    src = nvml_hook.open_nvml(local_rank, environ=env)
    assert fake_nvml.state.handles[-1] == expected
    assert src.label == str(expected[1])


def test_nvlink_error_counters_are_read_and_an_unsupported_one_is_dropped_and_said_once(fake_nvml, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="telemetry")
    src = nvml_hook.open_nvml(local_rank=0, environ={})
    r = src.read()
    assert r["gpu_nvlink_errors_crc_flit"] == 5 and r["gpu_nvlink_errors_crc_data"] == 0
    assert r["gpu_nvlink_errors_replay"] == 7 and r["gpu_nvlink_errors_recovery"] == 1
    assert r["gpu_nvlink_tx_bytes"] == (1000 + 2000) * 1024  # the byte counts are not caught by the errors
    errors = dict(fake_nvml.state.nvlink_errors)
    try:
        del fake_nvml.state.nvlink_errors[fake_nvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL]  # a GPU without it
        fake_nvml.state.nvlink_errors[fake_nvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL] = 9
        src = nvml_hook.open_nvml(local_rank=0, environ={})
        first, second = src.read(), src.read()
        assert "gpu_nvlink_errors_replay" not in first and "gpu_nvlink_errors_replay" not in second
        assert second["gpu_nvlink_errors_crc_flit"] == 9 and second["gpu_nvlink_errors_recovery"] == 1
        assert caplog.text.count("NVLink error counters replay not supported") == 1
    finally:
        fake_nvml.state.nvlink_errors.clear()
        fake_nvml.state.nvlink_errors.update(errors)


def test_nvlink_error_fields_an_older_library_lacks_are_not_asked_for(fake_nvml, monkeypatch):
    monkeypatch.delattr(fake_nvml, "NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL")
    r = nvml_hook.open_nvml(local_rank=0, environ={}).read()
    assert "gpu_nvlink_errors_recovery" not in r and r["gpu_nvlink_errors_replay"] == 7
    for name in (
        "NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    ):
        monkeypatch.delattr(fake_nvml, name)
    calls = fake_nvml.state.calls.get("nvmlDeviceGetFieldValues", 0)
    r = nvml_hook.open_nvml(local_rank=0, environ={}).read()
    assert not any(k.startswith("gpu_nvlink_errors_") for k in r) and "gpu_nvlink_tx_bytes" in r
    assert fake_nvml.state.calls["nvmlDeviceGetFieldValues"] == calls + 1  # the byte counts only

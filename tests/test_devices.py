"""GPU (NVML, faked at the pynvml boundary), host and throughput readings, and where they show."""

import sys
import time

import pytest

import telemetry
from telemetry.analysis.load import open_input
from telemetry.devices import nvml as nvml_hook
from telemetry.flops import peak_flops_for, transformer_flops_per_token


@pytest.fixture
def fake_nvml(monkeypatch):
    from tests.helpers import fake_pynvml

    fake_pynvml.state.calls.clear()
    fake_pynvml.state.handles.clear()
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml)
    return fake_pynvml


def test_without_nvml_sampling_says_so_once_and_host_readings_go_on(run_dir, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="telemetry")
    telemetry.init(run_dir=run_dir, job="nogpu", sinks=["store"], device_interval_s=0.05)
    for _ in range(3):
        with telemetry.step():
            time.sleep(0.06)
    telemetry.shutdown()
    assert caplog.text.count("GPU sampling off") == 1
    t = open_input(run_dir).table
    assert (t["dev.process_resident_memory_bytes"] > 10e6).all()
    assert "dev.gpu_utilization_ratio" not in t.columns


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


def test_gpu_metrics_and_mfu_reach_prometheus_and_the_store(run_dir, fake_nvml):
    from tests.helpers.servers import free_port, http_get

    port = free_port()
    telemetry.init(
        run_dir=run_dir,
        job="gpu",
        sinks=["store", "prometheus"],
        prometheus_port=port,
        device_interval_s=0.05,
        flops_per_token=1e9,
        flush_interval_s=0.05,
    )
    for _ in range(4):
        with telemetry.step(tokens=1000):
            time.sleep(0.02)
    time.sleep(0.3)
    text = http_get(f"http://127.0.0.1:{port}/metrics").decode()
    telemetry.shutdown()
    for needle in (
        'train_gpu_utilization_ratio{gpu="0"',
        "train_gpu_power_watts{",
        "train_gpu_energy_joules_total{",
        'train_gpu_clock_event_active{gpu="0",job="gpu",local_rank="0",node=',
        'reason="SwPowerCap"',
        'train_gpu_ecc_errors_total{gpu="0"',
        'direction="tx"',
        "train_gpu_sm_activity_ratio{",
        "train_process_resident_memory_bytes{",
        "train_mfu_ratio{",
    ):
        assert needle in text, needle
    run = open_input(run_dir)
    t = run.table
    expected = 1000 * 1e9 / (t["duration_s"] * 989.4e12)
    assert t["mfu"].to_numpy() == pytest.approx(expected.to_numpy(), rel=1e-6)
    assert run.ranks[0]["device"]["gpu_name"] == "NVIDIA H100 80GB HBM3"
    assert run.ranks[0]["device"]["peak_flops"] == 989.4e12


def test_peak_table_and_flops_formula():
    assert peak_flops_for("NVIDIA H100 80GB HBM3") == 989.4e12
    assert peak_flops_for("NVIDIA H100 PCIe", "bf16") == 756.5e12
    assert peak_flops_for("NVIDIA H200", "fp8") == 1.979e15
    assert peak_flops_for("NVIDIA A100-SXM4-80GB", "tf32") == 156e12
    assert peak_flops_for("Tesla V100-SXM2-32GB", "bf16") is None  # no bf16 on V100
    assert peak_flops_for(None) is None and peak_flops_for("Intel Xeon") is None
    # GPT-2 small at 1k context: 6N + 12 L T d
    assert transformer_flops_per_token(124e6, 12, 1024, 768) == 6 * 124e6 + 12 * 12 * 1024 * 768


def test_bad_device_settings_fail_at_init(run_dir):
    with pytest.raises(telemetry.ConfigError, match="mfu_dtype='int4'; accepted: fp8, bf16, fp16, tf32, fp32"):
        telemetry.init(run_dir=run_dir, mfu_dtype="int4")
    with pytest.raises(telemetry.ConfigError, match="device_interval_s=0.001"):
        telemetry.init(run_dir=run_dir, device_interval_s=0.001)

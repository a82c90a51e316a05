"""GPU, host and throughput readings (telemetry/exporters/device_metrics.py) reach Prometheus and the
run store, NVML faked at the pynvml boundary."""

import time

import pytest

import telemetry
from telemetry.analysis.inputs.load import open_input


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


def test_family_readings_get_their_own_labels_and_the_prometheus_reader_names_them_back():
    """A NIC family has no gpu label (node totals), a GPU family has one; nic_bytes_ and nic_errors_,
    gpu_nvlink_ bytes and gpu_nvlink_errors_ never catch each other's readings; every sample reads
    back as the reading it came from (telemetry.analysis.inputs.prometheus's device_key)."""
    from telemetry.analysis.inputs.prometheus.reshape import device_key
    from telemetry.exporters.device_metrics import DeviceCollector

    readings = {
        "nic_bytes_tx": 4000.0,
        "nic_bytes_rx": 8000.0,
        "nic_errors_symbol_error": 3.0,
        "nic_errors_port_xmit_discards": 1.0,
        "gpu_nvlink_tx_bytes": 1024.0,
        "gpu_nvlink_errors_replay": 7.0,
        "gpu_ecc_errors_corrected": 2.0,
        "gpu_power_watts": 300.0,
        "process_cpu_seconds": 1.5,
    }
    base = {"job": "j", "rank": "0", "local_rank": "0", "node": "n0"}
    families = {f.name: f for f in DeviceCollector(base, lambda: readings, "0").collect()}
    samples = {
        name: [(s.name, s.labels) for s in f.samples if not s.name.endswith("_created")] for name, f in families.items()
    }
    nic = samples["train_nic_bytes"] + samples["train_nic_errors"]
    assert all("gpu" not in labels for _, labels in nic)
    assert {labels["direction"] for _, labels in samples["train_nic_bytes"]} == {"tx", "rx"}
    assert {labels["counter"] for _, labels in samples["train_nic_errors"]} == {"symbol_error", "port_xmit_discards"}
    assert [labels["type"] for _, labels in samples["train_gpu_nvlink_errors"]] == ["replay"]
    assert [labels["direction"] for _, labels in samples["train_gpu_nvlink_bytes"]] == ["tx"]
    assert all(
        labels["gpu"] == "0" for _, labels in samples["train_gpu_nvlink_errors"] + samples["train_gpu_ecc_errors"]
    )
    back = {device_key(name, labels) for f in samples.values() for name, labels in f}
    assert back == set(readings)

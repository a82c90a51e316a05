"""GPU, host and throughput readings (telemetry/exporters/device_metrics.py) reach Prometheus and the
run store, NVML faked at the pynvml boundary."""

import time

import pytest

import telemetry
from telemetry.analysis.load import open_input


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

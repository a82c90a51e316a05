"""The device sampler (telemetry/devices/sampler.py): without NVML it says so once, and the host
readings go on."""

import time

import telemetry
from telemetry.analysis.load import open_input


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

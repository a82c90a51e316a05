"""The device sampler (telemetry/devices/sampler.py): without NVML it says so once, and the host
readings go on."""

import time

import telemetry
from telemetry.analysis.inputs.load import open_input


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


def test_the_training_threads_run_queue_delay_is_sampled_by_its_id_into_every_step(run_dir):
    """The thread that called init is the one whose schedstat is read (its busy loop shows as time
    on a CPU, the sampler thread's sleep would not); readings land in dev.* columns."""
    import threading

    from telemetry.devices.sched import ThreadSchedSource, Unavailable

    try:
        ThreadSchedSource(threading.get_native_id())
    except Unavailable as exc:  # pragma: no cover - a kernel without schedstat
        import pytest

        pytest.skip(str(exc))
    session = telemetry.init(run_dir=run_dir, job="sched", sinks=["store"], device_interval_s=0.05)
    assert session.thread_id == threading.get_native_id()
    for _ in range(8):
        with telemetry.step():
            end = time.perf_counter() + 0.06
            while time.perf_counter() < end:  # busy: the training thread runs
                pass
    telemetry.shutdown()
    t = open_input(run_dir).table
    ran = t["dev.cpu_running_ratio"].dropna()
    assert len(ran) and (t["dev.cpu_runqueue_wait_ratio"].dropna() >= 0).all()
    assert ran.max() > 0.05  # the busy thread: at least a share of a loaded core; the sampler's own ~0.003

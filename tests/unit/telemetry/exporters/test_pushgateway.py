"""Pushing to a Pushgateway (telemetry/exporters/pushgateway.py): a dead one is counted and harmless.
A real Pushgateway: tests/integration/test_prometheus_live.py."""

import time

import telemetry
from tests.helpers.servers import free_port


def steps(n, phases=("forward", "backward")):
    for _ in range(n):
        with telemetry.step(tokens=100, samples=4):
            for p in phases:
                with telemetry.phase(p):
                    time.sleep(0.001)
            telemetry.log(loss=0.5)


def test_dead_pushgateway_is_counted_and_harmless(run_dir, caplog):
    dead = f"http://127.0.0.1:{free_port()}"
    telemetry.init(
        run_dir=run_dir,
        job="deadgw",
        sinks=["prometheus"],
        prometheus_port=free_port(),
        pushgateway_url=dead,
        push_interval_s=0.5,
    )
    t0 = time.monotonic()
    steps(3)
    deadline = time.monotonic() + 5.0  # the push worker's own thread tries every 0.5 s
    while telemetry.stats()["sinks"]["prometheus"].get("push_failures", 0) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    stats = telemetry.shutdown()  # and once more at shutdown
    assert time.monotonic() - t0 < 6.0
    assert stats["sinks"]["prometheus"]["push_failures"] >= 2
    assert caplog.text.count(f"push to {dead} failed") == 1

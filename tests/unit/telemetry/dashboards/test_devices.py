"""Device signals on the dashboard (telemetry/dashboards/devices.py): GPU signals and throttle reasons
per rank."""

import pytest

from telemetry.demo.simulate import Scenario, simulate


def test_gpu_signals_and_throttle_reasons_are_shown_per_rank():
    from telemetry.dashboards import devices
    from telemetry.steptable.matrix import from_table

    t = simulate(Scenario(ranks=4, steps=100))
    t["dev.gpu_utilization_ratio"] = 0.9
    t["dev.gpu_sm_clock_hertz"] = 1.98e9
    t.loc[t["rank"] == 3, "dev.gpu_sm_clock_hertz"] = 1.2e9
    t["dev.gpu_clock_event_hw_slowdown"] = 0.0
    t.loc[(t["rank"] == 3) & (t["step"] >= 50), "dev.gpu_clock_event_hw_slowdown"] = 1.0
    m = from_table(t)
    assert devices.has_gpu(m) and devices.signals(m)[:2] == ["gpu_utilization_ratio", "gpu_sm_clock_hertz"]
    summary = devices.summary(m).set_index("rank")
    assert summary.loc[3, "SM clock (MHz)"] == pytest.approx(1200) and summary.loc[0, "GPU utilization (%)"] == 90
    thr = devices.throttle_reasons(m)
    assert thr.to_dict("records") == [{"rank": 3, "reason": "hw slowdown", "share of steps": 0.5}]
    assert devices.throttle_reasons(m, (0, 49)).empty

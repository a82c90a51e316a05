"""The live view from Prometheus tells the same truth as the run store (issue 28): a real ``telemetry
demo`` with one injected fault, scraped every second by a real Prometheus, read both ways.

Windows of 2 s (two scrapes each; a live job's default is 15 s) keep the demos short: about 15 to 25
windows with steps. The slow link starts later in a longer run: a regression is a change between two
stretches of at least five windows each after the warm-up, and the rank test over window means needs
about eight on either side to reach its bar (RegressionParams.z_windows)."""

from __future__ import annotations

import pytest

from tests.helpers.prometheus_parity import both_ways, parity, scraped_demo

WINDOW_S = 2.0
# findings a fault injected into one demo gives; low_utilization and utilization_regression are the
# job's busy share on two shared cores, near its bounds in any demo: reported by parity(), not compared
INJECTED = ("straggler", "data_stall", "slow_comm", "regression")

FAULTS = [
    pytest.param(
        "straggler:rank=1,phase=backward,factor=2,start=300", 900, ("straggler", (1,), "backward"), id="straggler"
    ),
    pytest.param("data_stall:rank=2,delay_ms=20,start=300", 900, ("data_stall", (2,), "data"), id="data_stall"),
    pytest.param("slow_comm:factor=10,start=700", 1600, ("slow_comm", (), None), id="slow_comm"),
]


@pytest.mark.parametrize("inject,steps,expected", FAULTS)
def test_the_run_store_and_prometheus_name_the_same_fault(tmp_path, inject, steps, expected):
    with scraped_demo(tmp_path, inject, steps=steps) as (url, run_dir, end, _):
        store, prom, run = both_ways(url, run_dir, end, WINDOW_S)
    p = parity(store, prom)
    assert run.meta["window_s"] == WINDOW_S and "collecting" not in prom.summary, run.meta
    # the same acted-on findings of the kinds a fault gives, the injected one among them
    same = [f for f in p["store"] if f[0] in INJECTED]
    assert expected in same, p
    assert [f for f in p["prometheus"] if f[0] in INJECTED] == same, p
    # its onset in the same window, or the next (the store dates it to the step, a window by its last step)
    [onset] = [o for o in p["onsets"] if o["finding"] == expected]
    assert abs(onset["windows_apart"]) <= 1, p
    # the goodput split: the parts a window's per-step means carry, within 5 points of the store's. The
    # rest of the step time (communication, waiting for ranks, checkpoints, other) only as a whole: how a
    # step's waits split between the collectives' own time and waiting for a late rank needs every rank's
    # step, which a window's means average away (docs/prometheus.md)
    a, b = p["goodput_store"], p["goodput_prometheus"]
    for part in ("compute", "data_wait", "between_steps"):
        assert abs(b[part] - a[part]) <= 0.05, (part, p)
    rest = ("communication", "straggler_wait", "checkpoint", "other")
    assert abs(sum(b.get(k, 0.0) for k in rest) - sum(a.get(k, 0.0) for k in rest)) <= 0.05, p

"""analyze() (telemetry/analysis/detectors/__init__.py), the detector suite as a whole, on simulated
jobs (telemetry.demo.simulate): healthy and noisy jobs report nothing; the summary's goodput and
total what-if."""

import pytest

from telemetry.analysis.detectors import analyze
from telemetry.demo.simulate import Fault, Scenario, simulate, true_slowdown
from tests.helpers.detect import found


@pytest.mark.parametrize("seed", range(4))
def test_healthy_jittery_job_reports_nothing(seed):
    assert found(Scenario(ranks=8, steps=300, seed=seed, jitter=0.3, static=0.02)) == []


def test_noise_traps_are_not_findings():
    sc = Scenario(ranks=8, steps=300, seed=1, spikes=((3, 50, 0.2), (6, 120, 0.3)), checkpoint_every=25, static=0.02)
    assert found(sc) == []


def test_large_world_of_healthy_ranks_reports_nothing():
    assert found(Scenario(ranks=512, steps=120, jitter=0.15, static=0.02)) == []


def test_summary_goodput_and_total_what_if():
    sc = Scenario(
        ranks=8, steps=200, checkpoint_every=50, faults=(Fault("straggler", ranks=(5,), phase="forward", factor=1.5),)
    )
    s = analyze(simulate(sc)).summary
    # the straggler, and the job's own utilization gap (it waits for rank 5: busy under 80%)
    assert s["ranks"] == 8 and s["steps"] == 200 and s["by_kind"] == {"low_utilization": 1, "straggler": 1}
    assert s["slowdown"] == pytest.approx(true_slowdown(sc), rel=0.3)
    g = s["goodput"]
    assert sum(g.values()) == pytest.approx(1.0, abs=0.01)
    assert g["straggler_wait"] == pytest.approx(s["slowdown"], rel=0.05)
    assert g["checkpoint"] > 0 and g["compute"] > 0.5
    assert s["straggler_score"][5] == pytest.approx(0.5 * 0.01 / 0.034, rel=0.3)  # forward's share of compute


def test_two_ranks_and_empty_table():
    t = simulate(Scenario(ranks=2, steps=100))
    assert [f for f in analyze(t).findings if f.severity != "info"] == []
    assert analyze(t.iloc[0:0]).findings == []

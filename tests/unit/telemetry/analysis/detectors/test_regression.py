"""Lasting changes (telemetry/analysis/detectors/regression.py): regressions named by phase, slow
communication from a step on, a temporary one that ends, and rises too uncertain to report."""

import pytest

from telemetry.analysis.detectors import analyze
from telemetry.demo.simulate import Fault, Scenario, simulate, true_slowdown
from tests.helpers.detect import found


def test_slow_communication_from_a_step_on():
    sc = Scenario(ranks=8, steps=300, faults=(Fault("slow_comm", factor=3.0, start=150),))
    [f] = found(sc)
    assert f.kind == "slow_comm" and f.ranks == [] and 145 <= f.first_step <= 160
    assert f.slowdown == pytest.approx(true_slowdown(sc, f.first_step, f.last_step), rel=0.25)


def test_regression_names_the_phase():
    sc = Scenario(ranks=8, steps=300, faults=(Fault("regression", phase="backward", factor=1.3, start=120),))
    [f] = found(sc)
    assert (f.kind, f.phase) == ("regression", "backward") and 110 <= f.first_step <= 130


def test_small_regression_under_heavy_jitter_is_found_in_its_phase():
    # 1.15x backward under 30% jitter: the step time alone does not clear z >= 6 (z about 5 here);
    # the backward series finds the split and the step time confirms it over the same steps
    sc = Scenario(
        ranks=8, steps=300, seed=1, jitter=0.3, faults=(Fault("regression", phase="backward", factor=1.15, start=150),)
    )
    [f] = found(sc)
    assert (f.kind, f.phase) == ("regression", "backward") and 140 <= f.first_step <= 160
    assert 3.0 <= f.details["z"] < 6.0


def test_uncertain_rise_spread_over_every_phase_needs_the_step_time_alone():
    # every phase 1.15x over the last 50 steps under 30% jitter: no single component holds half of
    # the change, so the component search does not vouch for it, and in the step time alone it is
    # not certain (z < 6). A drifting machine looks like this; a real job-wide change needs z >= 6.
    sc = Scenario(ranks=8, steps=300, seed=1, jitter=0.3, faults=(Fault("regression", factor=1.15, start=250),))
    assert [f for f in found(sc) if f.kind == "regression"] == []


def test_temporary_regression_ends():
    sc = Scenario(ranks=8, steps=300, faults=(Fault("regression", phase="forward", factor=1.6, start=100, end=180),))
    [f] = found(sc)
    assert f.kind == "regression" and 95 <= f.first_step <= 110 and 170 <= f.last_step <= 190


def test_a_clear_two_to_four_percent_regression_is_a_finding_and_a_clean_run_has_none():
    for phase, factor, cost in (("forward", 1.16, 0.039), ("backward", 1.05, 0.025)):
        sc = Scenario(ranks=8, steps=800, faults=(Fault("regression", phase=phase, factor=factor, start=300),))
        [f] = [f for f in analyze(simulate(sc)).findings if f.kind == "regression"]
        assert f.phase == phase and abs(f.first_step - 300) <= 5 and abs(f.slowdown - cost) < 0.005
    for sc in (
        Scenario(ranks=8, steps=800),
        Scenario(ranks=8, steps=800, checkpoint_every=50, seed=5),
        Scenario(ranks=8, steps=800, jitter=0.3, static=0.02, seed=3),
    ):
        assert not [f for f in analyze(simulate(sc)).findings if f.kind in ("regression", "slow_comm", "data_stall")]

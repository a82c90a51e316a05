"""The detector suite on simulated synchronous steps (telemetry.demo.simulate), with ground truth."""

import pytest

from telemetry.analysis.detectors import analyze
from telemetry.demo.simulate import Fault, Scenario, simulate, true_slowdown


def found(sc, severity=("warning", "critical")):
    """The fault findings. Not low_utilization: a simulated job with heavy jitter or many ranks really
    computes under 80% of its time (it waits for the slowest rank); tests/test_utilization.py."""
    return [f for f in analyze(simulate(sc)).findings if f.severity in severity and f.kind != "low_utilization"]


def kinds(findings):
    return sorted((f.kind, tuple(f.ranks), f.phase) for f in findings)


def test_persistent_straggler_is_named_with_rank_phase_and_true_cost():
    sc = Scenario(ranks=8, steps=200, faults=(Fault("straggler", ranks=(5,), phase="forward", factor=1.5),))
    [f] = found(sc)
    assert (f.kind, f.ranks, f.phase) == ("straggler", [5], "forward")
    assert "arrives last" in f.evidence
    assert f.slowdown == pytest.approx(true_slowdown(sc, f.first_step, f.last_step), rel=0.25)


def test_straggler_that_starts_midway_is_bounded_in_steps():
    sc = Scenario(ranks=8, steps=300, faults=(Fault("straggler", ranks=(2,), phase="backward", factor=1.4, start=150),))
    [f] = found(sc)
    assert (f.ranks, f.phase) == ([2], "backward")
    assert 135 <= f.first_step <= 170 and f.last_step >= 290


def test_intermittent_straggler():
    sc = Scenario(
        ranks=8, steps=400, faults=(Fault("straggler", ranks=(6,), phase="forward", factor=2.0, probability=0.2),)
    )
    [f] = found(sc)
    assert (f.kind, f.ranks, f.phase, f.details["mode"]) == ("straggler", [6], "forward", "intermittent")


def test_several_stragglers_at_once():
    sc = Scenario(
        ranks=16,
        steps=300,
        faults=(
            Fault("straggler", ranks=(3,), phase="forward", factor=1.6),
            Fault("straggler", ranks=(11,), phase="optimizer", factor=3.0),
        ),
    )
    assert kinds(found(sc)) == [("straggler", (3,), "forward"), ("straggler", (11,), "optimizer")]


def test_data_stall_on_one_rank():
    sc = Scenario(ranks=8, steps=200, faults=(Fault("data_stall", ranks=(4,), delay_s=0.01),))
    [f] = found(sc)
    assert (f.kind, f.ranks, f.phase) == ("data_stall", [4], "data")
    assert f.slowdown == pytest.approx(true_slowdown(sc, f.first_step, f.last_step), rel=0.25)


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


def test_block_summaries_do_not_claim_moving_imbalance():
    # online rows are 10-step medians: imbalance that moves from step to step is averaged away
    t = simulate(Scenario(ranks=16, steps=200, faults=(Fault("imbalance"),)))
    assert "imbalance" in [f.kind for f in analyze(t).findings]
    assert "imbalance" not in [f.kind for f in analyze(t, step_resolution=False).findings]


def test_temporary_regression_ends():
    sc = Scenario(ranks=8, steps=300, faults=(Fault("regression", phase="forward", factor=1.6, start=100, end=180),))
    [f] = found(sc)
    assert f.kind == "regression" and 95 <= f.first_step <= 110 and 170 <= f.last_step <= 190


def test_moving_imbalance_is_not_a_straggler():
    sc = Scenario(ranks=16, steps=200, faults=(Fault("imbalance"),))
    assert kinds(found(sc)) == [("imbalance", (), None)]


def test_stage_imbalance_is_one_finding_for_the_stage():
    sc = Scenario(ranks=8, steps=200, stages=4, faults=(Fault("stage_imbalance", stage=3, factor=1.5),))
    [f] = found(sc)
    assert (f.kind, f.ranks) == ("stage_imbalance", [6, 7])


def test_memory_growth():
    sc = Scenario(ranks=4, steps=200, faults=(Fault("memory_growth", ranks=(2,)),))
    [f] = [f for f in analyze(simulate(sc)).findings if f.kind == "memory_growth"]
    assert f.ranks == [2] and f.details["bytes_per_step"] == pytest.approx(4 * 2**20, rel=0.2)


def test_memory_that_steps_up_once_early_is_not_growth():
    # 4 MiB/step for the first 50 of 200 steps (200 MiB), then flat: a warm-up (a lazy import), not a
    # leak; on top, a page (4 KiB) more every few steps, as resident memory creeps on any process
    sc = Scenario(ranks=4, steps=200, faults=(Fault("memory_growth", ranks=(0,), end=50),))
    t = simulate(sc)
    t["dev.cuda_memory_allocated_bytes"] += (t["step"] // 3) * 4096.0 - 7.7 * 2**30  # ~300 MiB at start
    assert [f for f in analyze(t).findings if f.kind == "memory_growth"] == []


@pytest.mark.parametrize("seed", range(4))
def test_healthy_jittery_job_reports_nothing(seed):
    assert found(Scenario(ranks=8, steps=300, seed=seed, jitter=0.3, static=0.02)) == []


def test_noise_traps_are_not_findings():
    sc = Scenario(ranks=8, steps=300, seed=1, spikes=((3, 50, 0.2), (6, 120, 0.3)), checkpoint_every=25, static=0.02)
    assert found(sc) == []


def test_large_world_of_healthy_ranks_reports_nothing():
    assert found(Scenario(ranks=512, steps=120, jitter=0.15, static=0.02)) == []


def test_large_world_straggler_that_costs_is_found():
    sc = Scenario(
        ranks=512, steps=120, jitter=0.1, faults=(Fault("straggler", ranks=(300,), phase="backward", factor=1.6),)
    )
    assert true_slowdown(sc) > 0.05
    assert kinds(found(sc)) == [("straggler", (300,), "backward")]


def test_large_world_straggler_hidden_by_the_slowest_healthy_ranks_costs_nothing_worth_a_warning():
    # 1.3x backward on one of 512 jittery ranks: the slowest healthy rank sets the pace anyway
    sc = Scenario(
        ranks=512, steps=120, jitter=0.1, faults=(Fault("straggler", ranks=(300,), phase="backward", factor=1.3),)
    )
    assert true_slowdown(sc) < 0.02
    assert found(sc) == []


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

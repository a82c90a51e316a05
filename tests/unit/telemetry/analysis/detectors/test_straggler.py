"""Stragglers (telemetry/analysis/detectors/straggler.py) on simulated jobs with ground truth: named by
rank, phase and true cost; alone, several, in groups, a slow node, hidden ones at info."""

import numpy as np
import pytest

from telemetry.analysis.detectors import analyze
from telemetry.demo.simulate import Fault, Scenario, simulate, true_slowdown
from tests.helpers.detect import found, kinds


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


def stragglers(sc):
    return [f for f in analyze(simulate(sc)).findings if f.kind == "straggler"]


def test_co_stragglers_are_costed_together_and_each_named_with_its_marginal_cost():
    sc = Scenario(ranks=16, steps=400, faults=(Fault("straggler", ranks=(3, 11), phase="forward", factor=1.2),))
    found = stragglers(sc)
    assert sorted(f.ranks[0] for f in found) == [3, 11] and all(f.phase == "forward" for f in found)
    for f in found:
        assert f.severity == "warning" and abs(f.slowdown - true_slowdown(sc)) < 0.2 * true_slowdown(sc)
        assert f.details["marginal_slowdown"] < 0.01 <= f.details["group_slowdown"]
        assert "slow together with rank" in f.evidence and "this rank alone" in f.evidence


def test_a_slow_node_is_one_finding_listing_its_ranks():
    sc = Scenario(
        ranks=16,
        steps=400,
        ranks_per_node=4,
        faults=(Fault("straggler", ranks=(4, 5, 6, 7), phase="backward", factor=1.1),),
    )
    [f] = stragglers(sc)
    assert f.ranks == [4, 5, 6, 7] and f.phase == "backward" and f.details["node"] == "node1"
    assert f.evidence.startswith("slow node node1: ranks 4-7 (4 of its 4)")
    assert abs(f.slowdown - true_slowdown(sc)) < 0.1 * true_slowdown(sc)


def test_without_a_node_layout_the_same_ranks_are_co_stragglers():
    sc = Scenario(ranks=16, steps=400, faults=(Fault("straggler", ranks=(4, 5, 6, 7), phase="backward", factor=1.1),))
    assert sorted(f.ranks[0] for f in stragglers(sc)) == [4, 5, 6, 7]


def test_a_hidden_straggler_is_named_at_info_with_its_cost_in_a_quiet_job():
    sc = Scenario(
        ranks=256, steps=300, jitter=0.1, faults=(Fault("straggler", ranks=(100,), phase="backward", factor=1.12),)
    )
    named = {tuple(f.ranks): f for f in stragglers(sc)}
    f = named[(100,)]
    assert f.severity == "info" and f.slowdown < 0.01
    assert f.details["if_quiet"] > 0.03 and "in a quiet job its excess would cost" in f.evidence
    # the simulation's static differences leave another rank a steady 4% slower: named too, at info
    assert all(g.severity == "info" for g in named.values()) and len(named) <= 3


def test_a_small_steady_straggler_is_named_at_info():
    """A rank 1.05x slower in forward among 64 costs 0.03% today and 1% in a quiet job: named, at
    info, because it is slow through the whole run; a short stretch of that size is not."""
    sc = Scenario(ranks=64, steps=300, faults=(Fault("straggler", ranks=(17,), phase="forward", factor=1.05),))
    [f] = stragglers(sc)
    assert (f.ranks, f.phase, f.severity) == ([17], "forward", "info")
    assert 0.005 <= f.details["if_quiet"] < 0.03 and f.first_step <= 20 and f.last_step >= 290
    short = Scenario(
        ranks=64, steps=300, faults=(Fault("straggler", ranks=(17,), phase="forward", factor=1.05, start=200, end=260),)
    )
    assert stragglers(short) == []


def test_a_healthy_job_still_has_no_straggler():
    assert stragglers(Scenario(ranks=16, steps=400)) == []
    assert stragglers(Scenario(ranks=8, steps=300, jitter=0.3, static=0.02)) == []


def test_onsets_are_placed_at_the_change_not_at_a_block_edge():
    for start in (150, 157, 163):  # not on a block boundary either
        sc = Scenario(
            ranks=8, steps=300, faults=(Fault("straggler", ranks=(2,), phase="backward", factor=1.4, start=start),)
        )
        [f] = stragglers(sc)
        assert abs(f.first_step - start) <= 3, (start, f.first_step)
    sc = Scenario(ranks=8, steps=300, faults=(Fault("data_stall", ranks=(1,), delay_s=0.01, start=100),))
    [f] = [f for f in analyze(simulate(sc)).findings if f.kind == "data_stall"]
    assert abs(f.first_step - 100) <= 3 and f.last_step == 299


HICCUPS = {0: (9, 14, 37, 48, 56), 1: (7, 10, 23, 55, 58), 3: (27,)}  # a real 4-rank demo's, on 2 busy cores


def hiccups(extra=()):
    spikes = tuple((r, s, 0.012) for r, steps in HICCUPS.items() for s in steps)
    return Scenario(ranks=4, steps=60, spikes=spikes + tuple(extra))


def test_a_few_hiccups_on_several_ranks_are_no_intermittent_straggler():
    # rank 0 has 5 in 57 steps: so does rank 1, and chance gives that at its peers' rate
    assert [f for f in found(hiccups()) if f.kind == "straggler"] == []


def test_a_rank_with_far_more_hiccups_than_chance_gives_is_an_intermittent_straggler():
    often = tuple((2, s, 0.012) for s in range(5, 60, 5))  # every fifth step: 11 in 57, its peers 0, 0 and 1
    sc = Scenario(ranks=4, steps=60, spikes=((3, 27, 0.012),) + often)
    [f] = [f for f in found(sc) if f.kind == "straggler"]
    assert (f.ranks, f.details["mode"]) == ([2], "intermittent")


def test_a_short_stretch_that_ended_long_before_the_runs_end_is_info():
    def straggler(**when):
        fault = Fault("straggler", ranks=(2,), phase="forward", factor=1.3, **when)
        [f] = [
            f
            for f in analyze(simulate(Scenario(ranks=4, steps=200, faults=(fault,)))).findings
            if f.kind == "straggler"
        ]
        return f

    f = straggler(start=20, end=35)  # 16 steps, about 7% slower, then over: under 1% of the run
    assert (f.severity, f.last_step) == ("info", 35) and f.details["run_share"] < 0.01
    assert "it ended 164 steps before the run's last" in f.evidence
    f = straggler(start=184)  # the same 16 steps at the run's end go on costing
    assert f.severity in ("warning", "critical") and "run_share" not in f.details


def test_a_short_noise_run_joined_to_the_stretch_does_not_hold_its_onset_early():
    """A real demo's data stall from step 300 was dated 110: a noise run at 110-124 and a quiet gap
    joined it to the real stretch, and the onset was searched only near the joined edge."""
    from telemetry.analysis.detectors.stretch import refine_edges

    x = np.random.default_rng(0).normal(0.0, 0.0005, 900)
    x[300:] += 0.02
    x[110:125] += 0.02
    assert refine_edges(x, 110, 899, 10) == (300, 899)
    assert refine_edges(x, 290, 899, 10) == (300, 899)  # found near the change: placed on it


def test_a_straggler_of_a_short_loaded_trace_is_named_though_its_own_work_varies_fourfold():
    """Twelve steps of two ranks' profiler traces taken beside another job (the kineto test's job, whose
    rank 1 does extra matrix products in forward): rank 1 is slower on every step, but a neighbour's load
    makes its extra work vary 4x from step to step, and with two ranks the noise unit is half its own
    spread; its windowed level dipped under the bar mid-trace and no straggler was named (issue 44)."""
    import pandas as pd

    from telemetry.analysis.detectors import analyze

    dur = [
        [0.1891, 0.174, 0.1041, 0.1183, 0.0535, 0.0381, 0.0515, 0.1035, 0.0901, 0.121, 0.1706, 0.0882],
        [0.1971, 0.1654, 0.1118, 0.107, 0.0538, 0.0421, 0.0417, 0.1101, 0.0926, 0.1183, 0.1547, 0.1074],
    ]
    fwd = [
        [0.0003, 0.0075, 0.0002, 0.0002, 0.0002, 0.0002, 0.0003, 0.0004, 0.0003, 0.0003, 0.0002, 0.0002],
        [0.142, 0.1309, 0.0834, 0.0893, 0.0386, 0.0224, 0.032, 0.0833, 0.0796, 0.094, 0.1271, 0.0611],
    ]
    bwd = [
        [0.0065, 0.0089, 0.0084, 0.0193, 0.0027, 0.0045, 0.0037, 0.0038, 0.0016, 0.0072, 0.0013, 0.0625],
        [0.0099, 0.0132, 0.0078, 0.0121, 0.011, 0.0157, 0.0072, 0.0245, 0.0111, 0.0009, 0.0246, 0.0172],
    ]
    comm = [
        [0.1857, 0.1562, 0.1023, 0.109, 0.0542, 0.0342, 0.0438, 0.0984, 0.0881, 0.1191, 0.1531, 0.0766],
        [0.0243, 0.0143, 0.0252, 0.0004, 0.0131, 0.0004, 0.0021, 0.0032, 0.0004, 0.0007, 0.0149, 0.0266],
    ]
    steps = [*range(2, 12), 14, 15]
    rows = [
        {
            "rank": r,
            "step": s,
            "start_s": 100.0 + 0.2 * i,
            "duration_s": dur[r][i],
            "forward_s": fwd[r][i],
            "backward_s": bwd[r][i],
            "comm_s": comm[r][i],
        }
        for r in (0, 1)
        for i, s in enumerate(steps)
    ]
    found = [(f.ranks, f.phase) for f in analyze(pd.DataFrame(rows)).findings if f.kind == "straggler"]
    assert found == [([1], "forward")]

"""The first straggler detector, on simulated synchronous steps (tests/simulate.py)."""

import numpy as np
import pytest
from simulate import simulate

from telemetry.detectors import analyze


def stragglers(table):
    return [f for f in analyze(table).findings if f.kind == "straggler"]


def test_persistent_straggler_is_named_with_rank_and_phase_and_cost():
    t = simulate(ranks=8, steps=200, slow={(5, "forward"): (1.5, 0, 199)})
    [f] = stragglers(t)
    assert f.ranks == [5] and f.phase == "forward"
    assert f.severity in ("warning", "critical")
    # true cost: 5 ms extra on a ~40 ms step, less the slack the noisy max already had
    assert 0.05 < f.slowdown < 0.15
    assert "rank 5's phase forward" in f.evidence and "arrives last" in f.evidence


def test_straggler_that_starts_midway_is_bounded_in_steps():
    t = simulate(ranks=8, steps=300, slow={(2, "backward"): (1.4, 150, 299)})
    [f] = stragglers(t)
    assert f.ranks == [2] and f.phase == "backward"
    assert 135 <= f.first_step <= 170 and f.last_step >= 290


def test_what_if_matches_the_simulated_truth():
    slow = simulate(ranks=8, steps=200, seed=3, slow={(1, "optimizer"): (3.0, 0, 199)})
    healthy = simulate(ranks=8, steps=200, seed=3)
    true_cost = 1 - healthy["duration_s"].sum() / slow["duration_s"].sum()
    [f] = stragglers(slow)
    assert f.ranks == [1] and f.phase == "optimizer"
    assert f.slowdown == pytest.approx(true_cost, rel=0.25)


@pytest.mark.parametrize("seed", range(5))
def test_healthy_jittery_job_reports_nothing(seed):
    assert stragglers(simulate(ranks=8, steps=200, seed=seed, jitter=0.15, static=0.02)) == []


def test_noise_traps_are_not_findings():
    t = simulate(ranks=8, steps=200, seed=1,
                 spikes=[(3, 50, 0.2), (6, 120, 0.3)],  # one-off GC pauses
                 all_rank_slow_steps=range(0, 200, 25))  # checkpoint steps hit every rank
    assert stragglers(t) == []  # warm-up (steps 0-1 are 3x slower) is skipped too


def test_rank_that_waits_longer_is_not_blamed():
    # A rank whose backward is long only because it waits inside it is a victim, not a straggler.
    t = simulate(ranks=4, steps=200, slow={(0, "forward"): (1.6, 0, 199)})
    found = stragglers(t)
    assert [f.ranks for f in found] == [[0]]


def test_tiny_world_of_two_ranks_and_empty_table():
    t = simulate(ranks=2, steps=100)
    assert stragglers(t) == []
    assert analyze(t.iloc[0:0]).findings == []


def test_summary_reports_total_what_if_and_throughput():
    t = simulate(ranks=8, steps=200, slow={(5, "forward"): (1.5, 0, 199)})
    s = analyze(t).summary
    assert s["ranks"] == 8 and s["steps"] == 200 and s["findings"] == 1
    assert 0.04 < s["slowdown"] < 0.15
    assert s["tokens_per_s"] == pytest.approx(8 * 4096 / np.median(t.groupby("step").duration_s.first()), rel=0.2)

"""Data stalls (telemetry/analysis/detectors/stall.py) on a simulated job with ground truth."""

import pytest

from telemetry.demo.simulate import Fault, Scenario, true_slowdown
from tests.helpers.detect import found


def test_data_stall_on_one_rank():
    sc = Scenario(ranks=8, steps=200, faults=(Fault("data_stall", ranks=(4,), delay_s=0.01),))
    [f] = found(sc)
    assert (f.kind, f.ranks, f.phase) == ("input_bound", [4], "data")  # from the start: its input is slow
    assert f.slowdown == pytest.approx(true_slowdown(sc, f.first_step, f.last_step), rel=0.25)


def contended(data_spike_s, spike_share=0.2, factor=1.6):
    """2 ranks, rank 1's backward ``factor``x slower all run (a CPU it shares), and its wait for its
    next batch longer by ``data_spike_s`` on ``spike_share`` of its steps (peers: 0.8 ms)."""
    import numpy as np

    from telemetry.demo.simulate import simulate

    t = simulate(
        Scenario(
            ranks=2,
            steps=400,
            data_s=0.0008,
            faults=(Fault("straggler", ranks=(1,), phase="backward", factor=factor),),
        )
    )
    hit = (t["rank"] == 1) & (np.random.default_rng(1).random(len(t)) < spike_share)
    t.loc[hit, "data_s"] += data_spike_s
    return t


def test_a_rank_slowed_in_everything_that_waits_longer_for_some_batches_is_a_straggler_not_a_data_stall():
    """Issue 23's noisy neighbour: the data wait's spikes (0.6 ms a step on average) are a small part
    of the rank's slowness (12 ms of compute a step); before the rule this was a data_stall warning
    whose cause read the same median wait for the rank and its peers."""
    from telemetry.analysis.detectors import analyze

    kinds = [(f.kind, f.ranks) for f in analyze(contended(0.003)).findings if f.kind != "low_utilization"]
    assert kinds == [("straggler", [1])]


def test_a_data_stall_on_a_straggling_rank_is_still_named_when_its_wait_stands_out():
    from telemetry.analysis.detectors import analyze

    a = analyze(contended(0.030, spike_share=0.15, factor=1.2))
    [stall] = [f for f in a.findings if f.kind == "input_bound"]  # long waits from the start: its input
    assert stall.ranks == [1] and stall.details["mean_s"] > 1.2 * stall.details["peer_mean_s"]
    assert any(f.kind == "straggler" and f.ranks == [1] for f in a.findings)
    [cause] = stall.causes
    ev = cause["evidence"]
    mine, peers = (float(x.split(" ms")[0]) for x in (ev.split("waits ")[1], ev.split("against ")[1]))
    assert cause["kind"] == "data_loader" and mine > 1.2 * peers  # its own numbers hold it up
    assert "long waits on some steps" in ev  # a median would have hidden them


def test_an_intermittent_stall_says_how_many_steps_and_the_mean_wait():
    sc = Scenario(
        ranks=8,
        steps=300,
        data_s=0.0008,
        faults=(Fault("data_stall", ranks=(3,), delay_s=0.04, start=100, probability=0.2),),
    )
    [f] = [f for f in found(sc) if f.kind == "data_stall"]
    assert f.ranks == [3] and " of steps " in f.evidence and "ms per step on average against" in f.evidence


def test_a_wait_grown_in_proportion_to_the_ranks_compute_does_not_stand_out():
    """Measured on a real run (tests/integration/test_cpu_causes.py's script with a DataLoader worker,
    a neighbour on rank 1's core): the wait 1.6x its peer's, its compute 1.46x; the wait's excess
    (1.85 ms) just passes a quarter of the compute's (1.82 ms), its growth does not pass the compute's
    by 1.2x. Before the rule that run's data_stall was critical."""
    from telemetry.analysis.detectors.stall import DataWait

    measured = DataWait(
        mean_s=4.87e-3, median_s=2.3e-3, peer_mean_s=3.02e-3, compute_excess_s=7.28e-3, compute_ratio=1.46
    )
    assert measured.excess_s >= 0.25 * measured.compute_excess_s and not measured.stands_out()
    same_wait_healthy_compute = DataWait(
        mean_s=4.87e-3, median_s=2.3e-3, peer_mean_s=3.02e-3, compute_excess_s=0.0, compute_ratio=1.0
    )
    assert same_wait_healthy_compute.stands_out()

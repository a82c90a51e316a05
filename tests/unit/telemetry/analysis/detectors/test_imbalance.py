"""Imbalance (telemetry/analysis/detectors/imbalance.py): moving imbalance is not a straggler, a
pipeline stage's is one finding, and block summaries do not claim it."""

from telemetry.analysis.detectors import analyze
from telemetry.demo.simulate import Fault, Scenario, simulate
from tests.helpers.detect import found, kinds


def test_block_summaries_do_not_claim_moving_imbalance():
    # online rows are 10-step medians: imbalance that moves from step to step is averaged away
    t = simulate(Scenario(ranks=16, steps=200, faults=(Fault("imbalance"),)))
    assert "imbalance" in [f.kind for f in analyze(t).findings]
    assert "imbalance" not in [f.kind for f in analyze(t, step_resolution=False).findings]


def test_moving_imbalance_is_not_a_straggler():
    sc = Scenario(ranks=16, steps=200, faults=(Fault("imbalance"),))
    assert kinds(found(sc)) == [("imbalance", (), None)]


def test_stage_imbalance_is_one_finding_for_the_stage():
    sc = Scenario(ranks=8, steps=200, stages=4, faults=(Fault("stage_imbalance", stage=3, factor=1.5),))
    [f] = found(sc)
    assert (f.kind, f.ranks) == ("stage_imbalance", [6, 7])

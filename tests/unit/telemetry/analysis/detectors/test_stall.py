"""Data stalls (telemetry/analysis/detectors/stall.py) on a simulated job with ground truth."""

import pytest

from telemetry.demo.simulate import Fault, Scenario, true_slowdown
from tests.helpers.detect import found


def test_data_stall_on_one_rank():
    sc = Scenario(ranks=8, steps=200, faults=(Fault("data_stall", ranks=(4,), delay_s=0.01),))
    [f] = found(sc)
    assert (f.kind, f.ranks, f.phase) == ("data_stall", [4], "data")
    assert f.slowdown == pytest.approx(true_slowdown(sc, f.first_step, f.last_step), rel=0.25)

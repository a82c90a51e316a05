"""Memory growth (telemetry/analysis/detectors/memory.py): a leak is found, a warm-up step is not."""

import pytest

from telemetry.analysis.detectors import analyze
from telemetry.demo.simulate import Fault, Scenario, simulate


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

"""Checkpoint findings and advice (telemetry/analysis/detectors/checkpoint.py) on steps tables with io.*
columns: a rank whose storage is slow against its peers is named, healthy ranks are not; checkpoints
over the budget are a job-wide finding costed by what the recommended interval gives back; Young's and
Daly's intervals against a worked example. On real gloo ranks: tests/integration/test_checkpoints_gloo.py."""

import numpy as np
import pandas as pd
import pytest

from telemetry.analysis.detectors import analyze
from telemetry.analysis.detectors.checkpoint import daly, waste, young


def table(ranks=4, steps=60, every=20, save_s=0.5, nbytes=100e6, slow=None, slow_factor=4.0, step_s=1.0, upload=False):
    """Steps of ``step_s`` on every rank; a save every ``every`` steps from step ``every`` - 1 in which each
    rank writes ``nbytes`` in ``save_s`` of its own storage time (``slow``: that rank ``slow_factor`` x
    longer; a blocking save then lasts as long as the slowest rank, on every rank)."""
    rng = np.random.default_rng(0)
    rows = []
    for s in range(steps):
        save = s % every == every - 1
        slowest = save_s * (slow_factor if slow is not None else 1.0)
        for r in range(ranks):
            own = save_s * (slow_factor if r == slow else 1.0) * (1 + 0.02 * rng.standard_normal())
            blocked = 0.0 if not save else (0.05 if upload else slowest)
            rows.append(
                {
                    "rank": r,
                    "step": s,
                    "start_s": 1000.0 + s * step_s,
                    "duration_s": step_s * (1 + 0.01 * rng.standard_normal()) + blocked,
                    "forward_s": 0.6 * step_s,
                    "io.checkpoint_s": blocked,
                    "io.checkpoint_async_s": own if save and upload else 0.0,
                    "io.checkpoint_bytes": nbytes if save else 0.0,
                    "io.checkpoint_io_s": own if save else 0.0,
                    "io.checkpoint_saves": 1.0 if save else 0.0,
                }
            )
    return pd.DataFrame(rows)


def kinds(result):
    return [(f.kind, f.ranks, f.severity) for f in result.findings if f.kind == "slow_checkpoint"]


def test_a_rank_whose_storage_is_four_times_slower_is_named_with_its_bandwidth():
    res = analyze(table(slow=2))
    [f] = [f for f in res.findings if f.kind == "slow_checkpoint" and f.ranks]
    assert f.ranks == [2] and f.first_step == 19 and f.last_step == 59
    assert f.details["bandwidth_Bps"]["2"] == pytest.approx(50e6, rel=0.05)
    assert f.details["peer_bandwidth_Bps"] == pytest.approx(200e6, rel=0.05)
    # three saves, each 1.5 s longer for everyone than at the peers' bandwidth: 4.5 s of the run's ~64 s
    assert f.details["extra_s"] == pytest.approx(4.5, rel=0.1) and f.severity == "critical"
    assert "rank 2" in f.evidence and "MB/s" in f.evidence


def test_healthy_ranks_and_a_slow_async_upload_cost_nothing():
    assert kinds(analyze(table())) == []
    # the slow rank's upload runs beside training: named, at no cost to the job (info)
    assert kinds(analyze(table(slow=1, upload=True))) == [("slow_checkpoint", [1], "info")]


def test_checkpoints_over_the_budget_are_a_job_wide_finding_costed_by_the_better_interval():
    res = analyze(table(every=5, save_s=0.5))  # a 0.5 s save every 5 steps of 1 s: about 9% of the time
    advice = res.summary["checkpoint_advice"]
    assert advice["saves"] == 12 and advice["interval_s"] == pytest.approx(5.0)
    assert advice["checkpoint_s"] == pytest.approx(0.5, rel=0.05)
    assert advice["mtbf_from"].startswith("failure_rate_per_hour=0.05")  # no failure in the run: the setting
    assert advice["daly_s"] == pytest.approx(daly(advice["checkpoint_s"], 72000.0), rel=1e-3)
    [f] = [f for f in res.findings if f.kind == "slow_checkpoint"]
    assert f.ranks == [] and f.details["share"] > 0.05
    assert f.slowdown == pytest.approx(advice["goodput_gain"]) and f.severity == "critical"
    assert "budget" in f.evidence and "Daly" in f.evidence
    # rare saves: under the budget, no finding, and the advice still given
    quiet = analyze(table(every=30))
    assert kinds(quiet) == [] and quiet.summary["checkpoint_advice"]["saves"] == 2


def test_youngs_and_dalys_intervals_and_the_time_lost_against_a_worked_example():
    # a 60 s blocking save, one failure a day (M = 86,400 s)
    assert young(60.0, 86400.0) == pytest.approx(3219.94, abs=0.01)  # sqrt(2 x 60 x 86400)
    # Daly: 3219.94 x (1 + sqrt(60 / 172800) / 3 + (60 / 172800) / 9) - 60
    assert daly(60.0, 86400.0) == pytest.approx(3180.06, abs=0.01)
    # lost at Daly's interval: 60 / 3180.06 + 3180.06 / 172800 = 1.887% + 1.840%
    assert waste(daly(60.0, 86400.0), 60.0, 86400.0) == pytest.approx(0.03727, abs=1e-5)
    assert waste(600.0, 60.0, 86400.0) == pytest.approx(0.10347, abs=1e-5)  # every 10 minutes: 10% + 0.35%
    assert daly(50000.0, 20000.0) == 20000.0  # a save longer than twice the time between failures: M

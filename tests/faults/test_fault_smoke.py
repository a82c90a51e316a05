"""The healthy job itself: the baseline every ratio in the fault table is taken against."""

import pytest

from telemetry.analysis.inputs.load import open_input

pytestmark = pytest.mark.slow


def test_the_healthy_job_records_every_step_of_every_rank(healthy_job, fault_table):
    steps = open_input(healthy_job.run_dir).table
    assert sorted(steps["rank"].unique()) == [0, 1]
    assert steps.groupby("rank")["step"].nunique().tolist() == [200, 200]
    assert healthy_job.shutdown_s() < 5.0
    fault_table.add(
        "baseline",
        "none (the healthy baseline: 2 gloo ranks, 200 steps, store + Prometheus)",
        f"finished; median step {healthy_job.median_step_s() * 1e3:.1f} ms, shutdown {healthy_job.shutdown_s():.2f} s",
        "nothing",
    )

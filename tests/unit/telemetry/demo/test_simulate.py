"""The simulator (telemetry/demo/simulate.py): device signals that behave as NVML's and DCGM's do,
host work in the step and between steps from a step on, and the tables of scenarios without them
unchanged."""

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from telemetry.demo.simulate import Fault, Scenario, simulate

SIGNALS = ["dev.gpu_utilization_ratio", "dev.gpu_sm_activity_ratio", "mfu"]


def job(table: pd.DataFrame, col: str) -> pd.Series:
    return table.groupby("step")[col].median()


def test_device_signals_change_nothing_else():
    sc = Scenario(ranks=4, steps=120, comm_s=0.012, faults=(Fault("straggler", ranks=(1,), phase="forward"),))
    plain, signals = simulate(sc), simulate(replace(sc, gpu_signals=True))
    assert not set(SIGNALS) & set(plain.columns)
    pd.testing.assert_frame_equal(signals.drop(columns=SIGNALS), plain)


def test_device_signals_read_as_the_devices_would():
    t = simulate(Scenario(ranks=4, steps=300, comm_s=0.012, gpu_signals=True))
    t = t[t["step"] >= 20]
    compute = (t["forward_s"] + t["backward_s"] - t["comm_s"] + t["optimizer_s"]).sum()
    busy = compute / (t["duration_s"] + t["data_s"]).sum()  # about 70%
    gpu, sm, mfu = (float(t[c].median()) for c in SIGNALS)
    assert 0.65 < busy < 0.75
    assert gpu > 0.95  # NVML: a kernel runs during compute and during the spinning all-reduce
    assert 0.5 < sm < busy < gpu and 0.25 < mfu < sm  # SMs: compute kernels mostly, the collective few
    assert ((t[SIGNALS] >= 0) & (t[SIGNALS] <= 1)).all().all()
    # sampled once a second of job time (a step is about 48 ms): each sample spans about 20 steps
    runs = t[t["rank"] == 0]["dev.gpu_utilization_ratio"].diff().ne(0).sum()
    assert 10 <= runs <= 20


@pytest.mark.parametrize("kind", ["host_gap", "host_overhead"])
def test_host_work_from_a_step_on(kind):
    sc = Scenario(ranks=4, steps=200, gpu_signals=True, faults=(Fault(kind, delay_s=0.01, start=100),))
    healthy, t = simulate(sc.healthy()), simulate(sc)
    gap_growth = (job(t, "start_s").diff() - job(healthy, "start_s").diff()).diff()  # epoch seconds: to 1e-6
    duration = job(t, "duration_s") - job(healthy, "duration_s")
    phases = ["forward_s", "backward_s", "optimizer_s", "data_s"]
    before, after = slice(0, 99), slice(101, 199)
    if kind == "host_gap":  # between steps: the step itself is as it was, the next one starts later
        pd.testing.assert_frame_equal(t[["duration_s", *phases]], healthy[["duration_s", *phases]])
        assert gap_growth.loc[101] == pytest.approx(0.01, abs=1e-5) and gap_growth.loc[102:].abs().max() < 1e-5
        assert gap_growth.loc[:100].abs().max() < 1e-5
    else:  # in the step, outside any phase: the step grows, its phases do not
        assert np.allclose(duration.loc[after], 0.01) and np.allclose(duration.loc[before], 0.0)
        assert np.allclose(job(t, "forward_s").loc[after], job(healthy, "forward_s").loc[after])
    # the GPU idles in it either way
    gpu = job(t, "dev.gpu_utilization_ratio")
    assert gpu.loc[30:80].median() > 0.95 and gpu.loc[130:199].median() < 0.85

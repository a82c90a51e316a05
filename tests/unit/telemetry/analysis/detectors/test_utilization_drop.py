"""utilization_regression (telemetry/analysis/detectors/utilization_drop.py): the busy share or a device
signal falls at a change point within the run, or against a baseline run; the moment, what fell, what
the idle time became; a warning unless other findings account for it; healthy runs and improvements
have none."""

import pytest

from telemetry.analysis.detectors import analyze, covered_seconds
from telemetry.analysis.report import render
from telemetry.demo.simulate import Fault, Scenario, simulate
from telemetry.exporters.prometheus import ONLINE_KINDS


def drops(table, **kw):
    return [f for f in analyze(table, **kw).findings if f.kind == "utilization_regression"]


@pytest.mark.parametrize("start", [120, 237, 301])
def test_a_drop_is_found_at_its_step_with_what_fell_and_what_the_idle_time_became(start):
    # from step S every rank spends 10 ms more on host work between steps: the step time is unchanged
    # (no regression finding), the devices idle, the busy share falls from 83% to 67%
    sc = Scenario(steps=400, gpu_signals=True, faults=(Fault("host_gap", delay_s=0.01, start=start),))
    result = analyze(simulate(sc))
    [f] = [f for f in result.findings if f.kind == "utilization_regression"]
    d = f.details
    assert f.severity == "warning" and f.ranks == [] and abs(f.first_step - start) <= 3 and f.last_step == 399
    assert d["series"] == "busy_fraction" and d["z"] >= 6
    busy, gpu = d["levels"]["busy_fraction"], d["levels"]["gpu_utilization"]
    assert busy[0] > 0.8 and 0.62 < busy[1] < 0.72 and gpu[0] > 0.95 and gpu[1] < 0.85
    assert (
        d["levels"]["mfu"][1] < d["levels"]["mfu"][0] and d["levels"]["sm_activity"][1] < d["levels"]["sm_activity"][0]
    )
    assert d["grew"] == "between_steps" and d["idle_before"]["between_steps"] < 0.01
    assert 0.15 < d["idle_after"]["between_steps"] < 0.25
    assert f.slowdown == pytest.approx(0.01 / 0.0513, rel=0.1)  # 10 ms of a 51 ms job step
    assert f"from step {f.first_step} the job's utilization fell: busy 8" in f.evidence
    assert "between steps (host work outside telemetry.step) 19% (was 0%)" in f.evidence
    assert [x.kind for x in result.findings if x.severity != "info"] == ["utilization_regression"]
    # the summary's total counts it (no other finding does), and low_utilization stays out of it
    assert result.summary["slowdown"] == pytest.approx(f.slowdown * (400 - f.first_step) / 400, rel=0.1)
    text = render(result, "run")
    assert "Not in it: low_utilization's" in text and "Busy: the ranks compute" in text


def test_a_drop_that_ends_says_so():
    sc = Scenario(steps=400, faults=(Fault("host_gap", delay_s=0.01, start=150, end=250),))
    [f] = drops(simulate(sc))
    assert abs(f.first_step - 150) <= 3 and abs(f.last_step - 250) <= 3 and f"until step {f.last_step}" in f.evidence


def test_the_smallest_drop_reported_is_five_percent():
    quiet = Scenario(steps=400, faults=(Fault("host_gap", delay_s=0.002, start=200),))  # 83% -> 79%: 4.6%
    assert drops(simulate(quiet)) == []
    clear = Scenario(steps=400, faults=(Fault("host_gap", delay_s=0.003, start=200),))  # 83% -> 77%: 6.7%
    [f] = drops(simulate(clear))
    before, after = f.details["levels"]["busy_fraction"]
    assert after <= before * 0.95 and abs(f.first_step - 200) <= 3


@pytest.mark.parametrize(
    "scenario",
    [
        Scenario(),
        Scenario(jitter=0.3, static=0.02),
        Scenario(comm_s=0.012, gpu_signals=True),
        Scenario(steps=800, checkpoint_every=50, seed=5),
        Scenario(spikes=((3, 50, 0.2), (6, 120, 0.3), (1, 222, 0.5)), checkpoint_every=25, static=0.02),
        Scenario(ranks=64, jitter=0.15),
    ],
)
def test_healthy_runs_have_none(scenario):
    assert drops(simulate(scenario)) == []


def test_compute_that_gets_faster_is_no_regression():
    # backward 0.6x from step 200: the busy share falls (the all-reduce is exposed) but the idle time
    # per step stays as it was: an improvement
    sc = Scenario(steps=400, gpu_signals=True, faults=(Fault("regression", phase="backward", factor=0.6, start=200),))
    assert drops(simulate(sc)) == []


def test_a_drop_other_findings_account_for_is_info():
    # a straggler from step 150: the job waits for it (the wait is the straggler finding's what-if)
    sc = Scenario(faults=(Fault("straggler", ranks=(2,), phase="backward", factor=1.4, start=150),))
    [f] = drops(simulate(sc))
    assert f.severity == "info" and f.details["grew"] == "findings" and abs(f.first_step - 150) <= 3
    # slower collectives from step 150: slow_comm's what-if counts that time
    sc = Scenario(steps=400, faults=(Fault("slow_comm", factor=3.0, start=150),))
    [f] = drops(simulate(sc))
    assert f.severity == "info" and f.details["grew"] == "exposed_comm" and "slow_comm from step" in f.evidence


def test_a_step_time_regression_accounts_only_for_its_own_part():
    # from step 150: 10 ms of host work between steps and 2 ms in the step outside any phase. The
    # step-time regression (no phase) is the 2 ms; the drop's grown part is between the steps, which
    # that regression does not cost: both are warnings, and the total counts both (a real 2-rank demo
    # with host_gap showed this: the ranks' compute also slowed after each sleep)
    sc = Scenario(
        steps=400,
        faults=(Fault("host_gap", delay_s=0.01, start=150), Fault("host_overhead", delay_s=0.002, start=150)),
    )
    result = analyze(simulate(sc))
    [drop] = [f for f in result.findings if f.kind == "utilization_regression"]
    [reg] = [f for f in result.findings if f.kind == "regression"]
    assert drop.severity == "warning" and drop.details["grew"] == "between_steps" and reg.phase is None
    m = result.matrix
    both = drop.slowdown * covered_seconds(m, drop) + reg.slowdown * covered_seconds(m, reg)
    assert result.summary["slowdown"] == pytest.approx(both / m.step_time().sum(), rel=1e-3)


def test_device_signals_find_what_the_busy_share_cannot_see():
    # 10 ms of host work in the step outside any phase from step 150: telemetry counts it as the step's
    # compute (its busy share does not fall), the GPU idles in it; the step-time regression names no
    # phase and accounts for the time; the device signals, sampled once a second (about 20 steps), say why
    sc = Scenario(steps=400, gpu_signals=True, faults=(Fault("host_overhead", delay_s=0.01, start=150),))
    result = analyze(simulate(sc))
    [f] = [f for f in result.findings if f.kind == "utilization_regression"]
    d = f.details
    assert d["series"] in ("gpu_utilization", "sm_activity", "mfu") and 10 <= d["steps_per_sample"] <= 30
    assert abs(f.first_step - 150) <= d["steps_per_sample"] and d["grew"] is None
    assert d["levels"]["busy_fraction"][1] >= d["levels"]["busy_fraction"][0]  # telemetry's share did not fall
    assert d["levels"]["gpu_utilization"][1] < 0.85 < d["levels"]["gpu_utilization"][0]
    assert "the device idles in time telemetry counts as the step's compute" in f.evidence
    assert f.severity == "info" and "regression from step" in f.evidence
    assert any(x.kind == "regression" and x.phase is None and x.severity != "info" for x in result.findings)


def test_against_a_baseline_run():
    base = simulate(Scenario(gpu_signals=True))
    assert drops(simulate(Scenario(seed=1, gpu_signals=True)), base=base) == []  # another run of the same job
    run = simulate(Scenario(seed=1, gpu_signals=True, gap_s=0.008))  # 8 ms of host work between steps
    [f] = drops(run, base=base, base_name="the base run b")
    d = f.details
    assert f.severity == "warning" and (f.first_step, f.last_step) == (15, 299) and d["base"] == "the base run b"
    assert d["series"] == "busy_fraction" and d["levels"]["busy_fraction"][1] < d["levels"]["busy_fraction"][0] - 0.1
    assert d["grew"] == "between_steps" and d["p"] < 1e-3 and "against the base run b" in f.evidence
    assert d["levels"]["gpu_utilization"][1] < d["levels"]["gpu_utilization"][0]


def test_online_detection_reports_the_kind():
    assert "utilization_regression" in ONLINE_KINDS
    # a block table (online detection's rows: one per rank and block of 10 steps, no gaps between steps
    # known) finds a drop too: a data wait from step 400, accounted for by the data stall found with it
    # (z >= 6 needs about 25 blocks on each side)
    table = simulate(Scenario(steps=800, faults=(Fault("data_stall", delay_s=0.01, start=400),)))
    blocks = table.assign(step=table["step"] // 10).groupby(["rank", "step"], as_index=False).median()
    result = analyze(blocks, step_resolution=False)
    [f] = [f for f in result.findings if f.kind == "utilization_regression"]
    assert abs(f.first_step - 40) <= 1 and f.details["grew"] == "data_wait"
    assert f.severity == "info" and any(x.kind == "data_stall" for x in result.findings)

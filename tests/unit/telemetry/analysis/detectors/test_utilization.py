"""low_utilization: the job computes under a bound of its time, sustained, with its idle time split
into what a user can act on (simulated jobs whose idle part is known); between the warning bound
(60%) and the bound (80%) it is info, under the warning bound a warning, under half of it critical."""

import json

import pytest

from telemetry.analysis.detectors import UtilizationParams, analyze
from telemetry.cli import main as cli
from telemetry.config import Config, ConfigError
from telemetry.demo.simulate import Fault, Scenario, simulate


def gaps(table, **kw):
    return [f for f in analyze(table, **kw).findings if f.kind == "low_utilization"]


def rule(busy):
    """The severity rule at the default bounds (docs/detectors.md)."""
    return "info" if busy >= 0.6 else "warning" if busy >= 0.3 else "critical"


@pytest.mark.parametrize(
    "largest, scenario",
    [
        ("data_wait", Scenario(data_s=0.015)),
        ("exposed_comm", Scenario(comm_s=0.02)),
        ("checkpoint", Scenario(checkpoint_every=3, checkpoint_s=0.2)),
        ("between_steps", Scenario(gap_s=0.015)),
        ("waiting_for_ranks", Scenario(jitter=0.3, seed=3)),
    ],
)
def test_the_largest_idle_part_is_named(largest, scenario):
    [f] = gaps(simulate(scenario))
    d = f.details
    assert d["largest"] == largest and f.ranks == []
    assert f.severity == rule(d["busy_fraction"]) and d["warn_bound"] == 0.6
    assert d["busy_fraction"] < 0.8 and f.slowdown == pytest.approx(d["idle"][largest])
    # the parts are shares of the same time: with the busy share they never add up to more than all of it
    assert d["busy_fraction"] + sum(d["idle"].values()) <= 1.0 + 1e-3  # (rounded to 4 places)
    assert f.first_step <= 20 and f.last_step == scenario.steps - 1 and "bound" in f.evidence


# Healthy jobs whose ranks compute 60-80% of the time: the common case in data-parallel training
HEALTHY_60_80 = [
    Scenario(comm_s=0.012),  # exposed communication, about 70%
    Scenario(comm_s=0.016, gpu_signals=True),  # about 66%, with GPU utilization, SM activity and MFU
    Scenario(gap_s=0.01),  # host work between steps, about 67%
    Scenario(jitter=0.3, static=0.02),  # waiting for ranks under heavy jitter, about 66%
    Scenario(spikes=((3, 50, 0.2), (6, 120, 0.3)), checkpoint_every=25, static=0.02),  # checkpoints, about 65%
    Scenario(steps=800, checkpoint_every=50, seed=5),  # about 75%
]


@pytest.mark.parametrize("scenario", HEALTHY_60_80)
def test_a_healthy_job_at_60_to_80_percent_busy_is_info_and_nothing_warns(scenario):
    result = analyze(simulate(scenario))
    assert [f.kind for f in result.findings if f.severity != "info"] == []
    [f] = [f for f in result.findings if f.kind == "low_utilization"]
    assert 0.6 <= f.details["busy_fraction"] < 0.8 and "above the 60% warning bound" in f.evidence
    u = result.summary["utilization"]
    assert u["band"] == "info" and 0.6 <= u["busy_fraction"] < 0.8 and (u["bound"], u["warn_bound"]) == (0.8, 0.6)


def test_a_job_at_55_percent_busy_is_a_warning_and_under_30_percent_critical():
    [f] = gaps(simulate(Scenario(comm_s=0.024)))  # about 57%
    assert f.severity == "warning" and 0.5 < f.details["busy_fraction"] < 0.6
    assert "under the 60% warning bound" in f.evidence and f.details["largest"] == "exposed_comm"
    [f] = gaps(simulate(Scenario(gap_s=0.1)))  # about 25%: the job mostly waits
    assert f.severity == "critical" and f.details["busy_fraction"] < 0.3 and "the job mostly waits" in f.evidence


def test_a_stretch_that_falls_under_the_warning_bound_is_a_warning_of_its_own():
    sc = Scenario(steps=400, comm_s=0.012, faults=(Fault("host_gap", delay_s=0.02, start=200),))  # 70%, then 50%
    info, warning = sorted(gaps(simulate(sc)), key=lambda f: f.first_step)
    assert info.severity == "info" and 0.6 <= info.details["busy_fraction"] < 0.8 and info.last_step < 200
    assert warning.severity == "warning" and warning.details["busy_fraction"] < 0.6
    assert (
        180 <= warning.first_step <= 215 and warning.last_step == 399 and warning.details["largest"] == "between_steps"
    )


def test_device_signals_that_read_busy_are_explained_not_contradicted():
    # the case: the ranks compute about 76% while NVML reads the GPU 97% busy
    table = simulate(Scenario(comm_s=0.008, gpu_signals=True))
    [f] = gaps(table)
    d = f.details
    assert f.severity == "info" and 0.7 < d["busy_fraction"] < 0.8 and d["gpu_utilization"] > 0.95
    assert f"GPU utilization {d['gpu_utilization']:.0%}" in f.evidence
    assert "counts any kernel running, a collective's kernel spinning while it waits" in f.evidence
    assert "the compute share is telemetry's" in f.evidence


def test_a_busy_job_has_none_and_the_bound_is_the_users():
    table = simulate(Scenario(gap_s=0.0, comm_s=0.002))  # about 88% busy
    assert gaps(table) == []
    [f] = gaps(table, utilization=UtilizationParams(bound=0.95))
    assert f.details["bound"] == 0.95 and "95% bound" in f.evidence and f.severity == "info"
    [f] = gaps(table, utilization=UtilizationParams(bound=0.95, warn_bound=0.95))
    assert f.severity == "warning" and "under the 95% warning bound" in f.evidence


def test_a_gap_that_begins_mid_run_is_bounded_in_steps():
    sc = Scenario(steps=400, comm_s=0.002, faults=(Fault("slow_comm", factor=12.0, start=200),))
    result = analyze(simulate(sc))
    [f] = [f for f in result.findings if f.kind == "low_utilization"]
    # the running window's share crosses the warning bound later than the bound (88% -> 45%): within 25 steps
    assert 180 <= f.first_step <= 225 and f.last_step == 399 and f.details["largest"] == "exposed_comm"
    [drop] = [f for f in result.findings if f.kind == "utilization_regression"]  # the moment, to the step
    assert 197 <= drop.first_step <= 203 and drop.severity == "info" and "slow_comm from step" in drop.evidence


def test_one_long_step_is_not_a_gap():
    sc = Scenario(comm_s=0.002, spikes=((3, 150, 2.0),))  # a 2 s pause on one step
    assert gaps(simulate(sc)) == []


def test_a_gap_the_other_findings_explain_is_info():
    sc = Scenario(faults=(Fault("straggler", ranks=(4,), phase="backward", factor=2.5),))
    [f] = gaps(simulate(sc))
    assert f.details["largest"] == "findings" and f.severity == "info"


def test_gpu_signals_are_reported_beside(tmp_path):
    table = simulate(Scenario(comm_s=0.02))
    table["dev.gpu_utilization_ratio"] = 0.97  # NVML counts the all-reduce's spinning kernel as busy
    table["mfu"] = 0.31
    [f] = gaps(table)
    assert f.details["gpu_utilization"] == pytest.approx(0.97) and f.details["mfu"] == pytest.approx(0.31)
    assert "GPU utilization 97%" in f.evidence and "MFU 31%" in f.evidence


def test_the_bound_is_checked_where_it_is_given(tmp_path, capsys):
    with pytest.raises(ValueError, match="bound"):
        UtilizationParams(bound=1.5)
    with pytest.raises(ValueError, match="warn_bound=0.9 is above bound=0.8"):
        UtilizationParams(warn_bound=0.9)
    with pytest.raises(ConfigError, match="busy_bound"):
        Config.resolve({"busy_bound": 0.0}, environ={})
    with pytest.raises(ConfigError, match="busy_warn_bound=0.0 is out of range"):
        Config.resolve({"busy_warn_bound": 0.0}, environ={})
    with pytest.raises(
        ConfigError, match="busy_warn_bound=0.9 is above busy_bound=0.8; accepted: busy_warn_bound <= b"
    ):
        Config.resolve({"busy_warn_bound": 0.9}, environ={})
    with pytest.raises(ConfigError, match="TELEMETRY_BUSY_WARN_BOUND"):
        Config.resolve({}, environ={"TELEMETRY_BUSY_WARN_BOUND": "0.85"})
    assert Config.resolve({}, environ={}).busy_warn_bound == 0.6
    assert Config.resolve({"busy_bound": 0.5}, environ={}).busy_warn_bound == 0.5  # the default follows a lower bound
    assert Config.resolve({"busy_bound": 0.9, "busy_warn_bound": 0.7}, environ={}).busy_warn_bound == 0.7
    path = tmp_path / "t.csv"
    simulate(Scenario(comm_s=0.002)).to_csv(path, index=False)
    with pytest.raises(SystemExit) as exc:
        cli(["analyze", str(path), "--busy-bound", "1.5"])
    assert exc.value.code == 2 and "accepted: a fraction above 0 and at most 1" in capsys.readouterr().err
    assert cli(["analyze", str(path), "--json", "--busy-bound", "0.95"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(f["kind"], f["severity"]) for f in doc["findings"]] == [("low_utilization", "info")]
    assert cli(["analyze", str(path), "--json", "--busy-bound", "0.95", "--busy-warn-bound", "0.95"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(f["kind"], f["severity"]) for f in doc["findings"]] == [("low_utilization", "warning")]
    assert cli(["analyze", str(path), "--json", "--busy-bound", "0.5"]) == 0  # the warning bound follows it down
    assert json.loads(capsys.readouterr().out)["summary"]["utilization"]["warn_bound"] == 0.5
    assert cli(["analyze", str(path), "--busy-warn-bound", "0.9"]) == 2
    assert "--busy-warn-bound 0.9 is above --busy-bound 0.8" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli(["analyze", str(path), "--busy-warn-bound", "0"])
    assert exc.value.code == 2 and "accepted: a fraction above 0 and at most 1" in capsys.readouterr().err
    assert cli(["demo", "--run-dir", str(tmp_path / "r"), "--busy-warn-bound", "0.9"]) == 2  # refused before it starts
    assert "--busy-warn-bound 0.9 is above --busy-bound 0.8" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_a_low_utilization_told_again_moves_the_culprits_wait_to_the_ranks_spread():
    """A long run's straggler measured again on raw rows costs less than its blocks said: the busy split's
    wait for the findings' culprits gives that back to the wait for slower ranks, and the finding says so."""
    from telemetry.analysis.detectors import from_table
    from telemetry.analysis.detectors.utilization import retold
    from telemetry.analysis.findings import Finding

    m = from_table(simulate(Scenario(ranks=8, steps=200, seed=1)))
    idle = {"exposed_comm": 0.11, "findings": 0.09, "waiting_for_ranks": 0.03, "data_wait": 0.01}
    details = {"busy_fraction": 0.75, "bound": 0.8, "warn_bound": 0.6, "idle": idle, "block_steps": 64}
    f = Finding("low_utilization", [], None, 20, 199, "info", 0.11, "the blocks' split", details=details)
    g = retold(f, m, 0.076)
    assert g.details["idle"] == {"exposed_comm": 0.11, "waiting_for_ranks": 0.106, "findings": 0.014, "data_wait": 0.01}
    assert "waiting in collectives for slower ranks 11%" in g.evidence, g.evidence
    assert "waiting for the other findings' culprits 1%" in g.evidence, g.evidence
    assert (g.first_step, g.last_step, g.severity, g.details["block_steps"]) == (20, 199, "info", 64)
    assert retold(f, m, 0.0) is f

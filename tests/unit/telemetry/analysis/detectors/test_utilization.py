"""low_utilization: the job computes under a bound of its time, sustained, with its idle time split
into what a user can act on (simulated jobs whose idle part is known)."""

import json

import pytest

from telemetry.analysis.detectors import UtilizationParams, analyze
from telemetry.cli import main as cli
from telemetry.config import Config, ConfigError
from telemetry.demo.simulate import Fault, Scenario, simulate


def gaps(table, **kw):
    return [f for f in analyze(table, **kw).findings if f.kind == "low_utilization"]


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
    assert f.severity == ("critical" if d["busy_fraction"] < 0.4 else "warning")  # under half the bound: critical
    assert d["busy_fraction"] < 0.8 and f.slowdown == pytest.approx(d["idle"][largest])
    # the parts are shares of the same time: with the busy share they never add up to more than all of it
    assert d["busy_fraction"] + sum(d["idle"].values()) <= 1.0 + 1e-3  # (rounded to 4 places)
    assert f.first_step <= 20 and f.last_step == scenario.steps - 1 and "bound" in f.evidence


def test_a_busy_job_has_none_and_the_bound_is_the_users():
    table = simulate(Scenario(gap_s=0.0, comm_s=0.002))  # about 88% busy
    assert gaps(table) == []
    [f] = gaps(table, utilization=UtilizationParams(bound=0.95))
    assert f.details["bound"] == 0.95 and "95% bound" in f.evidence


def test_a_gap_that_begins_mid_run_is_bounded_in_steps():
    sc = Scenario(steps=400, comm_s=0.002, faults=(Fault("slow_comm", factor=12.0, start=200),))
    [f] = gaps(simulate(sc))
    assert 180 <= f.first_step <= 215 and f.last_step == 399 and f.details["largest"] == "exposed_comm"


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
    with pytest.raises(ConfigError, match="busy_bound"):
        Config.resolve({"busy_bound": 0.0}, environ={})
    path = tmp_path / "t.csv"
    simulate(Scenario(comm_s=0.002)).to_csv(path, index=False)
    with pytest.raises(SystemExit) as exc:
        cli(["analyze", str(path), "--busy-bound", "1.5"])
    assert exc.value.code == 2 and "accepted: a fraction above 0 and at most 1" in capsys.readouterr().err
    assert cli(["analyze", str(path), "--json", "--busy-bound", "0.95"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [f["kind"] for f in doc["findings"]] == ["low_utilization"]

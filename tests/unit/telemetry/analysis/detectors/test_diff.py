"""Per-phase regressions between runs (telemetry/analysis/detectors/diff.py); noise alone reports
nothing. The command: tests/unit/telemetry/cli/test_diff.py."""

import pytest

from telemetry.analysis.detectors.diff import diff
from telemetry.cli import main as cli
from telemetry.demo.simulate import Fault, Scenario, simulate


@pytest.mark.parametrize("seed", range(3))
def test_two_runs_of_the_same_job_differ_by_nothing(seed):
    base = simulate(Scenario(ranks=8, steps=300, seed=seed, jitter=0.15))
    new = simulate(Scenario(ranks=8, steps=300, seed=seed + 100, jitter=0.15))
    assert diff(base, new)["findings"] == []


def test_a_slower_backward_is_a_regression_of_that_phase():
    base = simulate(Scenario(ranks=8, steps=300, seed=1))
    new = simulate(Scenario(ranks=8, steps=300, seed=2, faults=(Fault("regression", phase="backward", factor=1.2),)))
    doc = diff(base, new)
    phases = [(f["kind"], f["phase"]) for f in doc["findings"]]
    assert ("regression", "backward") in phases and ("regression", None) in phases  # the step too
    assert ("regression", "forward") not in phases
    back = next(f for f in doc["findings"] if f["phase"] == "backward")
    assert back["details"]["change"] == pytest.approx(0.2, abs=0.03) and back["details"]["p"] < 1e-3
    assert doc["summary"]["step_change"] > 0.08


def test_a_faster_run_is_an_improvement_not_a_regression():
    base = simulate(Scenario(ranks=8, steps=300, seed=1, faults=(Fault("regression", phase="forward", factor=1.5),)))
    new = simulate(Scenario(ranks=8, steps=300, seed=2))
    kinds = {(f["kind"], f["phase"]) for f in diff(base, new)["findings"]}
    assert ("improvement", "forward") in kinds and not any(k == "regression" for k, _ in kinds)


def test_findings_come_in_one_order_every_time():
    # The series were once taken from a set, whose order changes with each process's hash seed: two
    # runs of `telemetry diff` on the same files printed equal-cost findings in different orders.
    base = simulate(Scenario(ranks=8, steps=300, seed=1, data_s=0.002, faults=(Fault("regression", factor=1.5),)))
    new = simulate(Scenario(ranks=8, steps=300, seed=2, data_s=0.001))
    doc = diff(base, new)
    improved = [f["details"]["series"] for f in doc["findings"] if f["kind"] == "improvement"]
    assert len(improved) >= 3
    assert improved == [s for s in doc["summary"]["series"] if s in improved]
    assert list(doc["summary"]["series"])[0] == "step" and list(doc["summary"]["series"])[-1] == "data"


def test_a_large_consistent_change_on_few_blocks_is_a_regression():
    # 70 steps: 6 blocks a run, where p can never reach 1e-3; a 65% slower step must still show.
    base = simulate(Scenario(ranks=4, steps=70, seed=1, jitter=0.1))
    new = simulate(Scenario(ranks=4, steps=70, seed=2, jitter=0.1, faults=(Fault("regression", factor=1.65),)))
    doc = diff(base, new)
    step = doc["summary"]["series"]["step"]
    assert 1e-3 < step["p"] < step["p_bound"] and step["change"] > 0.5
    assert ("regression", None) in [(f["kind"], f["phase"]) for f in doc["findings"]]


def test_too_few_blocks_to_decide_is_said_not_passed_in_silence(tmp_path, capsys):
    base = simulate(Scenario(ranks=4, steps=24, seed=1))
    new = simulate(Scenario(ranks=4, steps=24, seed=2, faults=(Fault("regression", factor=1.3),)))
    doc = diff(base, new)
    assert doc["findings"] == [] and "step" in doc["summary"]["undecided"]
    assert "cannot reach" in doc["summary"]["undecided"]["step"]
    b, n = tmp_path / "b.csv", tmp_path / "n.csv"
    base.to_csv(b, index=False)
    new.to_csv(n, index=False)
    assert cli(["diff", str(b), str(n)]) == 0
    out = capsys.readouterr().out
    assert "undecided: step:" in out and "among the series decided" in out


def test_a_small_change_still_needs_strong_evidence():
    from telemetry.analysis.detectors.diff import DiffParams

    p = DiffParams()
    assert p.bound(0.05) == 1e-3 and p.bound(0.25) == pytest.approx(5e-3) and p.bound(3.0) == 0.01

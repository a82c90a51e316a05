"""Analysis over windows of steps (telemetry/analysis/longrun/windows.py): a window edge inside a straggler's
span, ``--steps``, ``--last``, the window plan and the merge of findings."""

import pytest

from telemetry.analysis.inputs.load import open_input
from telemetry.analysis.longrun.windows import merge_findings, plan
from telemetry.analysis_options import parse_steps
from telemetry.cli import main as cli
from tests.helpers.runs import analyzed, simulated


def test_a_straggler_across_a_window_edge_is_one_finding_with_its_true_span(tmp_path, capsys):
    out = simulated(tmp_path, "straggler:rank=3,phase=backward,factor=1.5,start=150")
    _, whole = analyzed(capsys, out)
    code, doc = analyzed(capsys, out, "--window-rows", "3200")  # windows of 200 steps: edges at 200 and 400
    assert doc["summary"]["windows"] == {"count": 3, "steps_each": 200}
    [f] = [f for f in doc["findings"] if f["kind"] == "straggler"]
    [g] = [f for f in whole["findings"] if f["kind"] == "straggler"]
    assert (f["ranks"], f["phase"]) == ([3], "backward") and f["details"]["windows"] == 3
    assert abs(f["first_step"] - 150) <= 10 and f["last_step"] == 599 and f["first_step"] == g["first_step"]
    assert f["slowdown"] == pytest.approx(g["slowdown"], rel=0.1)
    assert doc["summary"]["steps"] == 600 and doc["summary"]["first_step"] == 0


def test_steps_and_last_analyze_a_window_only(tmp_path, capsys):
    out = simulated(tmp_path, "regression:factor=1.3,start=400,phase=backward")
    _, doc = analyzed(capsys, out, "--steps", "100:399")
    assert (doc["summary"]["first_step"], doc["summary"]["last_step"]) == (100, 399)
    assert not [f for f in doc["findings"] if f["kind"] == "regression"]  # it begins after the window
    _, doc = analyzed(capsys, out, "--last", "300")
    assert (doc["summary"]["first_step"], doc["summary"]["last_step"]) == (300, 599)
    [f] = [f for f in doc["findings"] if f["kind"] == "regression"]
    assert abs(f["first_step"] - 400) <= 10
    table = str(tmp_path / "steps.parquet")
    open_input(out).table.to_parquet(table)
    _, doc = analyzed(capsys, table, "--last", "50")
    assert (doc["summary"]["first_step"], doc["summary"]["last_step"]) == (550, 599)


def test_bad_windows_are_refused_with_the_accepted_form(tmp_path, capsys):
    with pytest.raises(ValueError, match="accepted: A:B"):
        parse_steps("12")
    with pytest.raises(ValueError, match="0 <= A <= B"):
        parse_steps("9:3")
    assert parse_steps(":20") == (0, 20) and parse_steps("5:")[0] == 5
    out = simulated(tmp_path)
    assert cli(["analyze", out, "--steps", "x:y"]) == 2
    assert "not step numbers" in capsys.readouterr().err


def test_plan_and_merge():
    assert plan(0, 999, 100, rows=25_000) == [(0, 249), (250, 499), (500, 749), (750, 999)]
    assert plan(0, 9, 4, rows=10**6) == [(0, 9)]
    from telemetry.analysis.findings import Finding

    def f(a, b, cost):
        return Finding(
            kind="straggler",
            ranks=[1],
            phase="forward",
            first_step=a,
            last_step=b,
            severity="warning",
            slowdown=cost,
            evidence="e",
            details={},
        )

    [m] = merge_findings([[f(10, 99, 0.02)], [f(100, 199, 0.04)]], tolerance=5)
    assert (m.first_step, m.last_step, m.slowdown) == (10, 199, pytest.approx(0.03, abs=1e-3))
    assert len(merge_findings([[f(10, 50, 0.02)], [f(150, 199, 0.04)]], tolerance=5)) == 2  # a gap: two

"""Analysis over windows of steps (telemetry/analysis/windows.py) and simulated run directories
(``telemetry simulate``): a window edge inside a straggler's span, ``--steps``, ``--last``."""

import json
import os

import pytest

from telemetry.analysis.load import open_input
from telemetry.analysis.windows import merge_findings, parse_steps, plan
from telemetry.cli import main as cli


def simulated(tmp_path, *inject, ranks=16, steps=600):
    out = str(tmp_path / "sim")
    args = ["simulate", "--ranks", str(ranks), "--steps", str(steps), "--out", out]
    for spec in inject:
        args += ["--inject", spec]
    assert cli(args) == 0
    return out


def analyzed(capsys, *args):
    capsys.readouterr()
    code = cli(["analyze", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_simulate_writes_a_run_directory_that_analyze_reads(tmp_path, capsys):
    out = simulated(tmp_path, "straggler:rank=5,phase=forward,factor=1.6")
    assert "wrote 9,600 step records (16 ranks x 600 steps)" in capsys.readouterr().out
    truth = json.load(open(os.path.join(out, "truth.json")))
    assert truth["faults"][0]["kind"] == "straggler" and truth["faults"][0]["ranks"] == [5]
    assert truth["scenario"]["ranks"] == 16 and truth["records"] == 9600
    names = os.listdir(os.path.join(out, "ranks"))
    assert "rank-00005.seg-000001.parquet" in names and not [n for n in names if "tail" in n]
    code, doc = analyzed(capsys, out)
    stragglers = [
        (f["ranks"], f["phase"]) for f in doc["findings"] if f["kind"] == "straggler" and f["severity"] != "info"
    ]
    assert stragglers == [([5], "forward")]
    run = open_input(out)
    assert set(run.table["node"]) == {"node0", "node1"}  # eight ranks a node


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

"""Simulated run directories (telemetry/demo/simrun.py, `telemetry simulate`): written as a real run
store, with their ground truth, and read by analyze."""

import json
import os

from telemetry.analysis.load import open_input
from tests.helpers.runs import analyzed, simulated


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


def test_simulate_injects_host_work_between_steps(tmp_path, capsys):
    out = simulated(tmp_path, "host_gap:delay_ms=10,start=300")  # 16 ranks x 600 steps
    capsys.readouterr()
    code, doc = analyzed(capsys, out)
    [f] = [f for f in doc["findings"] if f["kind"] == "utilization_regression"]
    assert f["severity"] == "warning" and abs(f["first_step"] - 300) <= 3 and f["details"]["grew"] == "between_steps"
    assert json.load(open(os.path.join(out, "truth.json")))["faults"][0]["delay_s"] == 0.01

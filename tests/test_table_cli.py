"""Steps tables from anyone, --inject specs, and the CLI's answers to bad input."""

import json

import numpy as np
import pandas as pd
import pytest

from telemetry.analysis.table import TableError, phase_columns, validate
from telemetry.cli import main as cli
from telemetry.demo.faults import InjectError, check_against_job, parse_inject
from telemetry.demo.simulate import Fault, Scenario, simulate


def test_phase_columns_follow_the_contract():
    t = validate(
        pd.DataFrame(
            {
                "rank": [0],
                "step": [0],
                "start_s": [0.0],
                "duration_s": [1.0],
                "data_s": [0.1],
                "forward_s": [0.2],
                "comm_s": [0.3],
                "comm.forward_s": [0.1],
                "log.loss_s": [1.0],
                "tokens": [5],
            }
        )
    )
    assert phase_columns(t) == ["data_s", "forward_s"]


def test_missing_required_columns_are_named():
    with pytest.raises(TableError, match=r"missing column\(s\) start_s, duration_s; a steps table needs rank, step"):
        validate(pd.DataFrame({"rank": [0], "step": [1]}))


def test_bad_rows_are_reported_and_skipped_never_invented(caplog):
    t = validate(
        pd.DataFrame(
            {
                "rank": [0, 0, 0, 1],
                "step": [0, 1, 2, 0],
                "start_s": [0.0, 1.0, 2.0, 0.0],
                "duration_s": [1.0, np.nan, -1.0, 1.0],
                "forward_s": [0.5, 0.5, 0.5, np.nan],
            }
        )
    )
    assert t[["rank", "step"]].values.tolist() == [[0, 0], [1, 0]]
    assert np.isnan(t.loc[t["rank"] == 1, "forward_s"]).all()  # a missing phase stays missing
    assert "2 row(s) with missing, non-finite or negative" in caplog.text


def test_analyze_json_on_a_csv_table(tmp_path, capsys):
    path = tmp_path / "steps.csv"
    sc = Scenario(ranks=8, steps=200, faults=(Fault("straggler", ranks=(3,), phase="backward", factor=1.5),))
    simulate(sc).to_csv(path, index=False)
    assert cli(["analyze", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    [f] = [f for f in doc["findings"] if f["kind"] != "low_utilization"]  # the job waits for rank 3: busy < 80%
    assert set(f) >= {"kind", "ranks", "phase", "first_step", "last_step", "severity", "slowdown", "evidence"}
    assert (f["kind"], f["ranks"], f["phase"]) == ("straggler", [3], "backward")
    assert doc["summary"]["ranks"] == 8 and 0 < doc["summary"]["slowdown"] < 1
    assert cli(["analyze", str(path), "--fail-on", "warning"]) == 3


def test_analyze_readable_report_on_parquet(tmp_path, capsys):
    path = tmp_path / "steps.parquet"
    simulate(Scenario(ranks=4, steps=100)).to_parquet(path)
    assert cli(["analyze", str(path)]) == 0
    out = capsys.readouterr().out
    assert "4 ranks, 100 steps" in out and "Findings: none" in out
    assert "forward" in out and "backward" in out and "compute" in out


@pytest.mark.parametrize(
    "arg, message",
    [
        (
            "missing.csv",
            "does not exist; accepted: a run directory, a steps table or per-operation trace (.csv, .parquet)",
        ),
        ("notes.txt", "unknown file type"),
    ],
)
def test_analyze_bad_path(tmp_path, capsys, arg, message):
    (tmp_path / "notes.txt").write_text("hello")
    assert cli(["analyze", str(tmp_path / arg)]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "spec, message",
    [
        (
            "stragler:rank=1",
            "unknown kind 'stragler'; accepted kinds: straggler, data_stall, regression, slow_comm, hang",
        ),
        (
            "straggler:rank=1,phase=forward,factor=1.5,speed=2",
            "unknown key 'speed' for straggler; accepted: rank, phase, factor",
        ),
        ("straggler:rank=1,factor=1.5", "straggler needs phase"),
        ("straggler:rank=1,phase=loss,factor=1.5", "phase='loss'; accepted: forward, backward, optimizer"),
        ("straggler:rank=x,phase=forward,factor=1.5", "rank='x' is not an integer"),
        ("slow_comm:factor=0.5", "factor=0.5; accepted: a number above 1"),
        ("data_stall:rank=0,delay_ms=-3", "delay_ms=-3.0; accepted: above 0"),
    ],
)
def test_bad_inject_specs(spec, message):
    with pytest.raises(InjectError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_inject(spec)


def test_inject_checked_against_the_job():
    with pytest.raises(InjectError, match=r"rank=7 but the job has --ranks 4 \(accepted: 0..3\)"):
        check_against_job([parse_inject("hang:rank=7,step=3")], ranks=4, steps=100)
    with pytest.raises(InjectError, match=r"start=500 but the job runs --steps 100"):
        check_against_job([parse_inject("regression:factor=2,start=500")], ranks=4, steps=100)


def test_demo_cli_rejects_bad_inject_before_starting(capsys, tmp_path):
    assert cli(["demo", "--run-dir", str(tmp_path / "r"), "--inject", "meltdown:rank=1"]) == 2
    assert "unknown kind 'meltdown'" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_demo_refuses_to_clobber_an_existing_run_dir(capsys, tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "precious.txt").write_text("x")
    assert cli(["demo", "--run-dir", str(tmp_path / "r")]) == 2
    assert "exists and is not empty; pass --overwrite" in capsys.readouterr().err


def test_demo_regression_is_real_compute_and_a_straggler_a_held_phase():
    # a regression must cost CPU (on fewer cores than ranks a sleep would only hand the CPU to the
    # other ranks and the job would not slow down); a straggler holds its rank inside the phase
    import time

    from telemetry.demo.faults import FaultPlan
    from telemetry.demo.worker import _compute_more

    plan = FaultPlan(
        [
            parse_inject("regression:factor=2,start=10,phase=backward"),
            parse_inject("straggler:rank=1,phase=forward,factor=1.5"),
        ],
        rank=1,
    )
    assert plan.work_factor(9, "backward") == 1.0 and plan.work_factor(10, "backward") == 2.0
    assert plan.phase_factor(10, "backward") == 1.0 and plan.work_factor(10, "forward") == 1.0
    assert plan.phase_factor(0, "forward") == 1.5
    c0 = time.thread_time()
    while time.thread_time() - c0 < 0.05:
        pass
    done = time.thread_time() - c0
    _compute_more(c0, 2.0)
    assert time.thread_time() - c0 >= 2 * done

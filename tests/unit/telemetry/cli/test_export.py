"""`telemetry export` (telemetry/cli.py): steps tables analyze reads back, and messages that say what
was written or why nothing was."""

import time

import pytest

import telemetry
from telemetry.analysis.inputs.load import open_input
from telemetry.cli import main as cli
from tests.helpers.runs import record


def test_export_of_one_rank_says_rank_not_ranks(run_dir, tmp_path, capsys):
    record(run_dir, 1)
    assert cli(["export", run_dir, "--to", str(tmp_path / "s.csv")]) == 0
    assert "wrote 1 row (1 rank) to" in capsys.readouterr().out


def test_export_steps_past_the_end_is_an_error_not_an_empty_trace(run_dir, tmp_path, capsys):
    record(run_dir, 3)
    out = tmp_path / "t.json"
    assert cli(["export", run_dir, "--to", str(out), "--steps", "100:200"]) == 2
    assert "the run has steps 0-2; nothing to export" in capsys.readouterr().err and not out.exists()
    assert cli(["export", run_dir, "--to", str(out), "--steps", "1:"]) == 0


def test_export_to_an_unknown_type_names_every_accepted_one(run_dir, tmp_path, capsys):
    record(run_dir, 1)
    assert cli(["export", run_dir, "--to", str(tmp_path / "x.xlsx")]) == 2
    assert "accepted: .csv or .parquet (steps table), .json (trace)" in capsys.readouterr().err


def train(n, fail_at=None):
    for i in range(n):
        try:
            with telemetry.step(tokens=64, samples=2):
                with telemetry.phase("forward"):
                    time.sleep(0.002)
                    if i == fail_at:
                        raise ValueError("bad batch")
                telemetry.log(loss=1.0 / (i + 1))
        except ValueError:
            pass


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_export_writes_a_steps_table_that_analyze_reads(run_dir, tmp_path, suffix, capsys):
    telemetry.init(run_dir=run_dir, job="exp", sinks=["store"])
    train(4)
    telemetry.shutdown()
    out = str(tmp_path / f"steps.{suffix}")
    assert cli(["export", run_dir, "--to", out]) == 0
    assert "wrote 4 rows (1 rank) to" in capsys.readouterr().out
    t = open_input(out).table
    assert {"rank", "step", "start_s", "duration_s", "forward_s", "comm_s", "tokens"} <= set(t.columns)
    assert len(t) == 4

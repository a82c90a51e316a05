"""What a new user meets first on the command line: --version, help, exit codes, messages."""

import pytest

import telemetry
from telemetry.cli import main as cli
from telemetry.config import Config, ConfigError


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        cli(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"telemetry {telemetry.__version__}"


def test_help_says_what_analyze_finds_and_what_exit_codes_mean(capsys):
    with pytest.raises(SystemExit):
        cli(["analyze", "--help"])
    out = capsys.readouterr().out
    for word in ("stragglers", "data stalls", "regressions", "hangs", "exit codes", "4    demo: the job hung"):
        assert word in out, word


def record(run_dir, steps):
    telemetry.init(run_dir=run_dir, job="cli", sinks=["store"])
    for _ in range(steps):
        with telemetry.step():
            pass
    telemetry.shutdown()


def test_an_interrupted_demo_says_what_was_kept(run_dir, monkeypatch, capsys):
    record(run_dir, 3)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("telemetry.demo.launcher.run_demo", interrupted)
    assert cli(["demo", "--run-dir", run_dir]) == 130
    err = capsys.readouterr().err
    assert "interrupted; the ranks were stopped" in err
    assert f"Kept: {run_dir} with 3 step records from 1 rank;" in err and "telemetry analyze" in err


@pytest.mark.parametrize("outcome, code", [("completed", 0), ("failed", 1), ("hang", 4)])
def test_demo_exit_code_follows_the_job(run_dir, monkeypatch, capsys, outcome, code):
    from telemetry.demo.launcher import DemoResult

    record(run_dir, 3)
    monkeypatch.setattr(
        "telemetry.demo.launcher.run_demo", lambda *a, **k: DemoResult(run_dir, outcome, exit_codes={0: 0}, wall_s=1.0)
    )
    assert cli(["demo", "--run-dir", run_dir]) == code
    assert (f"exit {code}" in capsys.readouterr().err) == (code != 0)


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


def test_a_setting_of_the_wrong_type_is_not_called_out_of_range():
    with pytest.raises(ConfigError, match=r"prometheus_port='abc' is not an integer; accepted: an integer"):
        Config.resolve({"prometheus_port": "abc"}, environ={})
    with pytest.raises(ConfigError, match=r"flush_interval_s='x' is not a number"):
        Config.resolve({"flush_interval_s": "x"}, environ={})


def test_demo_progress_says_what_happens_and_never_prints_nan(tmp_path):
    from telemetry.demo.launcher import _Watch

    w = _Watch(str(tmp_path), 4)
    assert w.status(200, 3.0).strip().startswith("starting 4 ranks: importing torch") and "nan" not in w.status(
        200, 3.0
    )
    w.done = {0: 12, 1: 14, 2: 13, 3: 12}
    w.durations = [0.04, 0.05]
    assert "step   12/200  (ranks at 12-14)  median step   45.0 ms" in w.status(200, 9.0)
    w.done = {r: 200 for r in range(4)}
    assert "all 200 steps done; the ranks are flushing telemetry and exiting" in w.status(200, 17.0)


@pytest.mark.slow
def test_a_report_that_cannot_be_written_is_one_line_and_exit_5_never_a_traceback(tmp_path):
    """stdout on a full disk (/dev/full): the report is lost, the user is told once, the exit code says it."""
    import os
    import subprocess
    import sys

    run_dir = str(tmp_path / "run")
    record(run_dir, 30)
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "telemetry", "analyze", run_dir],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        )
    assert proc.returncode == 5, proc.stderr
    assert "telemetry: cannot write the output: No space left on device" in proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr

"""`telemetry demo` (telemetry/cli.py): its exit code follows the job; an interrupt says what was
kept; a bad --inject or an existing run directory is refused before anything starts."""

import pytest

from telemetry.cli import main as cli
from tests.helpers.runs import record


def test_an_interrupted_demo_says_what_was_kept(run_dir, monkeypatch, capsys):
    record(run_dir, 3)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("telemetry.demo.launcher.run_demo", interrupted)
    assert cli(["demo", "--run-dir", run_dir]) == 130
    err = capsys.readouterr().err
    assert "interrupted; the ranks were stopped" in err
    assert f"Kept: {run_dir}, 1 rank up to step 2;" in err and "telemetry analyze" in err


@pytest.mark.parametrize("outcome, code", [("completed", 0), ("failed", 1), ("hang", 4)])
def test_demo_exit_code_follows_the_job(run_dir, monkeypatch, capsys, outcome, code):
    from telemetry.demo.launcher import DemoResult

    record(run_dir, 3)
    monkeypatch.setattr(
        "telemetry.demo.launcher.run_demo", lambda *a, **k: DemoResult(run_dir, outcome, exit_codes={0: 0}, wall_s=1.0)
    )
    assert cli(["demo", "--run-dir", run_dir]) == code
    assert (f"exit {code}" in capsys.readouterr().err) == (code != 0)


def test_demo_cli_rejects_bad_inject_before_starting(capsys, tmp_path):
    assert cli(["demo", "--run-dir", str(tmp_path / "r"), "--inject", "meltdown:rank=1"]) == 2
    assert "unknown kind 'meltdown'" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_demo_refuses_to_clobber_an_existing_run_dir(capsys, tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "precious.txt").write_text("x")
    assert cli(["demo", "--run-dir", str(tmp_path / "r")]) == 2
    assert "exists and is not empty; pass --overwrite" in capsys.readouterr().err


def test_demo_takes_a_job_name_and_refuses_a_bad_one_before_starting(run_dir, monkeypatch, capsys):
    from telemetry.demo.launcher import DemoResult

    seen = {}

    def run(*a, **k):
        seen.update(k["extra_args"])
        return DemoResult(run_dir, "completed", exit_codes={0: 0}, wall_s=1.0)

    record(run_dir, 3)
    monkeypatch.setattr("telemetry.demo.launcher.run_demo", run)
    cli(["demo", "--run-dir", run_dir, "--job", "nightly"])
    assert seen == {"job": "nightly"}
    with pytest.raises(SystemExit) as e:
        cli(["demo", "--run-dir", run_dir, "--job", "two words"])
    assert e.value.code == 2 and "--job: 'two words' is invalid; accepted: 1-128 characters" in capsys.readouterr().err

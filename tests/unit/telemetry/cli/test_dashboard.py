"""`telemetry dashboard` (telemetry/cli.py): arguments checked before anything starts, and without
Streamlit it says how to install it. The app itself: tests/unit/telemetry/dashboards/."""

import os

import pytest


def test_without_streamlit_the_command_says_how_to_install(monkeypatch, capsys, straggler_table):
    import importlib.util

    from telemetry.cli import main as cli

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "streamlit" else real(name, *a))
    assert cli(["dashboard", straggler_table]) == 2
    assert "pip install 'training-telemetry[dashboard]'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, says",
    [
        (["--job", "exp1"], "--job goes with --prometheus"),
        (["--prometheus", "127.0.0.1:9090"], "accepted: an http:// or https:// URL"),
        (["RUN", "--prometheus", "http://127.0.0.1:9090"], "give it no run directory"),
        (["RUN", "--base", "/nonexistent/base"], "'/nonexistent/base' does not exist"),
        (["RUN", "--history", "/nonexistent/runs"], "--history '/nonexistent/runs' is not a directory"),
        (["--prometheus", "http://127.0.0.1:9090", "--history", "/tmp"], "no --history"),
    ],
)
def test_dashboard_arguments_are_checked_before_anything_starts(capsys, straggler_table, args, says):
    from telemetry.cli import main as cli

    assert cli(["dashboard", *[straggler_table if a == "RUN" else a for a in args]]) == 2
    assert says in capsys.readouterr().err


def test_history_without_runs_is_refused_and_with_runs_is_passed_to_the_app(
    monkeypatch, capsys, tmp_path, straggler_table
):
    import subprocess

    from telemetry.cli import main as cli
    from telemetry.demo.simrun import write_series
    from telemetry.demo.simulate import Scenario

    assert cli(["dashboard", straggler_table, "--history", str(tmp_path)]) == 2
    assert "--history: no run directory in" in capsys.readouterr().err

    runs = tmp_path / "runs"
    write_series(Scenario(ranks=2, steps=20), str(runs), 2)
    seen = {}

    def popen(cmd, env=None, **kw):
        seen.update(env)
        raise RuntimeError("not started in this test")

    monkeypatch.setattr(subprocess, "Popen", popen)
    with pytest.raises(RuntimeError, match="not started"):
        cli(["dashboard", straggler_table, "--history", str(runs), str(runs / "run-01")])
    assert seen["TELEMETRY_DASHBOARD_HISTORY"].split(os.pathsep) == [str(runs), str(runs / "run-01")]

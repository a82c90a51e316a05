"""A rank's warnings also go to RUN_DIR/logs/rank-N.log, said once on the console as before."""

import logging
import os

import telemetry
from telemetry import runlog


def test_a_warning_is_kept_in_the_rank_s_log_and_said_on_the_console(run_dir, monkeypatch, capsys):
    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # an application that configured no logging
    telemetry.init(run_dir=run_dir, job="warned", sinks=["store"], online=False, announce=False)
    logging.getLogger("telemetry").warning("telemetry: something to act on")
    telemetry.shutdown()
    with open(runlog.path_for(run_dir, 0)) as f:
        kept = f.read()
    assert kept.count("telemetry: something to act on") == 1 and " WARNING " in kept
    assert capsys.readouterr().err.count("telemetry: something to act on") == 1  # Python's last resort, once
    assert not logging.getLogger("telemetry").handlers  # gone with the session


def test_a_healthy_session_leaves_no_log_and_says_its_start_line(run_dir, monkeypatch, capsys):
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    telemetry.init(run_dir=run_dir, job="quiet", sinks=["store"], online=False)
    with telemetry.step():
        pass
    telemetry.shutdown()
    assert not os.path.exists(os.path.join(run_dir, runlog.LOGS_DIR))
    err = capsys.readouterr().err
    assert err.startswith("telemetry: rank 0 of 1") and err.count("\n") == 1, err


def test_a_log_that_is_already_stderr_is_not_written_twice(tmp_path, monkeypatch):
    path = str(tmp_path / "logs" / "rank-3.log")
    os.makedirs(os.path.dirname(path))
    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # so the console line goes to stderr: the file
    with open(path, "a") as err:
        monkeypatch.setattr("sys.stderr", err)  # the demo sends its ranks' output to their log file
        handler = runlog.attach(str(tmp_path), 3)
        try:
            logging.getLogger("telemetry").warning("telemetry: once")
        finally:
            runlog.detach(handler)
    with open(path) as f:
        assert f.read().count("telemetry: once") == 1  # said on stderr, which is the file: not written again

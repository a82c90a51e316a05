"""The run store: what a run directory holds, while running, after a crash, and when exported."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import telemetry
from telemetry.cli import main as cli
from telemetry.store import read_run
from telemetry.analysis.load import open_input

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def test_round_trip_through_the_store(run_dir):
    telemetry.init(run_dir=run_dir, job="rt", sinks=["store"])
    train(6, fail_at=3)
    stats = telemetry.shutdown()
    assert stats["records"] == 6 and stats["events_dropped"] == 0

    run = open_input(run_dir)
    assert run.warnings == []
    assert run.meta["job"] == "rt" and run.meta["world_size"] == 1
    assert run.meta["hosts"] == {"0": os.uname().nodename}
    assert run.meta["config"]["sinks"] == ["store"] and "python" in run.meta["versions"]
    assert run.meta["start_time_s"] <= run.meta["end_time_s"]
    t = run.table
    assert list(t["step"]) == list(range(6))
    assert list(t["ok"]) == [True, True, True, False, True, True]
    assert (t["forward_s"] >= 0.002).all() and (t["duration_s"] >= t["forward_s"]).all()
    assert t["tokens"].tolist() == [64] * 6
    assert t.loc[t.step == 1, "log.loss"].item() == pytest.approx(0.5)
    assert pytest.approx(t["start_s"].iloc[0], abs=60) == time.time()
    assert run.progress[0]["finished"] is True and run.progress[0]["last_step"] == 5


def test_readable_while_the_job_runs(run_dir):
    # A flush interval the pipeline thread never reaches here: the test ticks it by hand.
    session = telemetry.init(run_dir=run_dir, job="live", sinks=["store"], flush_interval_s=60.0)
    train(4)
    session.pipeline.tick()
    session.pipeline.tick()  # a finished step is held for one tick; no shutdown
    t = open_input(run_dir).table
    assert len(t) == 4
    progress = read_run(run_dir).progress[0]
    assert progress["finished"] is False and progress["last_step"] == 3


def test_torn_last_record_is_skipped_with_a_warning(run_dir, caplog):
    telemetry.init(run_dir=run_dir, job="torn", sinks=["store"])
    train(5)
    telemetry.shutdown()
    path = os.path.join(run_dir, "ranks", "rank-00000.steps.jsonl")
    with open(path, "a") as f:
        f.write('{"rank": 0, "step": 5, "start_s": 1.0, "dur')  # the process died mid-write
    run = open_input(run_dir)
    assert len(run.table) == 5
    assert any("torn last record" in w for w in run.warnings)
    assert "torn last record" in caplog.text


def test_corrupt_line_in_the_middle_is_skipped_and_reported(run_dir):
    telemetry.init(run_dir=run_dir, job="bad", sinks=["store"])
    train(3)
    telemetry.shutdown()
    path = os.path.join(run_dir, "ranks", "rank-00000.steps.jsonl")
    lines = open(path).read().splitlines(keepends=True)
    lines.insert(2, "not json at all\n")
    open(path, "w").writelines(lines)
    run = open_input(run_dir)
    assert sorted(run.table["step"]) == [0, 1, 2]
    assert any("line 3 is not a valid step record" in w for w in run.warnings)


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


def test_unwritable_run_dir_disables_the_store_with_one_warning(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    telemetry.init(run_dir=str(blocker / "run"), job="ro", sinks=["store"])
    train(3)  # training goes on
    stats = telemetry.shutdown()
    assert stats["records"] == 3 and stats["sinks"] == {}
    assert caplog.text.count("sink 'store' disabled: OSError: cannot write run directory") == 1


def _script(run_dir, tail):
    return textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {ROOT!r})
        import telemetry
        telemetry.init(run_dir={run_dir!r}, job="exit", sinks=["store"])
        for i in range(7):
            with telemetry.step():
                with telemetry.phase("forward"):
                    pass
        """) + textwrap.dedent(tail)


@pytest.mark.slow
def test_records_are_flushed_at_interpreter_exit_without_shutdown(run_dir):
    subprocess.run([sys.executable, "-c", _script(run_dir, "print('bye')")], check=True, timeout=60)
    assert len(open_input(run_dir).table) == 7


@pytest.mark.slow
def test_records_survive_a_killed_process(run_dir):
    proc = subprocess.Popen([sys.executable, "-c", _script(run_dir, "print('ready', flush=True); time.sleep(60)")],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(1.2)  # the store flushes at least every second
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    assert len(open_input(run_dir).table) == 7


@pytest.mark.slow
def test_sigterm_flushes_before_dying(run_dir):
    proc = subprocess.Popen([sys.executable, "-c", _script(run_dir, "print('ready', flush=True); time.sleep(60)")],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == -signal.SIGTERM  # it still dies of the signal
    run = open_input(run_dir)
    assert len(run.table) == 7 and run.progress[0]["finished"] is True

"""The run store: what a run directory holds, while running, after a crash, and when exported."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import telemetry
from telemetry.analysis.load import open_input
from telemetry.cli import main as cli
from telemetry.store import read_run

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


def live_tail(run_dir, steps):
    """A rank that wrote ``steps`` records to its tail and has not shut down (nor sealed)."""
    session = telemetry.init(run_dir=run_dir, job="tail", sinks=["store"], flush_interval_s=60.0)
    train(steps)
    session.pipeline.tick()
    session.pipeline.tick()
    [tail] = [n for n in os.listdir(os.path.join(run_dir, "ranks")) if ".tail-" in n]
    return session, os.path.join(run_dir, "ranks", tail)


def test_torn_last_record_is_skipped_with_a_warning(run_dir, caplog):
    session, path = live_tail(run_dir, 5)
    with open(path, "a") as f:
        f.write('[0,0,5,true,0,"AAAAAAAA')  # the process died mid-write
    run = open_input(run_dir)
    assert len(run.table) == 5
    assert any("torn last record" in w for w in run.warnings)
    assert "torn last record" in caplog.text
    telemetry.shutdown()


def test_corrupt_line_in_the_middle_is_skipped_and_reported(run_dir):
    session, path = live_tail(run_dir, 3)
    lines = open(path).read().splitlines(keepends=True)
    lines.insert(2, "not json at all\n")
    open(path, "w").writelines(lines)
    run = open_input(run_dir)
    assert sorted(run.table["step"]) == [0, 1, 2]
    assert any("1 invalid line(s) skipped" in w for w in run.warnings)
    telemetry.shutdown()


def test_records_are_sealed_into_columns_and_read_back_the_same(run_dir, monkeypatch):
    """Step columns and spans in separate Parquet segments; a reader of the steps table never
    touches the spans; records with spans come back as they went in."""
    from telemetry.store import writer

    monkeypatch.setattr(writer, "SEAL_RECORDS", 4)
    telemetry.init(run_dir=run_dir, job="seal", sinks=["store"], flush_interval_s=0.05)
    train(10, fail_at=6)
    time.sleep(0.3)  # a few ticks: two segments sealed while running
    names = sorted(os.listdir(os.path.join(run_dir, "ranks")))
    assert "rank-00000.seg-000001.parquet" in names and "rank-00000.spans-000001.parquet" in names
    telemetry.shutdown()
    names = sorted(os.listdir(os.path.join(run_dir, "ranks")))
    assert not [n for n in names if ".tail-" in n]  # the last records sealed at shutdown, no tail left
    run = open_input(run_dir)
    t = run.table
    assert list(t["step"]) == list(range(10)) and t["ok"].tolist() == [i != 6 for i in range(10)]
    assert t["tokens"].tolist() == [64] * 10 and t.loc[t.step == 3, "log.loss"].item() == pytest.approx(0.25)
    recs = list(run.records)  # every record with its spans, read when asked
    assert [r["step"] for r in recs] == list(range(10))
    [span] = [s for s in recs[2]["spans"] if s[1] == "forward"]
    assert span[0] == "phase" and span[3] - span[2] == pytest.approx(recs[2]["phases"]["forward"], abs=1e-5)
    assert span[2] >= recs[2]["start_s"] - 1e-3


def test_a_format_1_run_directory_is_still_read(run_dir):
    """Run directories written before the columnar store (one JSON object per step)."""
    import json

    os.makedirs(os.path.join(run_dir, "ranks"))
    with open(os.path.join(run_dir, "meta.json"), "w") as f:
        json.dump({"job": "old", "world_size": 1, "format": 1}, f)
    with open(os.path.join(run_dir, "ranks", "rank-00000.steps.jsonl"), "w") as f:
        f.write(json.dumps({"session": "s1", "rank": 0, "start_time_s": 1.0}) + "\n")
        for s in range(5):
            f.write(
                json.dumps(
                    {
                        "rank": 0,
                        "step": s,
                        "start_s": 10.0 + s,
                        "duration_s": 0.5,
                        "ok": True,
                        "phases": {"forward": 0.2},
                        "phase_comm": {},
                        "comm_s": 0.0,
                        "ops": {},
                        "tokens": 8,
                        "samples": 1,
                        "scalars": {"loss": None},
                        "nonfinite": {"loss": "nan"},
                        "spans": [["phase", "forward", 10.0 + s, 10.2 + s, True, 0]],
                    }
                )
                + "\n"
            )
        f.write("not json\n")
    run = open_input(run_dir)
    assert list(run.table["step"]) == list(range(5)) and run.table["log.loss"].isna().all()
    assert len(run.records) == 5 and run.records[0]["spans"][0][1] == "forward"
    assert any("line 7 is not a valid step record" in w for w in run.warnings)


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
    proc = subprocess.Popen(
        [sys.executable, "-c", _script(run_dir, "print('ready', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(1.2)  # the store flushes at least every second
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    assert len(open_input(run_dir).table) == 7


@pytest.mark.slow
def test_a_rank_killed_mid_segment_then_restarted_loses_nothing_and_its_rerun_steps_win(run_dir):
    """SIGKILL with a sealed segment and a live tail: everything up to the last flush is read;
    the restarted rank seals the old tail first, and the steps it re-runs replace the first ones."""
    seal = "import telemetry.store.writer as w; w.SEAL_RECORDS = 5\n"
    more = f"""
        import glob
        while not glob.glob({run_dir!r} + "/ranks/*.seg-*") or glob.glob({run_dir!r} + "/ranks/*.tail-000001.*"):
            time.sleep(0.05)  # sealed: steps 0-11 in a segment, and their tail gone
        for i in range(2):  # these two stay in the tail
            with telemetry.step():
                pass
        def tail_lines():
            return sum(open(p).read().count("\\n") for p in glob.glob({run_dir!r} + "/ranks/*.tail-*"))
        while tail_lines() < 4:  # its header, the records' shape and the two records, flushed by the next tick
            time.sleep(0.05)
        print('ready', flush=True); time.sleep(60)
        """
    script = _script(run_dir, more).replace("range(7)", "range(12)")
    proc = subprocess.Popen([sys.executable, "-c", seal + script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    ranks = os.path.join(run_dir, "ranks")
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    names = os.listdir(ranks)
    assert [n for n in names if ".tail-" in n] and [n for n in names if ".seg-" in n]
    t = open_input(run_dir).table
    assert list(t["step"]) == list(range(14))
    rerun = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {ROOT!r})
        import telemetry
        telemetry.init(run_dir={run_dir!r}, job="exit", sinks=["store"], start_step=10)
        for i in range(4):
            with telemetry.step(tokens=99):
                pass
        telemetry.shutdown()
        """)
    subprocess.run([sys.executable, "-c", rerun], check=True, timeout=60)
    t = open_input(run_dir).table
    assert list(t["step"]) == list(range(14))
    assert t.set_index("step")["tokens"].loc[10:13].tolist() == [99] * 4  # the re-run steps won (10-13)
    assert not [n for n in os.listdir(os.path.join(run_dir, "ranks")) if ".tail-" in n]


@pytest.mark.slow
def test_sigterm_flushes_before_dying(run_dir):
    proc = subprocess.Popen(
        [sys.executable, "-c", _script(run_dir, "print('ready', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == -signal.SIGTERM  # it still dies of the signal
    run = open_input(run_dir)
    assert len(run.table) == 7 and run.progress[0]["finished"] is True


def test_a_seal_that_fails_keeps_the_records_in_the_tail_and_says_so_once(run_dir, monkeypatch, caplog):
    """Disk full at a seal: nothing is lost (the tail has every record), one warning, a count."""
    import errno

    from telemetry.store import writer

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer, "SEAL_RECORDS", 3)
    monkeypatch.setattr(writer, "write_segment", full)
    telemetry.init(run_dir=run_dir, job="full", sinks=["store"], flush_interval_s=0.05)
    for _ in range(3):
        train(4)
        time.sleep(0.15)  # a few ticks: a seal tried at each
    stats = telemetry.shutdown()
    store = stats["sinks"]["store"]
    assert store["seal_failures"] >= 2 and store["segments"] == 0
    assert caplog.text.count("a segment could not be written") == 1
    run = open_input(run_dir)
    assert list(run.table["step"]) == list(range(12))  # all of it, from the tail

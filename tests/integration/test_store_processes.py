"""The run store across processes: records flushed at interpreter exit, surviving a killed process,
SIGTERM, and a rank killed mid-segment then restarted."""

import os
import signal
import subprocess
import sys
import textwrap
import time

from telemetry.analysis.inputs.load import open_input
from tests.helpers.paths import ROOT


def _script(run_dir, tail):
    """A job of 7 steps then `tail`, as a script for `python -c` run in the repository root (cwd=ROOT:
    the telemetry it imports is this tree's)."""
    return textwrap.dedent(f"""
        import time
        import telemetry
        telemetry.init(run_dir={run_dir!r}, job="exit", sinks=["store"])
        for i in range(7):
            with telemetry.step():
                with telemetry.phase("forward"):
                    pass
        """) + textwrap.dedent(tail)


def test_records_are_flushed_at_interpreter_exit_without_shutdown(run_dir):
    subprocess.run([sys.executable, "-c", _script(run_dir, "print('bye')")], check=True, timeout=60, cwd=ROOT)
    assert len(open_input(run_dir).table) == 7


def test_records_survive_a_killed_process(run_dir):
    proc = subprocess.Popen(
        [sys.executable, "-c", _script(run_dir, "print('ready', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(open_input(run_dir).table) < 7:  # flushed: on disk now
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    assert len(open_input(run_dir).table) == 7


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
    proc = subprocess.Popen([sys.executable, "-c", seal + script], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout.readline().strip() == "ready"
    ranks = os.path.join(run_dir, "ranks")
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    names = os.listdir(ranks)
    assert [n for n in names if ".tail-" in n] and [n for n in names if ".seg-" in n]
    t = open_input(run_dir).table
    assert list(t["step"]) == list(range(14))
    rerun = textwrap.dedent(f"""
        import telemetry
        telemetry.init(run_dir={run_dir!r}, job="exit", sinks=["store"], start_step=10)
        for i in range(4):
            with telemetry.step(tokens=99):
                pass
        telemetry.shutdown()
        """)
    subprocess.run([sys.executable, "-c", rerun], check=True, timeout=60, cwd=ROOT)
    t = open_input(run_dir).table
    assert list(t["step"]) == list(range(14))
    assert t.set_index("step")["tokens"].loc[10:13].tolist() == [99] * 4  # the re-run steps won (10-13)
    assert not [n for n in os.listdir(os.path.join(run_dir, "ranks")) if ".tail-" in n]


def test_sigterm_flushes_before_dying(run_dir):
    proc = subprocess.Popen(
        [sys.executable, "-c", _script(run_dir, "print('ready', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == -signal.SIGTERM  # it still dies of the signal
    run = open_input(run_dir)
    assert len(run.table) == 7 and run.progress[0]["finished"] is True

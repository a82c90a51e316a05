"""Process faults: a rank SIGKILLed, SIGSTOPped or SIGTERMed mid-run, the demo launcher SIGTERMed,
shutdown() never called or called twice. Real processes (the gloo job, `telemetry demo`), real
signals; what the run store kept is read back the way a user reads it (`telemetry analyze`)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from telemetry.analysis.detectors.lost import LOST_AFTER_S
from telemetry.analysis.inputs.load import open_input
from tests.faults.gloo_job import ROOT, GlooJob
from tests.helpers.servers import free_port_range

pytestmark = pytest.mark.slow

TICK_S = 0.5  # the pipeline's flush interval (the default)
# What a SIGKILL may cost: a step waits one tick for late events and the next tick writes it (about two
# ticks, measured and put in the table); the bound asserted leaves room for a busy machine, where the
# store's thread is scheduled late.
LOSS_BOUND_S = 10 * TICK_S


def flushed(run_dir: str, ranks: tuple[int, ...], timeout: float = 60.0) -> None:
    """Wait until each rank's store holds steps and a heartbeat: what a kill is then measured against."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            run = open_input(run_dir)
            have = set(run.table["rank"].unique()) if len(run.table) else set()
            if set(ranks) <= have and set(ranks) <= set(run.progress):
                return
        except Exception:  # noqa: BLE001 - a run directory still being made: look again
            pass
        time.sleep(0.05)
    raise AssertionError(f"ranks {ranks} wrote nothing to {run_dir} within {timeout:.0f} s")


def analyze_json(run_dir: str, *args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "telemetry", "analyze", run_dir, "--json", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def stored(run_dir: str) -> dict[int, list[int]]:
    t = open_input(run_dir).table
    return {int(r): sorted(int(s) for s in g["step"]) for r, g in t.groupby("rank")}


def last_end_s(run_dir: str, rank: int) -> float:
    t = open_input(run_dir).table
    t = t[t["rank"] == rank]
    last = t.loc[t["step"].idxmax()]
    return float(last["start_s"] + last["duration_s"])


def bindable(port: int) -> bool:
    """Free for a server to listen on again (as servers do, with SO_REUSEADDR: the port's closed
    connections may linger in TIME_WAIT; a socket still bound or listening there refuses it)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def flushed_to_the_end(run_dir: str) -> dict[int, int]:
    """Each rank's store holds every step up to the last its final heartbeat names, and that
    heartbeat is the clean shutdown's (``finished``): rank -> its last step."""
    run = open_input(run_dir)
    steps = {int(r): sorted(int(s) for s in g["step"]) for r, g in run.table.groupby("rank")}
    out = {}
    for r, beat in sorted(run.progress.items()):
        assert beat["finished"] is True, (r, beat)
        assert steps[r] == list(range(beat["last_step"] + 1)), (r, beat["last_step"], steps[r][-5:])
        out[r] = beat["last_step"]
    return out


def test_a_sigkilled_rank_keeps_all_but_its_last_second_and_is_named_as_ended_uncleanly(tmp_path, fault_table):
    with GlooJob(tmp_path, steps=2000) as job:
        job.wait_step(1, 100)
        flushed(job.run_dir, (0, 1))
        t_kill = time.time()
        job.signal(1, signal.SIGKILL)
        result = job.wait(timeout=150)
    assert result.returncodes[1] == -signal.SIGKILL
    peer_error = re.search(
        r"RuntimeError: .*?((?:Read|Write) error|Connection \w+ by peer|[Tt]imed out)", result.stderr[0]
    )
    assert peer_error, result.stderr[0][-3000:]
    steps = stored(result.run_dir)
    run = open_input(result.run_dir)
    # rank 0 (its all-reduce failed when rank 1 vanished) still shut down at exit: all of it stored
    assert run.progress[0]["finished"] is True and steps[0] == list(range(run.progress[0]["last_step"] + 1))
    # rank 1: no shutdown, no last flush; everything up to its last flush is there, in order
    beat = run.progress[1]
    assert beat["finished"] is False and beat["time_s"] <= t_kill
    assert steps[1] == list(range(len(steps[1]))) and steps[1]
    behind_s = t_kill - last_end_s(result.run_dir, 1)
    assert 0 < behind_s < LOSS_BOUND_S  # a step waits one tick for late events, then the next tick writes it
    doc = analyze_json(result.run_dir)
    [lost] = [f for f in doc["findings"] if f["kind"] == "rank_lost"]
    assert lost["ranks"] == [1] and lost["severity"] == "critical"
    assert lost["evidence"].startswith("rank 1 ended without a clean shutdown (last heartbeat at ")
    assert f"last completed step {beat['last_step']})" in lost["evidence"]
    assert not [f for f in doc["findings"] if f["kind"] == "hang"]
    fault_table.add(
        "processes",
        f"rank 1 SIGKILLed at step {steps[0][-1]} (a plain gloo job: no launcher, no exit record)",
        f"rank 1 died (exit -9); rank 0's all-reduce failed at once (gloo: RuntimeError ... "
        f"{peer_error.group(1)}), it exited {result.returncodes[0]} and its exit-time shutdown flushed its store",
        f"rank 1's steps {steps[1][-1] + 1}-{steps[0][-1]}: its last {behind_s:.2f} s before the kill (bound: two "
        f"ticks, {2 * TICK_S:.1f} s: a step is held one tick for late events); rank 0: nothing. `telemetry "
        "analyze`: rank_lost, 'rank 1 ended without a clean shutdown (last heartbeat at ..., last completed step "
        f"{beat['last_step']})'",
    )


def test_the_whole_job_sigkilled_is_said_to_have_ended_uncleanly(tmp_path, fault_table):
    """Both ranks SIGKILLed at once (the scheduler's kill, a node gone): no rank_lost finding (nothing
    says which went first), but `telemetry analyze` says the job ended without a clean shutdown."""
    with GlooJob(tmp_path, steps=2000) as job:
        job.wait_step(1, 100)
        flushed(job.run_dir, (0, 1))
        t_kill, at = time.time(), job.at_step(1)
        job.kill()
        result = job.wait(timeout=30)
    assert result.returncodes == [-signal.SIGKILL] * 2
    steps = stored(result.run_dir)
    behind = {r: t_kill - last_end_s(result.run_dir, r) for r in range(2)}
    for r in range(2):
        assert steps[r] == list(range(len(steps[r]))) and steps[r] and behind[r] < LOSS_BOUND_S
    time.sleep(max(0.0, t_kill + LOST_AFTER_S + TICK_S - time.time()))  # no heartbeat for longer than the bound
    doc = analyze_json(result.run_dir)
    [note] = [w for w in doc["summary"].get("warnings", []) if "without a clean shutdown" in w]
    assert note.startswith("ranks 0-1 ended without a clean shutdown (none recorded; last heartbeats at "), note
    assert not [f for f in doc["findings"] if f["kind"] in ("rank_lost", "hang")]
    fault_table.add(
        "processes",
        "the whole job SIGKILLed (both ranks at once, no launcher)",
        "both ranks died (exit -9)",
        f"the steps after each rank's last flush, {min(behind.values()):.2f}-{max(behind.values()):.2f} s before the "
        f"kill (rank 0 from step {steps[0][-1] + 1}, rank 1 from {steps[1][-1] + 1}; they had passed step {at}); "
        f"`telemetry analyze` warns '{note[:48]}...'",
    )


def test_a_sigstopped_rank_is_named_while_it_is_stopped(tmp_path, fault_table):
    with GlooJob(tmp_path, steps=300) as job:
        job.wait_step(1, 50)
        at = job.at_step(1)
        job.signal(1, signal.SIGSTOP)
        t_stop = time.monotonic()
        time.sleep(LOST_AFTER_S + 2 * TICK_S)  # the bound: its peer reports this long after its last heartbeat
        asked_after = time.monotonic() - t_stop
        during = analyze_json(job.run_dir)
        stopped_s = time.monotonic() - t_stop
        job.signal(1, signal.SIGCONT)
        result = job.wait()
    assert result.ok, result.describe()
    named = [f for f in during["findings"] if f["kind"] in ("rank_lost", "hang")]
    assert [f["ranks"] for f in named] == [[1]], during["findings"]
    [f] = named
    assert "rank 1 stopped reporting without a clean shutdown" in f["evidence"]  # not "ended": its peer is waiting
    assert f["evidence"].endswith("rank 0 waits for it in all_reduce"), f["evidence"]
    after = analyze_json(result.run_dir)
    assert not [f for f in after["findings"] if f["kind"] in ("rank_lost", "hang")]  # it came back, and finished
    flushed_to_the_end(result.run_dir)
    fault_table.add(
        "processes",
        f"rank 1 SIGSTOPped at about step {at} for {stopped_s:.1f} s, then SIGCONT",
        f"finished after SIGCONT (both ranks exit 0); rank 0 waited in the all-reduce meanwhile. `telemetry "
        f"analyze` {asked_after:.1f} s into the stop named rank 1 ({f['kind']}: '{f['evidence'][:60]}...'; "
        f"bound: {LOST_AFTER_S:.0f} s without a heartbeat while a peer reports); after the job, no such finding",
        "nothing",
    )


def test_sigterm_to_a_rank_flushes_it_and_frees_its_port(tmp_path, fault_table):
    base = free_port_range(2)
    with GlooJob(tmp_path, steps=2000, init={"prometheus_port": base}) as job:
        job.wait_step(1, 100)
        job.signal(1, signal.SIGTERM)
        result = job.wait(timeout=150)
    assert result.returncodes[1] == -signal.SIGTERM  # it still dies of the signal, after the flush
    last = flushed_to_the_end(result.run_dir)  # both: rank 1 by its SIGTERM handler, rank 0 at exit
    assert bindable(base) and bindable(base + 1)
    fault_table.add(
        "processes",
        f"SIGTERM to rank 1 at step {last[1]} (a plain gloo job)",
        f"rank 1 flushed and died of SIGTERM (exit -15); rank 0's all-reduce failed, it exited "
        f"{result.returncodes[0]} after its exit-time shutdown; Prometheus ports {base}-{base + 1} "
        "free again",
        f"nothing: each rank's store holds every step its final heartbeat names (rank 0: 0-{last[0]}, "
        f"rank 1: 0-{last[1]}), both heartbeats 'finished'",
    )


def test_sigterm_to_the_demo_launcher_ends_every_rank_flushed_and_frees_the_ports(tmp_path, fault_table):
    """`telemetry demo` SIGTERMed mid-run (a CI timeout, a supervisor). Also the security row: every
    socket the job listens on is on 127.0.0.1, the process group's TCPStore included."""
    run_dir = str(tmp_path / "run")
    base = free_port_range(2)
    env = {**os.environ, "TELEMETRY_PROMETHEUS_PORT": str(base)}
    out_path = tmp_path / "demo.out"
    with open(out_path, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "telemetry", "demo", "--run-dir", run_dir, "--ranks", "2", "--steps", "100000"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    ranks: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while "median step" not in out_path.read_text():  # the ranks are training
            assert proc.poll() is None and time.monotonic() < deadline, out_path.read_text()
            time.sleep(0.1)
        ranks = psutil.Process(proc.pid).children(recursive=True)
        listening = [
            (p.pid, c.laddr)
            for p in [psutil.Process(proc.pid), *ranks]
            for c in p.net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN
        ]
        t_term = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 130
        ended_s = time.monotonic() - t_term
        gone, alive = psutil.wait_procs(ranks, timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in ranks:
            if p.is_running():
                p.kill()
    assert not alive, [p.pid for p in alive]
    ports = sorted({addr.port for _, addr in listening})
    assert {base, base + 1} <= set(ports) and len(ports) >= 3  # Prometheus, the TCPStore, gloo's pairs
    assert {addr.ip for _, addr in listening} == {"127.0.0.1"}, listening
    taken = [p for p in ports if not bindable(p)]
    assert not taken, (taken, subprocess.run(["ss", "-tanp"], capture_output=True, text=True).stdout)
    last = flushed_to_the_end(run_dir)
    assert "interrupted; the ranks were stopped" in out_path.read_text()
    fault_table.add(
        "processes",
        "SIGTERM to the `telemetry demo` launcher mid-run (2 ranks)",
        f"the launcher stopped both ranks and exited 130 in {ended_s:.1f} s; no rank process left; "
        f"its {len(ports)} listening ports free again",
        f"nothing: each rank flushed on its own SIGTERM (store up to steps {last[0]} and {last[1]}, "
        "both heartbeats 'finished')",
    )
    fault_table.add(
        "security",
        "the demo job's listening sockets (Prometheus, torch.distributed's TCPStore, gloo)",
        f"all {len(ports)} on 127.0.0.1 (the launcher binds the TCPStore's socket to 127.0.0.1 and "
        "rank 0 serves on it: a TCPStore binding its own listens on every interface)",
        "nothing",
    )


def test_shutdown_never_called_is_flushed_at_exit(tmp_path, healthy_job, fault_table):
    with GlooJob(tmp_path, skip_shutdown=True) as job:
        result = job.wait()
    assert result.ok, result.describe()
    last = flushed_to_the_end(result.run_dir)
    assert last == {0: 199, 1: 199}
    assert "end_time_s" in open_input(result.run_dir).meta  # rank 0 closed the run as at a shutdown()
    fault_table.add(
        "processes",
        "telemetry.shutdown() never called (the ranks just exit)",
        f"finished; step time {result.ratio(healthy_job):.2f}x healthy; the exit-time shutdown flushed",
        "nothing: 200 of 200 steps per rank, both heartbeats 'finished'",
    )


def test_shutdown_twice_returns_the_counters_once_and_loses_nothing(tmp_path, fault_table):
    run_dir = str(tmp_path / "run")
    script = textwrap.dedent(f"""
        import json, telemetry
        telemetry.init(run_dir={run_dir!r}, job="twice", sinks=["store"])
        for i in range(50):
            with telemetry.step():
                with telemetry.phase("forward"):
                    pass
        first = telemetry.shutdown()
        second = telemetry.shutdown()
        print(json.dumps({{"records": first["records"], "closed": first["closed"], "second": second}}))
        """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert doc == {"records": 50, "closed": True, "second": None}
    assert flushed_to_the_end(run_dir) == {0: 49}
    fault_table.add(
        "processes",
        "telemetry.shutdown() called twice",
        "the second call returns None and does nothing; no warning, no error",
        "nothing: 50 of 50 steps, heartbeat 'finished'",
    )

"""Every process the package starts dies with the command that started it, however that command ends:
SIGKILL (the kernel's parent-death signal), SIGTERM to the whole process group followed by a second
one (what ``timeout`` and a shell send), repeated SIGTERM, SIGINT, SIGHUP. Nothing is alive 10 s
after the command's end."""

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from telemetry import children
from tests.helpers.servers import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GONE_WITHIN_S = 10.0


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.05)


def as_a_terminal_job() -> None:
    """The signals a command typed at a terminal starts with: each at its default. A child inherits
    an ignored signal, and this test process may ignore SIGINT after other tests ran in it
    (Lightning's fit, for one, sets it to SIG_IGN when it handles a KeyboardInterrupt and leaves it
    so): two stress runs' SIGINT case timed out on one xdist worker, and does so whenever this
    process ignores SIGINT."""
    for s in children.HELD:
        signal.signal(s, signal.SIG_DFL)


def start(args: list[str]) -> subprocess.Popen:
    # its own process group, as a shell job is: a signal to the group reaches the command alone
    return subprocess.Popen(
        [sys.executable, "-m", "telemetry", *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=as_a_terminal_job,
    )


def send(proc: subprocess.Popen, how: str) -> None:
    if how == "SIGKILL":
        proc.send_signal(signal.SIGKILL)
    elif how == "SIGTERM to the group, twice":
        os.killpg(proc.pid, signal.SIGTERM)
        time.sleep(0.05)  # the second lands while the first one's clean-up runs
        os.killpg(proc.pid, signal.SIGTERM)
    elif how == "SIGTERM x5":
        for _ in range(5):
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.02)
    else:
        proc.send_signal(getattr(signal, how))


def children_gone(proc: subprocess.Popen, kids: list[int], how: str) -> None:
    t0 = time.monotonic()
    send(proc, how)
    try:
        proc.wait(GONE_WITHIN_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"the command itself was still running {GONE_WITHIN_S:.0f} s after {how}")
    deadline = t0 + GONE_WITHIN_S
    while any(alive(k) for k in kids) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [k for k in kids if alive(k)]
    for k in left:
        os.kill(k, signal.SIGKILL)
    assert left == [], f"{len(left)} of {len(kids)} child process(es) alive {GONE_WITHIN_S:.0f} s after {how}"


SIGNALS = ["SIGKILL", "SIGTERM to the group, twice", "SIGTERM x5", "SIGINT", "SIGHUP"]


@pytest.mark.parametrize("how", SIGNALS)
def test_no_rank_of_the_demo_outlives_its_launcher(tmp_path, how):
    run_dir = tmp_path / "run"
    proc = start(["demo", "--ranks", "2", "--steps", "100000", "--run-dir", str(run_dir)])
    try:
        launcher = psutil.Process(proc.pid)
        wait_for(lambda: len(launcher.children()) == 2, 60, "the 2 ranks to start")
        ranks = [c.pid for c in launcher.children()]
        # both ranks train (each wrote a heartbeat): well past the parent-death set-up and telemetry's init
        wait_for(lambda: len(list((run_dir / "ranks").glob("rank-*.progress.json"))) == 2, 120, "both ranks' heartbeat")
        children_gone(proc, ranks, how)
        if how != "SIGKILL":  # the launcher's clean-up ran to its end: each rank was stopped, and flushed
            beats = [json.loads(p.read_text()) for p in sorted((run_dir / "ranks").glob("rank-*.progress.json"))]
            assert len(beats) == 2 and all(b.get("finished") for b in beats), beats
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM to the group, twice", "SIGHUP"])
def test_the_dashboard_server_does_not_outlive_its_command(tmp_path, how):
    pytest.importorskip("streamlit")
    from telemetry.demo.simrun import write_simulated_run
    from telemetry.demo.simulate import Scenario

    run = str(tmp_path / "run")
    write_simulated_run(Scenario(ranks=2, steps=20), run)
    port = free_port()
    proc = start(["dashboard", run, "--port", str(port)])
    try:
        command = psutil.Process(proc.pid)
        wait_for(lambda: len(command.children()) == 1, 60, "the server to start")
        server = command.children()[0]
        wait_for(
            lambda: any(c.laddr and c.laddr.port == port for c in server.net_connections("tcp")),
            120,
            "the server to listen",
        )
        children_gone(proc, [server.pid], how)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_a_child_whose_parent_is_already_gone_exits_at_once():
    """The parent died between the fork and the child's parent-death set-up: nobody would stop the
    child, so it stops itself."""
    code = "from telemetry.children import die_with_parent; die_with_parent(); print('still here')"
    env = {**os.environ, "TELEMETRY_PARENT_PID": "1"}  # not this child's parent
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 128 + signal.SIGKILL and "still here" not in p.stdout
    env["TELEMETRY_PARENT_PID"] = str(os.getpid())  # its real parent: it carries on
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "still here" in p.stdout

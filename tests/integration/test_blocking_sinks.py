"""A sink blocked for real, forever, in a real training process: the other sinks advance (/metrics
counts every step, the run store keeps every step), training never waits, and shutdown returns within
its bound with what the blocked sink never got counted.

Two real blocking calls: the run store's tail replaced by a FIFO nobody reads (the store's open()
blocks in the kernel), and a third-party sink, installed through the entry point, that waits for the
answer of a loopback server that accepts and never answers."""

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request

import pytest

from tests.helpers.servers import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS = 200
SHUTDOWN_S = 2.0

PLUGIN = '''
import os, socket
from telemetry.pipeline.sinks import Sink

class BlockingSink(Sink):
    """Sends each batch to a server and waits for its answer, with no timeout."""
    name = "blocking"

    def __init__(self, config, ctx, run_info):
        host, port = os.environ["BLOCKING_SINK_ADDR"].rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))

    def write(self, records):
        self.sock.sendall(b"%d records\\n" % len(records))
        self.sock.recv(1)  # the server never answers
'''


@pytest.fixture
def silent_server():
    """A loopback server that accepts connections and never reads or answers."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held = []
    stop = threading.Event()

    def accept():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield "127.0.0.1:%d" % srv.getsockname()[1]
    stop.set()
    t.join(5)
    for c in held:
        c.close()
    srv.close()


def install_plugin(where) -> str:
    """A distribution with one sink entry point, as pip would leave it, under ``where``."""
    os.makedirs(where / "blocking_sink-1.0.dist-info")
    (where / "blocking_sink.py").write_text(textwrap.dedent(PLUGIN))
    (where / "blocking_sink-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: blocking-sink\nVersion: 1.0\n"
    )
    (where / "blocking_sink-1.0.dist-info" / "entry_points.txt").write_text(
        "[training_telemetry.sinks]\nblocking = blocking_sink:BlockingSink\n"
    )
    return str(where)


def steps_on_metrics(port: int) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("train_steps_total{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def run_blocked(tmp_path, block: str, env_extra: dict) -> tuple[dict, float | None, str]:
    port = free_port()
    run_dir = str(tmp_path / "run")
    env = {**os.environ, **env_extra}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.sink_job", "--run-dir", run_dir, "--port", str(port)]
        + ["--steps", str(STEPS), "--block", block, "--shutdown-timeout", str(SHUTDOWN_S)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "done", proc.stderr.read()[-3000:]
        deadline = time.monotonic() + 30
        seen = steps_on_metrics(port)
        while seen != STEPS and time.monotonic() < deadline:  # the pipeline delivers within a tick or two
            time.sleep(0.05)
            seen = steps_on_metrics(port)
        proc.stdin.write("\n")
        proc.stdin.flush()
        result = json.loads(proc.stdout.readline())
        proc.wait(30)
        return result, seen, run_dir
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()
        proc.stdin.close()


def test_a_store_blocked_in_the_kernel_stops_neither_metrics_nor_training_nor_shutdown(tmp_path):
    result, seen, _ = run_blocked(tmp_path, "store", {})
    assert seen == STEPS  # /metrics counted every step while the store was blocked
    assert result["shutdown_s"] < SHUTDOWN_S + 1.0
    sinks = result["stats"]["sinks"]
    assert sinks["prometheus"]["written"] == STEPS and sinks["prometheus"]["dropped"] == 0
    store = sinks["store"]
    assert store["dropped"] > 0 and "never reached the sink" in store["dropped_detail"]


def test_a_plugin_sink_that_never_returns_leaves_the_store_and_metrics_whole(tmp_path, silent_server):
    plugins = install_plugin(tmp_path / "site")
    env = {"PYTHONPATH": os.pathsep.join([plugins, ROOT]), "BLOCKING_SINK_ADDR": silent_server}
    result, seen, run_dir = run_blocked(tmp_path, "plugin", env)
    assert seen == STEPS
    assert result["shutdown_s"] < SHUTDOWN_S + 1.0
    sinks = result["stats"]["sinks"]
    assert sinks["store"]["written"] == STEPS and sinks["store"]["dropped"] == 0
    assert sinks["blocking"]["dropped"] > 0
    from telemetry.analysis.inputs.load import open_input

    table = open_input(run_dir).table
    assert sorted(table["step"]) == list(range(STEPS))  # the store kept every step

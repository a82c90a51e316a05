"""Real servers for tests (Debian's prometheus, pushgateway, alertmanager), bound to 127.0.0.1.

Each helper starts the binary in a temporary directory, waits until it answers, and stops it.
A test that needs a binary that is not installed skips, naming the package (`make test` installs
them first through scripts/system-deps.sh).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

# Ports for tests come from below the kernel's ephemeral range (32768-60999 here: outgoing connections
# take their local ports there), from a block of their own per pytest-xdist worker, handed out in turn:
# two workers never pick the same port, and a worker does not pick one it just gave out.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
_SLOT = int(_WORKER[2:]) + 1 if _WORKER[2:].isdigit() else 0
_SPAN = 3000
_BASE = 11000 + _SPAN * (_SLOT % 7)
_next = [_BASE + os.getpid() % _SPAN]


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port_range(n: int) -> int:
    """A base port such that base..base+n-1 are all free on 127.0.0.1 now, from this worker's block."""
    for _ in range(_SPAN):
        base = _next[0]
        _next[0] = _BASE + (base + n - _BASE) % _SPAN
        if base + n <= _BASE + _SPAN and all(_bindable(base + i) for i in range(n)):
            return base
    raise RuntimeError(f"no {n} free ports in {_BASE}-{_BASE + _SPAN - 1}")


def free_port() -> int:
    return free_port_range(1)


def require(binary: str, package: str) -> str:
    path = shutil.which(binary)
    if path is None:
        pytest.skip(f"{binary} not installed (Debian package {package}; `make test` installs it)")
    return path


def http_get(url: str, timeout: float = 5.0, headers: dict | None = None) -> bytes:
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read()


def wait_http(url: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            http_get(url, timeout=1.0)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@contextlib.contextmanager
def running(cmd: list[str], ready_url: str, log_path):
    """The server, in a process group of its own, once it answers ``ready_url``; the group is stopped
    at the end (SIGTERM, then SIGKILL)."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_http(ready_url)
            yield proc
        finally:
            stop_group(proc, timeout=10)


def stop_group(proc: subprocess.Popen, timeout: float = 20.0) -> None:
    """End a process started with ``start_new_session=True`` and everything it started: SIGTERM to
    its group, SIGKILL if it has not ended within ``timeout``."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def api(self, path: str, **params) -> dict:
        q = urllib.parse.urlencode(params)
        doc = json.loads(http_get(f"{self.url}/api/v1/{path}?{q}"))
        assert doc["status"] == "success", doc
        return doc["data"]

    def query(self, expr: str) -> list[dict]:
        return self.api("query", query=expr)["result"]

    def wait_for(self, expr: str, predicate, timeout: float = 60.0) -> list[dict]:
        """Poll until predicate(result) holds (the first sample shows ~5 s after start)."""
        deadline = time.monotonic() + timeout
        result: list = []
        while time.monotonic() < deadline:
            result = self.query(expr)
            if predicate(result):
                return result
            time.sleep(0.5)
        raise AssertionError(f"timed out waiting on {expr!r}; last result: {result}")


def training_scrape_config(targets_dir, rule_files: tuple[str, ...] = (), every: str = "1s") -> str:
    """A Prometheus config that scrapes every run's ranks as the README configures it (file_sd over
    the shared targets directory, honor_labels), every ``every`` (a second), evaluating rules as often."""
    rules = f"rule_files: [{', '.join(f'{chr(34)}{r}{chr(34)}' for r in rule_files)}]\n" if rule_files else ""
    return f"""
global: {{scrape_interval: {every}, evaluation_interval: {every}}}
{rules}scrape_configs:
  - job_name: training
    honor_labels: true
    file_sd_configs: [{{files: ["{targets_dir}/*.json"], refresh_interval: {every}}}]
"""


@contextlib.contextmanager
def prometheus(tmp_path, config: str, extra_args: tuple[str, ...] = ()):
    binary = require("prometheus", "prometheus")
    port = free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(config)
    cmd = [
        binary,
        f"--config.file={cfg}",
        f"--storage.tsdb.path={tmp_path / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--enable-feature=exemplar-storage",
        *extra_args,
    ]
    with running(cmd, f"http://127.0.0.1:{port}/-/ready", tmp_path / "prometheus.log"):
        yield Prometheus(f"http://127.0.0.1:{port}")


@contextlib.contextmanager
def prometheus_agent(tmp_path, config: str, extra_args: tuple[str, ...] = ()):
    """Prometheus in agent mode (scrape and remote-write only: no query API, no rules); yields its URL."""
    binary = require("prometheus", "prometheus")
    port = free_port()
    cfg = tmp_path / "agent.yml"
    cfg.write_text(config)
    cmd = [
        binary,
        "--enable-feature=agent",
        f"--config.file={cfg}",
        f"--storage.agent.path={tmp_path / 'agent-wal'}",
        f"--web.listen-address=127.0.0.1:{port}",
        *extra_args,
    ]
    with running(cmd, f"http://127.0.0.1:{port}/-/ready", tmp_path / "agent.log"):
        yield f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def pushgateway(tmp_path):
    binary = require("prometheus-pushgateway", "prometheus-pushgateway")
    port = free_port()
    cmd = [binary, f"--web.listen-address=127.0.0.1:{port}"]
    with running(cmd, f"http://127.0.0.1:{port}/-/ready", tmp_path / "pushgateway.log"):
        yield f"http://127.0.0.1:{port}"

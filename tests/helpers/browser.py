"""Headless Chromium (Debian's) against a page served here: the DOM after the scripts ran, and
screenshots. Flags as ../shared/ENVIRONMENT.md found them: no sandbox (root), no background
networking (this machine's network is closed), a fresh profile each time."""

from __future__ import annotations

import contextlib
import itertools
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str | None:
    return shutil.which("chromium")


def _run(url: str, *args: str, budget_ms: int = 25000) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [chromium(), *FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}", *args, url],
            capture_output=True,
            text=True,
            timeout=120,
        )


def dump_dom(url: str) -> str:
    return _run(url, "--dump-dom").stdout


def screenshot(url: str, path: str, size: str = "1400,900") -> None:
    _run(url, f"--window-size={size}", f"--screenshot={path}")


@contextlib.contextmanager
def dashboard(*args: str) -> Iterator[str]:
    """``telemetry dashboard ARGS --port P`` in a process group of its own, once healthy (60 s at most):
    its URL; the group is stopped at the end."""
    from .servers import free_port, stop_group, wait_http

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "telemetry", "dashboard", *args[:1], "--port", str(port), *args[1:]]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_http(f"{url}/_stcore/health", timeout=60)
        yield url
    finally:
        stop_group(proc)


@contextlib.contextmanager
def devtools_page(url: str, timeout: float = 120.0) -> Iterator[Callable[[str], Any]]:
    """One headless Chromium on ``url``, staying on it: yields ``evaluate(expression)``, the value of a
    JS expression on the page (through the DevTools protocol: ``--remote-debugging-port=0``, the port
    from the profile's ``DevToolsActivePort``), whose ``evaluate.send(method, **params)`` calls any other
    DevTools method and returns its result. The browser's whole process group is killed at the end;
    ``timeout``: for its start, and for each answer."""
    import json
    import os
    import signal
    import time
    import urllib.request

    from websockets.sync.client import connect

    deadline = time.monotonic() + timeout
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.Popen(
            [chromium(), *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0", url],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            port_file = os.path.join(profile, "DevToolsActivePort")  # written once the protocol listens
            while "\n" not in (said := _text(port_file)):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"headless Chromium never opened its DevTools port (exit {proc.poll()})")
                time.sleep(0.05)
            port = int(said.split()[0])
            pages = []
            while not pages:  # the page's target appears once Chromium has opened the URL
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                    pages = [t for t in json.load(r) if t.get("type") == "page" and "webSocketDebuggerUrl" in t]
                if not pages:
                    if time.monotonic() > deadline:
                        raise AssertionError("headless Chromium opened no page")
                    time.sleep(0.05)
            with connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=30) as ws:
                asked = itertools.count(1)

                def send(method: str, **params: Any) -> dict:
                    n = next(asked)
                    ws.send(json.dumps({"id": n, "method": method, "params": params}))
                    while (reply := json.loads(ws.recv(timeout=timeout))).get("id") != n:
                        pass  # an event, not our answer
                    return reply.get("result", {})

                def evaluate(expression: str) -> Any:
                    return (
                        send("Runtime.evaluate", expression=expression, returnByValue=True)
                        .get("result", {})
                        .get("value")
                    )

                # any other DevTools method (Input.dispatchKeyEvent: a key pressed, as a user would)
                evaluate.send = send
                yield evaluate
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the browser and its renderers, zygote included
            proc.wait()


def dump_dom_until(url: str, *wanted: str, timeout: float = 120.0) -> str:
    """The page's DOM once it holds every ``wanted`` text, or the last DOM read when ``timeout`` seconds
    pass first. One headless Chromium opens ``url`` and stays on it (:func:`devtools_page`); its DOM is
    read every 0.2 s. (A one-shot ``--dump-dom`` ends on virtual time, not on the app: on a busy machine
    it dumped the empty shell before Streamlit's websocket drew the page, every try.)"""
    import time

    deadline = time.monotonic() + timeout
    dom = ""
    with devtools_page(url, timeout) as evaluate:
        while True:
            dom = evaluate("document.documentElement.outerHTML") or dom
            if all(w in dom for w in wanted) or time.monotonic() > deadline:
                return dom
            time.sleep(0.2)


def _text(path: str) -> str:
    """A small file's text, "" while it is not there."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return ""

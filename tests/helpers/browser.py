"""Headless Chromium (Debian's) against a page served here: the DOM after the scripts ran, and
screenshots. Flags as ../shared/ENVIRONMENT.md found them: no sandbox (root), no background
networking (this machine's network is closed), a fresh profile each time."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator

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


def dump_dom_until(url: str, *wanted: str, tries: int = 6) -> str:
    """The DOM once it holds every ``wanted`` text, or the last of ``tries`` dumps: a dump can race the
    app's websocket and show the empty shell (the first after a start always does)."""
    dom = ""
    for _ in range(tries):
        dom = dump_dom(url)
        if all(w in dom for w in wanted):
            break
    return dom

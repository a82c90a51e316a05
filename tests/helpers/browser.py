"""Headless Chromium (Debian's) against a page served here: the DOM after the scripts ran, and
screenshots. Flags as ../shared/ENVIRONMENT.md found them: no sandbox (root), no background
networking (this machine's network is closed), a fresh profile each time."""

from __future__ import annotations

import shutil
import subprocess
import tempfile

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

"""The History view for real: `telemetry dashboard RUN --history DIR` on a simulated series of 12 runs
(backward 3% slower from run 8), opened at ?view=history in headless Chromium."""

import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

pytest.importorskip("streamlit")

from telemetry.demo.simrun import write_series
from telemetry.demo.simulate import Fault, Scenario
from tests.helpers import browser
from tests.helpers.servers import free_port


def test_a_real_browser_shows_the_history_and_its_change_at_run_8(tmp_path):
    if browser.chromium() is None:
        pytest.skip("Debian's chromium is not installed (scripts/system-deps.sh installs it)")
    series = str(tmp_path / "series")
    sc = Scenario(
        name="hist", ranks=8, steps=300, seed=7, faults=(Fault("regression", phase="backward", factor=1.03, start=0),)
    )
    write_series(sc, series, 12, from_run=8)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "telemetry",
            "dashboard",
            os.path.join(series, "run-12"),
            "--port",
            str(port),
            "--history",
            series,
        ],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/_stcore/health", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, "the dashboard never became healthy"
                time.sleep(0.3)
        for _ in range(6):  # a dump can race the app's websocket and show the empty shell
            dom = browser.dump_dom(f"{url}/?view=history")
            if "from run 8 (run-08)" in dom:
                break
        assert 'data-testid="stApp"' in dom
        assert "Changes (" in dom and "from run 8 (run-08): backward_s +" in dom
        assert 'data-testid="stVegaLiteChart"' in dom
        assert "Compare run-08 against run-07" in dom
        assert 'data-testid="stException"' not in dom
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)

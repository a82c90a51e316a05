"""`telemetry dashboard RUN_DIR` started as a user starts it (the console script, a real Streamlit
server, the page read by headless Chromium): none of Streamlit's developer chrome on the page (its
"Deploy" button, `data-testid="stAppDeployButton"`, sits in the toolbar unless serve.py starts the
server with `--client.toolbarMode viewer`), and packages planted in the folder it is started from
(`telemetry/`, `streamlit/`, `pandas/`, a `sitecustomize.py`) never run: the server is isolated
(`python -I`). One server for the module; slow (tests/integration)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import psutil
import pytest

from telemetry.demo.simrun import write_simulated_run
from telemetry.demo.simulate import Scenario
from tests.helpers import browser
from tests.helpers.servers import free_port, stop_group

# Importing any of these from the start folder writes a marker named after it.
PLANTED = ("telemetry/__init__.py", "streamlit/__init__.py", "pandas/__init__.py", "sitecustomize.py")


def console_script() -> str:
    """The `telemetry` command installed beside this interpreter (its sys.path[0] is its own folder,
    not the current directory, as for any user)."""
    path = os.path.join(os.path.dirname(sys.executable), "telemetry")
    if not os.path.exists(path):
        pytest.skip("the telemetry console script is not installed beside this interpreter (pip install -e .)")
    return path


def plant(folder: str, markers: str) -> None:
    for rel in PLANTED:
        path = os.path.join(folder, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        marker = os.path.join(markers, rel.replace("/", "_"))
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"open({marker!r}, 'w').write('ran')\nprint('PLANTED CODE RAN: {rel}')\n")


def rendered_dom(url: str) -> str:
    """The page's DOM once Streamlit has drawn the toolbar and the run."""
    dom = browser.dump_dom_until(url, 'data-testid="stToolbar"', 'data-testid="stMetric"')
    if 'data-testid="stToolbar"' in dom and 'data-testid="stMetric"' in dom:
        return dom
    found = sorted(set(re.findall(r'data-testid="(\w+)"', dom)))
    raise AssertionError(f"the page never drew its toolbar and the run; elements seen: {found}")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if browser.chromium() is None:
        pytest.skip("Debian's chromium is not installed (scripts/system-deps.sh installs it)")
    base = tmp_path_factory.mktemp("dashboard_server")
    run_dir = str(base / "run")
    write_simulated_run(Scenario(ranks=2, steps=40), run_dir)
    start, markers = base / "shared_folder", base / "markers"
    start.mkdir()
    markers.mkdir()
    plant(str(start), str(markers))
    port = free_port()
    err = open(base / "stderr.txt", "w+", encoding="utf-8")  # the server's log: Streamlit writes to stderr
    proc = subprocess.Popen(
        [console_script(), "dashboard", run_dir, "--port", str(port)],
        cwd=str(start),
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
        start_new_session=True,
    )
    t0 = time.monotonic()
    lines = [proc.stdout.readline(), proc.stdout.readline()]  # "starting on ...", then the URL once healthy
    url = f"http://127.0.0.1:{port}"
    try:
        started = f"{url} (Ctrl-C stops it)" in lines[1]
        print(f"dashboard healthy in {time.monotonic() - t0:.1f} s" if started else "dashboard did not start")
        yield {
            "proc": proc,
            "started": started,
            "why": "".join(lines) + (base / "stderr.txt").read_text(),
            "dom": rendered_dom(url) if started else "",
            "markers": str(markers),
            "lines": lines,
        }
    finally:
        stop_group(proc)
        err.close()


def test_no_developer_chrome_on_the_page(server):
    assert server["started"], server["why"]
    dom = server["dom"]
    assert 'data-testid="stToolbar"' in dom  # the toolbar was drawn: the check below can see a button in it
    assert 'data-testid="stAppDeployButton"' not in dom
    assert ">Deploy<" not in dom
    assert 'data-testid="stException"' not in dom


def test_planted_packages_in_the_start_folder_never_run(server):
    """The page was drawn (the app's script ran and imported telemetry, streamlit and pandas) and
    none of the planted files ran, in the launcher or in the server."""
    assert sorted(os.listdir(server["markers"])) == [], "planted code ran"
    assert not any("PLANTED" in line for line in server["lines"])
    assert server["started"], server["why"]
    assert 'data-testid="stMetric"' in server["dom"]


def test_stopping_the_command_ends_the_server(server):
    assert server["started"], server["why"]
    proc = server["proc"]
    children = psutil.Process(proc.pid).children(recursive=True)
    assert children, "the dashboard's server process is missing"
    stop_group(proc)
    assert proc.returncode is not None
    _, alive = psutil.wait_procs(children, timeout=10)
    assert alive == [], f"still running after the command ended: {[p.pid for p in alive]}"

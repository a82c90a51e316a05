"""The wheel is the product: built from this tree, checked for what it carries, installed into a fresh
venv outside the checkout, and used there from a folder outside the checkout as a pip user would:
`import exporters` fails, `telemetry stack init` writes a stack promtool accepts, `telemetry simulate`
and `analyze` work, `telemetry dashboard` serves and stops, `telemetry demo` runs a real job.

Installing the dependencies into the fresh venv (torch alone is 754 MB) takes about 50 s and 1.4 GB
here, too much for every run of the suite: the wheel is installed with --no-deps, and the fresh venv
reaches this venv's site-packages through a .pth file holding the plain path. A path line adds the
folder to sys.path without running the .pth files in it, so this venv's editable install of
telemetry (an import hook, installed by such a .pth file) is not active there: `telemetry` is the
wheel's copy (checked). The full install with the extras (`pip install -c constraints-cpu.txt
'WHEEL[dashboard,otel]'`) is the manual check the packaging note reports. Slow: about 20 s."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import urllib.request
import zipfile

import psutil
import pytest

from tests.helpers.servers import free_port, require

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MONITORING = ("prometheus", "alertmanager", "grafana", "otel", "stack", "script")


def env() -> dict:
    """The user's environment: no TELEMETRY_* settings, no path or venv of ours."""
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
    return {k: v for k, v in os.environ.items() if not k.startswith("TELEMETRY_") and k not in drop}


def run(cmd: list[str], cwd: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env(), capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> str:
    """`pip wheel` of a copy of this tree's package (a build in the checkout would leave build/ in it
    and could pick up a stale build/lib)."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), src / name)
    shutil.copytree(
        os.path.join(ROOT, "telemetry"), src / "telemetry", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    r = run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q", "-w", str(base)],
        cwd=str(base),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    (found,) = [n for n in os.listdir(base) if n.endswith(".whl")]
    return str(base / found)


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> dict:
    """A fresh venv outside the checkout with the wheel installed (--no-deps); the dependencies come
    from this venv's site-packages through a plain path line in a .pth file."""
    base = tmp_path_factory.mktemp("fresh")
    assert not str(base).startswith(ROOT + os.sep)
    home = base / "venv"
    r = run([sys.executable, "-m", "venv", "--without-pip", str(home)], cwd=str(base))
    assert r.returncode == 0, r.stderr
    python = str(home / "bin" / "python")
    r = run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q", wheel], cwd=str(base))
    assert r.returncode == 0, r.stdout + r.stderr
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=str(base))
    with open(os.path.join(purelib.stdout.strip(), "_dependencies.pth"), "w", encoding="utf-8") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    work = base / "work"  # every command runs here: outside the checkout
    work.mkdir()
    return {"home": str(home), "python": python, "telemetry": str(home / "bin" / "telemetry"), "work": str(work)}


def test_wheel_carries_one_package_and_the_monitoring_files(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        dist_info = next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info"))
        top_level = z.read(f"{dist_info}/top_level.txt").decode().split()
        entry_points = z.read(f"{dist_info}/entry_points.txt").decode()
    assert {n.split("/")[0] for n in names} == {"telemetry", dist_info}
    assert top_level == ["telemetry"]
    assert not any(n.startswith(("exporters/", "dashboards/")) for n in names)
    assert "prometheus = telemetry.exporters.prometheus:PrometheusSink" in entry_points
    assert "telemetry = telemetry.cli:main" in entry_points
    # Every file of the monitoring stack in the tree ships (a new rule file the package-data globs
    # miss fails here), and so does the Streamlit script.
    dashboards = os.path.join(ROOT, "telemetry", "dashboards")
    want = set()
    for folder in MONITORING:
        for parent, dirs, files in os.walk(os.path.join(dashboards, folder)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            want.update(os.path.relpath(os.path.join(parent, f), ROOT) for f in files if not f.endswith(".pyc"))
    assert "telemetry/dashboards/prometheus/tests/alerts.test.yml" in want
    assert "telemetry/dashboards/stack/Dockerfile" in want
    assert "telemetry/dashboards/script/app.py" in want
    assert sorted(want - names) == []
    # Every module of the tree too: a folder without __init__.py is no package to setuptools' find,
    # and would be left out of the wheel while the editable install still finds it.
    modules = set()
    for parent, dirs, files in os.walk(os.path.join(ROOT, "telemetry")):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        modules.update(os.path.relpath(os.path.join(parent, f), ROOT) for f in files if f.endswith(".py"))
    assert sorted(modules - names) == []


def test_fresh_venv_runs_the_wheel_and_has_no_top_level_exporters(venv):
    code = (
        "import json, telemetry, telemetry.exporters.prometheus as p, telemetry.dashboards.serve as s; "
        "print(json.dumps([telemetry.__file__, p.__file__, s.__file__]))"
    )
    r = run([venv["python"], "-c", code], cwd=venv["work"])
    assert r.returncode == 0, r.stderr
    for path in json.loads(r.stdout):
        assert path.startswith(venv["home"] + os.sep), path  # the wheel's copy, not the checkout's
    for name in ("exporters", "dashboards"):
        r = run([venv["python"], "-c", f"import {name}"], cwd=venv["work"])
        assert r.returncode != 0 and f"No module named '{name}'" in r.stderr, (name, r.stderr)


def test_stack_init_from_the_wheel_passes_promtool(venv, wheel):
    promtool = require("promtool", "prometheus")
    r = run([venv["telemetry"], "stack", "init", "stack"], cwd=venv["work"])
    assert r.returncode == 0, r.stdout + r.stderr
    home = os.path.join(venv["work"], "stack")
    # pip recorded the wheel it installed from: the image is built from that same file
    assert sorted(os.listdir(os.path.join(home, "wheels"))) == sorted([".keep", os.path.basename(wheel)])
    r = run([promtool, "check", "config", os.path.join(home, "prometheus", "prometheus.yml")], cwd=venv["work"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS: 2 rule files found" in r.stdout


def test_simulate_and_analyze(venv):
    r = run([venv["telemetry"], "simulate", "--ranks", "2", "--steps", "40", "--out", "sim"], cwd=venv["work"])
    assert r.returncode == 0, r.stderr
    r = run([venv["telemetry"], "analyze", "sim", "--json"], cwd=venv["work"])
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["summary"]["ranks"] == 2 and isinstance(doc["findings"], list)


def test_dashboard_serves_and_stops(venv):
    if not os.path.isdir(os.path.join(venv["work"], "sim")):
        r = run([venv["telemetry"], "simulate", "--ranks", "2", "--steps", "40", "--out", "sim"], cwd=venv["work"])
        assert r.returncode == 0, r.stderr
    port = free_port()
    proc = subprocess.Popen(
        [venv["telemetry"], "dashboard", "sim", "--port", str(port)],
        cwd=venv["work"],
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        lines = [proc.stdout.readline(), proc.stdout.readline()]  # the URL comes once it is healthy
        assert f"http://127.0.0.1:{port} (Ctrl-C stops it)" in lines[1], lines
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=5) as resp:
            assert resp.read() == b"ok"
        server = psutil.Process(proc.pid).children(recursive=True)
        # the server: this venv's interpreter, isolated (-I)
        assert any(p.cmdline()[0].startswith(venv["home"]) and p.cmdline()[1] == "-I" for p in server), [
            p.cmdline()[:2] for p in server
        ]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # the command, as a user's Ctrl-C or kill would
        proc.wait(20)
    _, alive = psutil.wait_procs(server, timeout=10)
    assert alive == [], f"the dashboard's server outlived the command: {[p.pid for p in alive]}"


def test_demo_runs_a_real_job(venv):
    r = run(
        [venv["telemetry"], "demo", "--ranks", "2", "--steps", "20", "--run-dir", "demo"], cwd=venv["work"], timeout=180
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "job completed" in r.stdout, r.stdout[-2000:]

"""Fixtures every folder shares (each expensive real job runs once per session), and the layout's
two rules, checked at collection: every folder of tests is a package, and no slow test is a unit test."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLOCK_SCALE = os.environ.get("TELEMETRY_TEST_CLOCK_SCALE")  # the stress mode's: clocks read 2x or 0.5x
if CLOCK_SCALE:
    from tests.helpers.clock import scale_clocks

    scale_clocks(float(CLOCK_SCALE))
TESTS = os.path.join(ROOT, "tests")
UNIT = os.path.join(TESTS, "unit")

_LAUNCH_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")


# Profiler captures on findings (on by default) off in this process and every process it starts, the
# session-scoped fixtures' demos too (they are set up before any function-scoped fixture runs): a
# capture's cost must never move what another test measures; the capture tests turn them on.
os.environ["TELEMETRY_CAPTURE"] = "0"


@pytest.fixture(autouse=True)
def clean_telemetry(monkeypatch):
    """Every test starts with no telemetry session and no launcher/TELEMETRY_* variables (but
    TELEMETRY_CAPTURE=0)."""
    for key in list(os.environ):
        if key.startswith(("TELEMETRY_", "SLURM_", "OMPI_")) or key in _LAUNCH_VARS:
            monkeypatch.delenv(key, raising=False)
    # Profiler captures on findings (on by default) off, so that a capture's cost never moves what another
    # test measures; the capture tests turn them on (tests/README.md).
    monkeypatch.setenv("TELEMETRY_CAPTURE", "0")
    import telemetry

    telemetry.shutdown()
    yield
    telemetry.shutdown()
    from telemetry.hooks import collectives

    collectives.uninstrument_collectives()


def pytest_collection_modifyitems(config, items):
    """Runs after tests/integration/conftest.py has marked its tests slow (that one is tryfirst)."""
    problems = set()
    for item in items:
        path = str(item.path)
        if not path.startswith(TESTS + os.sep):
            continue
        folder = os.path.dirname(path)
        while folder != ROOT:
            if not os.path.exists(os.path.join(folder, "__init__.py")):
                problems.add(
                    f"{os.path.relpath(folder, ROOT)} has no __init__.py: its test modules would be imported "
                    "under their bare names, where equal names in two folders clash (tests/README.md)"
                )
            folder = os.path.dirname(folder)
        if path.startswith(UNIT + os.sep) and item.get_closest_marker("slow"):
            problems.add(f"{item.nodeid} is marked slow: a slow test belongs in tests/integration/ (tests/README.md)")
    if problems:
        raise pytest.UsageError("the tests' layout:\n  " + "\n  ".join(sorted(problems)))
    if CLOCK_SCALE:
        skip = pytest.mark.skip(reason=f"real_clock: its claim is about real time (clocks scaled x{CLOCK_SCALE})")
        for item in items:
            if item.get_closest_marker("real_clock"):
                item.add_marker(skip)


@pytest.fixture
def run_dir(tmp_path):
    return str(tmp_path / "run")


@pytest.fixture(scope="session")
def straggler_demo(tmp_path_factory):
    """One real `telemetry demo` (4 gloo ranks, 200 steps, rank 2's forward 2x slower), run once for
    every test that reads it: (findings JSON, stderr with the progress lines, run directory)."""
    import json
    import subprocess

    run_dir = str(tmp_path_factory.mktemp("straggler_demo") / "run")
    # 2x: a cost (about 6%) well above this 2-core machine's noise, so the end-to-end checks are not a
    # coin toss; how often the subtler 1.5x (2-3%) is found is bench/detectors/evaluate.py's business
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "telemetry",
            "demo",
            "--run-dir",
            run_dir,
            "--json",
            "--inject",
            "straggler:rank=2,phase=forward,factor=2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), proc.stderr, run_dir


@pytest.fixture
def straggler_table(tmp_path):
    """A simulated steps table (8 ranks, 300 steps, rank 5's forward 1.5x slower) as a Parquet file."""
    from telemetry.demo.simulate import Fault, Scenario, simulate

    path = tmp_path / "steps.parquet"
    simulate(
        Scenario(ranks=8, steps=300, faults=(Fault("straggler", ranks=(5,), phase="forward", factor=1.5),))
    ).to_parquet(path, index=False)
    return str(path)

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

_LAUNCH_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")


@pytest.fixture(autouse=True)
def clean_telemetry(monkeypatch):
    """Every test starts with no telemetry session and no launcher/TELEMETRY_* variables."""
    for key in list(os.environ):
        if key.startswith(("TELEMETRY_", "SLURM_", "OMPI_")) or key in _LAUNCH_VARS:
            monkeypatch.delenv(key, raising=False)
    import telemetry

    telemetry.shutdown()
    yield
    telemetry.shutdown()
    from telemetry.hooks import collectives

    collectives.uninstrument_collectives()


@pytest.fixture
def run_dir(tmp_path):
    return str(tmp_path / "run")

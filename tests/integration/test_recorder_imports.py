"""A fresh interpreter: the default recorder is unchanged and imports nothing for profiler ranges."""

import subprocess
import sys

from tests.helpers.paths import ROOT


def test_default_recorder_is_unchanged_and_imports_nothing_for_ranges():
    code = (
        "import sys, telemetry; from telemetry.recorder import build_recorder, Recorder; "
        "r = build_recorder(1024, 'wall'); assert type(r) is Recorder; "
        "print('telemetry.recorder.ranges' in sys.modules, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]

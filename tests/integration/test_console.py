"""A healthy torchrun job's console is the user's: their own output whole, one start line per rank from
telemetry, and nothing from the profiler while the run's baseline capture starts and stops on two ranks."""

import glob
import json
import os
import re
import subprocess
import sys

import pytest

from tests.helpers.paths import ROOT
from tests.helpers.servers import free_port

STEPS = 200


# alone: beside another worker's jobs two ranks on two cores are not a healthy job (a rank held back for
# a stretch is a straggler online detection names, and says so on the console, as it should)
@pytest.mark.alone
def test_a_healthy_job_s_console_holds_the_user_s_output_and_the_start_lines_only(tmp_path):
    run_dir = str(tmp_path / "run")
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    proc = subprocess.run(
        [torchrun, "--nproc_per_node", "2", "--master_port", str(free_port()), "tests/helpers/console_job.py"]
        + [str(STEPS), run_dir],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        env={**os.environ, "OMP_NUM_THREADS": "1", "TELEMETRY_CAPTURE": "1", "CONSOLE_PORT": str(free_port())},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the baseline capture was taken: the profiler started and stopped on both captured ranks
    (manifest,) = glob.glob(os.path.join(run_dir, "captures", "*", "manifest.json"))
    with open(manifest) as f:
        assert sorted(json.load(f)["ranks"]) == [0, 1]
    for stream, text in (("stdout", proc.stdout), ("stderr", proc.stderr)):
        # every line the user printed is there (two processes' lines may interleave mid-line on one pipe)
        said = {(int(r), int(s)) for r, s in re.findall(rf"user {stream} (\d) (\d+)", text)}
        made = max(s for _, s in said) + 1
        assert made >= STEPS and said == {(r, s) for r in (0, 1) for s in range(made)}, stream
        rest = [line for line in re.sub(r"user (stdout|stderr) \d \d+", "", text).splitlines() if line.strip()]
        assert not [line for line in rest if "USDT" in line or "profiler_st" in line], rest
        ours = [line for line in rest if "telemetry" in line]
        if stream == "stdout":
            assert ours == [], ours
        else:  # one start line per rank, and nothing else from telemetry
            assert sorted(re.sub(r" \(.*", "", line) for line in ours) == [
                "telemetry: rank 0 of 2",
                "telemetry: rank 1 of 2",
            ], rest
    assert not glob.glob(os.path.join(run_dir, "logs", "*.log")), "a healthy run warns of nothing"

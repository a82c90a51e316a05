"""Runs made for a test: steps recorded by a real session into a run directory, a simulated run
directory (`telemetry simulate`), `telemetry analyze --json` read back, and a demo process stopped
with every rank it started."""

import json
import os
import signal
import subprocess

import telemetry
from telemetry.cli import main as cli


def record(run_dir, steps, job="cli"):
    """`steps` empty steps recorded into `run_dir` by a real session (store sink only)."""
    telemetry.init(run_dir=run_dir, job=job, sinks=["store"])
    for _ in range(steps):
        with telemetry.step():
            pass
    telemetry.shutdown()


def simulated(tmp_path, *inject, ranks=16, steps=600):
    """`telemetry simulate` into tmp_path/sim, with these --inject specs: the run directory."""
    out = str(tmp_path / "sim")
    args = ["simulate", "--ranks", str(ranks), "--steps", str(steps), "--out", out]
    for spec in inject:
        args += ["--inject", spec]
    assert cli(args) == 0
    return out


def analyzed(capsys, *args):
    """`telemetry analyze ARGS --json`: (exit code, the JSON document)."""
    capsys.readouterr()
    code = cli(["analyze", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def stop_demo(demo: subprocess.Popen, run_dir) -> None:
    """Ctrl-C, on which the launcher stops its ranks (it does not on SIGTERM); then any rank
    still running (each in its own session) is killed by the pid it wrote."""
    demo.send_signal(signal.SIGINT)
    try:
        demo.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        demo.kill()
        demo.communicate()
    for path in (run_dir / "ranks").glob("rank-*[0-9].json"):
        pid = json.loads(path.read_text()).get("pid")
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"telemetry.demo.worker" in f.read():
                    os.kill(pid, signal.SIGKILL)
        except (OSError, TypeError):
            pass

"""Runs made for a test: steps recorded by a real session into a run directory, a simulated run
directory (`telemetry simulate`), and `telemetry analyze --json` read back."""

import json

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

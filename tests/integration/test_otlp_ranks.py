"""The OTLP sink on four real ranks: they share one trace per step."""

import os
import subprocess
import sys

from telemetry.exporters.tracing import trace_id
from tests.helpers.otlp_receiver import Receiver
from tests.helpers.paths import ROOT


def test_four_ranks_share_one_trace_per_step(tmp_path):
    with Receiver() as rcv:
        env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": rcv.url, "TELEMETRY_SINKS": "store,otlp"}
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "telemetry",
                "demo",
                "--ranks",
                "4",
                "--steps",
                "30",
                "--run-dir",
                str(tmp_path / "run"),
                "--json",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        spans = list(rcv.spans)
    job = "run"
    for step in (5, 17):
        tid = f"{trace_id(job, step):032x}"
        rank_steps = [s for s in spans if s["trace_id"] == tid and s["name"] == "train.rank_step"]
        assert sorted(s["resource"]["training.rank"] for s in rank_steps) == [0, 1, 2, 3]
        root = [s for s in spans if s["trace_id"] == tid and s["name"] == "train.step"]
        assert len(root) == 1 and root[0]["resource"]["training.rank"] == 0
        assert all(s["parent"] == root[0]["span_id"] for s in rank_steps)
        colls = [s for s in spans if s["trace_id"] == tid and s["name"] == "all_reduce"]
        assert len(colls) == 4 and all(s["attributes"]["training.bytes"] > 0 for s in colls)
        backward = {s["span_id"] for s in spans if s["trace_id"] == tid and s["name"] == "backward"}
        assert all(c["parent"] in backward for c in colls)  # nested in the phase that ran it

"""Capture on a finding, end to end (issue 24's done-when): a real 4-rank gloo demo in which rank 2 alone
runs one extra heavy op (``aten::exp``) in its forward from step 20 gives an online finding, a profiler
capture of rank 2 and a healthy peer from the same step, and ``analyze --json`` with that finding's
``trace_diff`` and causes naming the op."""

import glob
import gzip
import json
import os
import subprocess
import sys

import pytest

from telemetry.analysis.traces.captures import JOB_WIDE
from tests.helpers.paths import ROOT


def test_a_finding_is_captured_on_its_rank_and_a_peer_and_the_diff_names_the_op(tmp_path):
    run = str(tmp_path / "run")
    # beside another worker's jobs a neighbour can make another rank a straggler first (CI once saw rank 3's
    # backward from step 19): no interval between captures, and room for a few, so that one cannot hold
    # back rank 2's; the test looks for rank 2's finding among those captured
    env = {
        **os.environ,
        "TELEMETRY_CAPTURE": "1",
        "TELEMETRY_ONLINE_INTERVAL_S": "2",
        "TELEMETRY_SINKS": "store",
        "TELEMETRY_CAPTURE_MIN_INTERVAL_S": "0",
        "TELEMETRY_CAPTURE_MAX": "8",
    }
    demo = subprocess.run(
        [sys.executable, "-m", "telemetry", "demo", "--ranks", "4", "--steps", "400", "--run-dir", run]
        + ["--inject", "slow_op:rank=2,op=exp,factor=3,start=20", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert demo.returncode in (0, 1), demo.stderr[-3000:]
    with open(os.path.join(run, "findings.jsonl")) as f:
        online = [json.loads(line) for line in f]
    captured = [d for d in online if d.get("capture_id") and d["kind"] == "straggler" and d["ranks"] == [2]]
    assert captured, online
    manifests = {}
    for path in glob.glob(os.path.join(run, "captures", "*", "manifest.json")):
        with open(path) as f:
            manifests[path] = json.load(f)
    # the run's baseline (rank 0 and a peer, after the first analysis), once, and rank 2's finding's capture
    assert [m["reason"] for m in manifests.values()].count("baseline") == 1, manifests
    ((manifest_path, manifest),) = [(p, m) for p, m in manifests.items() if m["id"] == captured[0]["capture_id"]]
    assert manifest["reason"] == "finding" and manifest["ranks"][0] == 2
    (peer,) = [int(r) for r, role in manifest["roles"].items() if role == "peer"]
    assert peer != 2 and manifest["steps"][1] - manifest["steps"][0] == 2  # 3 steps, the same on both ranks
    for rank in (2, peer):
        with gzip.open(os.path.join(os.path.dirname(manifest_path), f"rank-{rank}.json.gz"), "rt") as f:
            assert "traceEvents" in f.read(4096)
    analysis = subprocess.run(
        [sys.executable, "-m", "telemetry", "analyze", run, "--json"], cwd=ROOT, capture_output=True, text=True
    )
    doc = json.loads(analysis.stdout)
    (f,) = [f for f in doc["findings"] if f["kind"] == "straggler" and f["ranks"] == [2]]
    assert f["capture"]["id"] == manifest["id"] and f["capture"]["roles"] == manifest["roles"]
    # the op only rank 2 runs is in the diff and named as a cause; whether it leads both is left to the
    # unit tests: on a busy host a descheduled collective or a uniform factor can be as large
    rows = [r for r in f["trace_diff"] if r["name"] == "aten::exp"]
    assert len(rows) == 1, f["trace_diff"][:5]
    assert rows[0]["peer_ms_per_step"] == 0.0 and rows[0]["flagged_ms_per_step"] > 0, f["trace_diff"][:5]
    named = [c for c in f["causes"] if c["kind"] == "slow_op" and "aten::exp" in c["evidence"]]
    assert named and "its peer never ran it" in named[0]["evidence"], (f["causes"], f["trace_diff"][:5])


def test_telemetry_capture_asks_a_running_job_for_traces(tmp_path):
    """`telemetry capture RUN_DIR --ranks 0,1 --num-steps 2 --wait 120` while a 2-rank demo runs: both
    ranks' traces of the same two steps, under a manifest that says they were asked for."""
    import signal
    import time

    run = tmp_path / "run"
    env = {**os.environ, "TELEMETRY_CAPTURE": "1", "TELEMETRY_SINKS": "store"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "telemetry", "demo", "--ranks", "2", "--run-dir", str(run), "--steps", "100000"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120

        # the job runs and its online detection with it: the baseline capture taken and written by both ranks
        # (about 10 s in; a first sealed segment, waited for before, came some 55 s in). Not merely planned:
        # asked for then, the capture was planned two steps after the baseline's last, and a fresh clone's
        # rank 0 (a231769) never wrote its trace of them while the baseline's was being exported: a race
        # between back-to-back captures on one rank, open in issue 44's note, not what this test is about
        def baseline_written() -> bool:
            return len(glob.glob(str(run / "captures" / "*-baseline" / "rank-*.json.gz"))) == 2

        while not (run / "meta.json").exists() or not baseline_written():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
        asked = subprocess.run(
            [sys.executable, "-m", "telemetry", "capture", str(run), "--ranks", "0,1", "--num-steps", "2"]
            + ["--wait", "120"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=200,
        )
        assert asked.returncode == 0, asked.stderr
        (manifest_path,) = glob.glob(str(run / "captures" / "asked-*" / "manifest.json"))
        with open(manifest_path) as f:
            manifest = json.load(f)
        assert manifest["reason"] == "asked" and manifest["ranks"] == [0, 1]
        assert manifest["roles"] == {"0": "asked", "1": "asked"} and manifest["steps"][1] == manifest["steps"][0] + 1
        for rank in (0, 1):
            with gzip.open(os.path.join(os.path.dirname(manifest_path), f"rank-{rank}.json.gz"), "rt") as f:
                assert '"aten::' in f.read()  # the profiler's operations of the demo's steps
        assert not os.listdir(run / "captures" / "requests")  # the request was taken
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# alone: a neighbour test's load slowed this job before step 500 too, a job-wide finding as real as the
# injected one, which then took no second capture after 500 (CI, 2026-12-05). Online detection now names
# a further rise inside an ongoing job-wide finding (online/detector.further_rise) and captures it; the
# test still runs alone, so that its baseline is taken before any neighbour's load
@pytest.mark.alone
def test_a_job_wide_regression_is_captured_and_diffed_against_the_runs_baseline(tmp_path):
    """A real 2-rank gloo demo whose every rank also runs ``aten::exp`` in its forward from step 500 (a
    job-wide regression): the run's baseline capture (ranks 0 and 1, early), an online regression, a
    capture of the same ranks after it naming the baseline, and ``analyze --json`` whose regression diffs
    rank 0 now against rank 0 then, naming the op the baseline never ran (which cause leads is left to
    the unit tests: a busy host slows everything else by a factor of its own)."""
    run = str(tmp_path / "run")
    # a busy host (CI beside other jobs) can slow the whole job before step 500 too, a regression as real
    # as the injected one: no interval between captures, so an early one cannot hold back the one after 500
    env = {
        **os.environ,
        "TELEMETRY_CAPTURE": "1",
        "TELEMETRY_ONLINE_INTERVAL_S": "2",
        "TELEMETRY_SINKS": "store",
        "TELEMETRY_CAPTURE_MIN_INTERVAL_S": "0",
        "TELEMETRY_CAPTURE_MAX": "8",
    }
    demo = subprocess.run(
        [sys.executable, "-m", "telemetry", "demo", "--ranks", "2", "--steps", "1000", "--run-dir", run]
        + ["--inject", "slow_op:rank=0,op=exp,factor=2,start=500"]
        + ["--inject", "slow_op:rank=1,op=exp,factor=2,start=500", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert demo.returncode in (0, 1), demo.stderr[-3000:]
    manifests = []
    for path in glob.glob(os.path.join(run, "captures", "*", "manifest.json")):
        with open(path) as f:
            manifests.append(json.load(f))
    (base,) = [m for m in manifests if m["reason"] == "baseline"]
    after = [m for m in manifests if m.get("job_wide") and m["steps"][0] > 500]
    assert after, (manifests, demo.stderr[-3000:])
    assert base["steps"][1] < 500
    # a regression; on a busy host the step's rise may land in the collectives' wait: a job-wide slow_comm.
    # A further rise inside it takes a capture of its own, so there may be several; each names the baseline
    for job in after:
        assert job["ranks"] == base["ranks"], job
        assert job["finding"]["kind"] in JOB_WIDE and not job["finding"]["ranks"], job
        # a finding dated before the baseline's steps ended names no baseline: the baseline saw the change
        # (a fresh clone's make test, 2026-12-06: a job-wide slow_comm dated from step 360, the baseline's
        # own profiled steps among its first; online/capture.py's rule, as analyze's below)
        onset = job["finding"]["first_step"]
        before_base = onset is not None and onset <= base["steps"][1]
        assert job["baseline"] == (None if before_base else base["id"]), (job, base["steps"])
    analysis = subprocess.run(
        [sys.executable, "-m", "telemetry", "analyze", run, "--json"], cwd=ROOT, capture_output=True, text=True
    )
    doc = json.loads(analysis.stdout)
    seen = [(f["kind"], f["ranks"], f["first_step"], f["last_step"], "capture" in f) for f in doc["findings"]]
    # the finding adopts the latest capture within its steps (CI, 2026-12-05: two after step 500, and the
    # finding took the second)
    ids = sorted(m["id"] for m in after)
    adopted = [f for f in doc["findings"] if f.get("capture", {}).get("id") in ids]
    assert adopted, (ids, seen)
    for f in adopted:
        assert f["kind"] in JOB_WIDE and f["ranks"] == [], f
        said = ({k: v for k, v in f["capture"].items() if k != "breakdown"}, doc["summary"].get("warnings"))
        (taken,) = [m for m in after if m["id"] == f["capture"]["id"]]
        if taken["baseline"] is None and f["first_step"] <= base["steps"][1]:
            # online detection dated the change before the baseline's steps ended and took this capture
            # naming no baseline (online/capture.py's rule, asserted above); analyze dates it before the
            # baseline ended too: nothing to compare with (captures.py's rule)
            assert "capture" in f and "baseline" not in f["capture"], said
            continue
        # a capture naming no baseline whose finding analyze dates after the baseline ended is compared
        # with it all the same (a fresh clone's make test, 2026-12-06: analyze's regression from after
        # step 500, the capture's baseline none): the whole run dates the change better than online did
        if f["first_step"] <= base["steps"][1]:
            # the finding dated its change before the baseline's steps ended (a fresh clone's make test,
            # 2026-12-06: a job-wide finding whose onset the analysis put before step 500): the baseline
            # saw the change too, so analyze compares nothing with it, and says so
            assert "capture" in f and "baseline" not in f["capture"], said
            assert any(
                f"its baseline {base['id']}" in w and "was taken after the change began" in w
                for w in doc["summary"].get("warnings", [])
            ), said
            continue
        assert f["capture"].get("baseline", {}).get("id") == base["id"], said
        # the op the baseline never ran is in the diff, whatever else a busy host made slower
        rows = [r for r in f["trace_diff"] if r["name"] == "aten::exp"]
        assert len(rows) == 1, said
        assert rows[0]["peer_ms_per_step"] == 0.0 and rows[0]["flagged_ms_per_step"] > 0, f["trace_diff"][:3]

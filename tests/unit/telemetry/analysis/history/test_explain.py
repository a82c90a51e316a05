"""Why a change across runs happened (telemetry/analysis/history/explain.py): ``telemetry history`` opens the
runs either side of a change, compares their steps, and compares the profiler captures both took of one
rank, naming the kernel the slower run spends more time in."""

import json
import os

import pytest

from telemetry.analysis.history import explain as HD
from telemetry.cli import main
from telemetry.demo.faults import Fault
from telemetry.demo.simrun import write_series
from telemetry.demo.simulate import Scenario
from tests.helpers.kineto_traces import write_capture as add_capture

SLOW_KERNEL = "sm80_xmma_gemm_f32"  # gpu_trace's forward kernel, slow_us longer


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    """12 runs, backward 3% slower from run 8; each run's baseline capture of ranks 0 and 3, the kernel
    40 us longer in runs 8 to 12 (what a profiler would have seen of the change)."""
    out = str(tmp_path_factory.mktemp("series") / "nightly")
    fault = (Fault("regression", phase="backward", factor=1.03, start=0),)
    runs = write_series(Scenario(name="nightly", ranks=8, steps=300, seed=7, faults=fault), out, 12, from_run=8)
    for k, run in enumerate(runs, start=1):
        add_capture(run, "baseline", {0: "baseline", 3: "baseline"}, slow_us=40.0 if k >= 8 else 0.0)
    return out


def test_a_change_names_the_kernel_the_slower_run_spends_more_in_and_the_phase_its_steps_show(series, capsys):
    assert main(["history", series, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    [c] = [c for c in doc["changes"] if c["metric"] == "backward_s"]
    d = c["diff"]
    assert d["captures"]["slower"] == "after" and d["captures"]["before"]["rank"] == 0
    assert (d["captures"]["before"]["run"], d["captures"]["after"]["run"]) == tuple(c["paths"])
    top = d["trace_diff"][0]
    assert (top["name"], top["kind"]) == (SLOW_KERNEL, "kernel"), d["trace_diff"]
    assert top["flagged_ms_per_step"] - top["peer_ms_per_step"] == pytest.approx(0.04, abs=1e-3)
    assert [(f["kind"], f["phase"]) for f in d["steps"]["findings"]][:1] == [("regression", "backward")], d["steps"]
    # one pair of runs, each with its own 1% run-to-run noise: about the 3%, not the runs' median of it
    assert 0.01 < d["steps"]["series"]["backward"]["change"] < 0.06, d["steps"]["series"]
    # every series that changed at run 8 shares the one comparison
    assert all(x["diff"]["trace_diff"] == d["trace_diff"] for x in doc["changes"])


def test_the_table_prints_what_the_captures_show(series, capsys):
    assert main(["history", series]) == 0
    out = capsys.readouterr().out
    assert "rank 0's captures, the slower run (run-08, steps 100-102) against the faster (run-07" in out
    assert f"kernel {SLOW_KERNEL} +0.040 ms/step" in out
    assert "the runs either side, regression: phase backward:" in out


def test_no_diff_opens_no_run(series, capsys, monkeypatch):
    monkeypatch.setattr(HD, "explain", lambda *a: pytest.fail("opened the runs either side"))
    assert main(["history", series, "--json", "--no-diff"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["changes"] and all("trace_diff" not in c["diff"] for c in doc["changes"])


def test_an_improvement_compares_the_run_before_as_the_slower(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    write_series(Scenario(name="pair", ranks=2, steps=40), str(tmp_path / "s"), 2)
    for run, slow in ((a, 25.0), (b, 0.0)):
        os.makedirs(run)
        add_capture(run, "c1", {1: "peer", 0: "flagged"}, slow_us=slow)
    d = HD.explain(a, b, slower_after=False)
    assert d["captures"]["slower"] == "before" and d["captures"]["before"]["rank"] == 1  # the peer's, not the flagged
    assert d["trace_diff"][0]["name"] == SLOW_KERNEL
    # a and b hold no steps: said, not invented
    assert d["steps"] is None and any("do not read" in n or "no steps" in n for n in d["notes"]), d["notes"]


def test_runs_without_a_common_captured_rank_say_so(tmp_path):
    runs = write_series(Scenario(name="pair", ranks=4, steps=60), str(tmp_path / "s"), 2)
    add_capture(runs[0], "c1", {0: "baseline"})
    add_capture(runs[1], "c1", {2: "baseline"})
    d = HD.explain(*runs)
    assert d["steps"] is not None and d["trace_diff"] == [] and d["captures"] is None
    assert any("no rank has a profiler capture in both runs" in n for n in d["notes"]), d["notes"]


def test_a_capture_with_a_missing_trace_is_not_compared(tmp_path):
    runs = write_series(Scenario(name="pair", ranks=4, steps=60), str(tmp_path / "s"), 2)
    add_capture(runs[0], "c1", {0: "baseline", 1: "baseline"})
    add_capture(runs[1], "c1", {0: "baseline", 1: "baseline"})
    os.remove(os.path.join(runs[1], "captures", "c1", "rank-0.json.gz"))  # still being written, or lost
    assert HD.capture_pair(*runs)[0] == 1

"""Input-bound findings (telemetry/analysis/detectors/stall.py, inputs.py): a rank whose input is slow
from the start, and a whole job waiting for input, with readiness and bytes/s, and their causes."""

import numpy as np

from telemetry.analysis.detectors import analyze
from telemetry.demo.simulate import Fault, Scenario, simulate

MB = 1e6


def _with_input(t, slow_rank=None, slow_factor=8.0, workers=2.0, busy=0.3):
    """Input columns on a simulated table: every rank reads 4 MB a step, fetched by ``workers`` workers
    busy ``busy`` of the time; ``slow_rank`` reads at 1/``slow_factor`` of the rate (its fetch takes
    that much longer per byte), its batch never ready; the others' always ready."""
    t = t.sort_values(["rank", "step"]).reset_index(drop=True)
    t["io.read_bytes"] = 4 * MB
    fetch = t["duration_s"] * workers * busy
    if slow_rank is not None:
        fetch = np.where(t["rank"] == slow_rank, fetch * slow_factor, fetch)
    fetch = np.minimum(fetch, t["duration_s"] * workers)  # at most every worker all the time
    t["dev.input_fetch_seconds"] = t.assign(f=fetch).groupby("rank")["f"].cumsum()
    t["dev.input_workers"] = workers
    t["io.input_ready"] = np.where(t["rank"] == slow_rank, 0.0, 1.0) if slow_rank is not None else 1.0
    return t


def test_a_rank_whose_input_is_slow_from_the_start_is_input_bound_with_its_storage_named():
    t = simulate(Scenario(ranks=4, steps=300, faults=(Fault("data_stall", ranks=(2,), delay_s=0.02),)))
    [f] = [f for f in analyze(_with_input(t, slow_rank=2)).findings if f.kind in ("input_bound", "data_stall")]
    assert (f.kind, f.ranks) == ("input_bound", [2])
    assert (
        "rank 2's input is slow" in f.evidence and "already waiting in 0% of the steps (its peers' 100%)" in f.evidence
    )
    d = f.details
    assert d["readiness"] == 0.0 and d["peer_readiness"] == 1.0
    assert d["read_bytes_per_fetch_s"] < 0.5 * d["peer_read_bytes_per_fetch_s"]
    assert f.causes[0]["kind"] == "storage" and "per second of fetching" in f.causes[0]["evidence"]


def test_the_same_reads_at_the_same_speed_name_no_storage_cause():
    t = simulate(Scenario(ranks=4, steps=300, faults=(Fault("data_stall", ranks=(2,), delay_s=0.02),)))
    [f] = [f for f in analyze(_with_input(t, slow_rank=2, slow_factor=1.0)).findings if f.kind == "input_bound"]
    assert "storage" not in [c["kind"] for c in f.causes]


def test_a_wait_that_begins_mid_run_stays_a_data_stall():
    t = simulate(Scenario(ranks=4, steps=300, faults=(Fault("data_stall", ranks=(2,), delay_s=0.02, start=150),)))
    kinds = [(f.kind, f.ranks) for f in analyze(t).findings if f.kind in ("input_bound", "data_stall")]
    assert kinds == [("data_stall", [2])]


def test_an_input_bound_job_with_busy_workers_names_them():
    t = simulate(Scenario(ranks=4, steps=300, data_s=0.02))
    t = _with_input(t, busy=0.97)
    t["io.input_ready"] = 0.0
    [f] = [f for f in analyze(t).findings if f.kind == "input_bound"]
    assert f.ranks == [] and "already waiting in 0% of the steps" in f.evidence and "from storage" in f.evidence
    assert [c["kind"] for c in f.causes] == ["input_workers"]
    assert "2 data-loader workers were fetching 97% of the time" in f.causes[0]["evidence"]


def test_of_windows_only_a_wait_in_the_first_live_window_is_from_the_start():
    """16 windows of 50 steps (a live job read from Prometheus, warm-up the first 2): a rank's wait from
    the first live window is input_bound, one from the second is a data_stall (a window is known only
    whole: its onset may lie anywhere in its 50 steps, past the run's first tenth), where 16 single steps
    call an onset one step past warm-up from the start (a fresh clone's parity test: the store dated a
    stall from step 300 of 900 a data_stall, Prometheus's 16 windows called it input_bound)."""
    for start, steps_kind, windows_kind in ((0, "input_bound", "input_bound"), (3, "input_bound", "data_stall")):
        t = simulate(Scenario(ranks=4, steps=16, faults=(Fault("data_stall", ranks=(2,), delay_s=0.02, start=start),)))
        steps = [(f.kind, f.ranks) for f in analyze(t).findings if f.kind in ("input_bound", "data_stall")]
        t["row_steps"] = 50.0
        found = analyze(t, step_resolution=False, gaps=True).findings
        windows = [(f.kind, f.ranks) for f in found if f.kind in ("input_bound", "data_stall")]
        assert (steps, windows) == ([(steps_kind, [2])], [(windows_kind, [2])]), start

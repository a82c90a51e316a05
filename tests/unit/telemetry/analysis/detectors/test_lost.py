"""Lost ranks (telemetry/analysis/detectors/lost.py: a rank that stopped reporting while its peers
went on) against hangs (every rank alive and stuck), on hand-made heartbeats, and through analyze();
and online detection's input, blocks a rank stopped posting while its peers went on."""

import numpy as np
import pandas as pd

from telemetry.analysis.detectors import analyze
from telemetry.analysis.detectors.lost import LOST_AFTER_S, detect_lost_ranks, lost_rank_of_blocks, missing_streaks
from tests.helpers.heartbeats import NOW, beat, waiting


def killed(rank, signal="SIGKILL", code=-9, **kw):
    """A rank whose launcher saw its process end (rank-N.exit.json) after its last heartbeat."""
    return {**beat(rank, **kw), "exit": {"rank": rank, "exit_code": code, "signal": signal, "time_s": NOW - 29}}


def test_a_killed_rank_is_lost_with_how_it_ended():
    progress = {0: waiting(0), 1: killed(1, time_s=NOW - 30, last_step=39, phase="forward"), 2: waiting(2)}
    [f] = detect_lost_ranks(progress, first_start_s=NOW - 300)
    assert f.kind == "rank_lost" and f.ranks == [1] and f.severity == "critical"
    assert "SIGKILL (exit -9" in f.evidence and "last completed step 39" in f.evidence
    assert "reported for 30.0 s more" in f.evidence
    assert f.first_step == 40 and f.details["after_loss"] == 0.1  # 30 s of the run's 300


def test_a_rank_silent_while_its_peers_go_on_is_lost_without_a_launcher():
    progress = {
        0: beat(0, last_step=80),
        1: beat(1, time_s=NOW - 2 * LOST_AFTER_S, last_step=40),
        2: beat(2, last_step=80),
    }
    [f] = detect_lost_ranks(progress)
    assert f.ranks == [1] and "never shut down" in f.evidence and "as far as step 80" in f.evidence
    assert f.last_step == 80


def test_a_rank_that_did_not_finish_when_its_peers_did_is_lost():
    progress = {0: beat(0, finished=True, open_step=None), 1: beat(1, time_s=NOW - 1.0)}
    assert [f.ranks for f in detect_lost_ranks(progress)] == [[1]]


def test_heartbeats_a_tick_apart_and_a_whole_job_killed_are_not_lost_ranks():
    assert detect_lost_ranks({0: beat(0), 1: beat(1, time_s=NOW - 0.5), 2: beat(2, time_s=NOW - 1.2)}) == []
    clean = {r: beat(r, finished=True, open_step=None) for r in range(3)}
    assert detect_lost_ranks(clean) == []


def test_a_lost_rank_is_not_reported_again_as_a_hang():
    """Its peers wait in the all-reduce for a rank that is gone: one finding, rank_lost."""
    table = pd.DataFrame(
        {
            "rank": [0, 1, 2] * 40,
            "step": sum([[s] * 3 for s in range(40)], []),
            "start_s": sum([[900.0 + s] * 3 for s in range(40)], []),
            "duration_s": 1.0,
        }
    )
    progress = {0: waiting(0), 1: killed(1, time_s=NOW - 30), 2: waiting(2)}
    kinds = [f.kind for f in analyze(table, progress, 3).findings]
    assert kinds == ["rank_lost"]
    alive = {0: waiting(0), 1: beat(1, phase="forward"), 2: waiting(2)}  # rank 1 alive, stuck in forward
    assert [f.kind for f in analyze(table, alive, 3).findings] == ["hang"]


def test_a_restart_is_lost_time_in_the_uptime_and_the_goodput_split():
    """A job restarted 300 s after step 119 (its first session's later steps re-run, last wins)."""
    from telemetry.analysis.report import render
    from telemetry.demo.simulate import Scenario, simulate

    t = simulate(Scenario(ranks=4, steps=300))
    clean = analyze(t).summary
    assert clean["uptime"]["restarts"] == 0 and "lost" not in clean["goodput"]
    t.loc[t["step"] >= 120, "start_s"] += 300.0
    s = analyze(t).summary
    up, g = s["uptime"], s["goodput"]
    assert up["restarts"] == 1 and up["restarted_at_steps"] == [120] and abs(up["lost_s"] - 300.0) < 1.0
    assert abs(up["wall_s"] - (clean["uptime"]["wall_s"] + 300.0)) < 1.0
    assert abs(sum(g.values()) - 1.0) < 0.01 and abs(g["lost"] - 300.0 / up["wall_s"]) < 0.01
    assert "of which 5.0 min lost in 1 restart" in render(analyze(t), "run")


# ---- online: the blocks rank 0 received ---------------------------------------------------------
def test_a_rank_that_stops_posting_while_its_peers_go_on_is_lost_online():
    rows = {b: {0, 1, 2, 3} for b in range(5)}
    rows.update({b: {0, 1, 3} for b in range(5, 9)})  # rank 2 gone from block 5
    assert missing_streaks(rows, 4, at_least=3) == {2: 5}
    assert missing_streaks(rows, 4, at_least=5) == {}  # not yet long enough
    rows[9] = {0, 1, 2, 3}  # it came back: a late rank, not a lost one
    assert missing_streaks(rows, 4, at_least=3) == {}
    never = {b: {0, 1} for b in range(6)}
    assert missing_streaks(never, 3, at_least=3) == {}  # rank 2 never reported: not started, not lost
    f = lost_rank_of_blocks(2, 5, 8, every=10)
    assert (f.kind, f.ranks, f.first_step, f.last_step, f.severity) == ("rank_lost", [2], 50, 89, "critical")
    assert "rank 2 posted no summary for steps 50-89" in f.evidence and f.details == {"missing_blocks": 4}


def test_missing_streaks_read_sets_or_arrays_alike():
    rows = {b: {0, 1, 2, 3} for b in range(5)}
    rows.update({b: {0, 1, 3} for b in range(5, 9)})
    rows[9] = set()  # a block nobody reported counts for nothing
    as_arrays = {b: np.array(sorted(s), dtype=np.int64) for b, s in rows.items()}
    assert missing_streaks(rows, 4, 3) == missing_streaks(as_arrays, 4, 3) == {2: 5}
    assert missing_streaks({}, 4, 3) == {}

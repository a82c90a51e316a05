"""Hang detection (telemetry/analysis/detectors/hang.py) from per-rank progress heartbeats, on
hand-made heartbeats (no job, no clock)."""

import math

import pandas as pd
import pytest

from telemetry.analysis.detectors.hang import MIN_BOUND_S, detect_hang, hang_bound, hang_bound_s
from telemetry.steptable.matrix import from_table
from tests.helpers.heartbeats import NOW, beat, waiting


def test_a_clean_shutdown_is_no_hang():
    # every rank finished between steps, long ago: silence after the end is not a hang
    progress = {
        r: beat(
            r,
            time_s=NOW - 500,
            last_step=99,
            last_step_end_s=NOW - 501,
            open_step=None,
            open_step_since_s=None,
            finished=True,
        )
        for r in range(4)
    }
    progress[0]["time_s"] = NOW
    assert detect_hang(progress, None, world_size=4) == []
    assert detect_hang(progress, None) == []
    assert detect_hang({}, None, world_size=4) == []


def test_the_rank_that_never_reached_the_collective_is_named():
    progress = {0: waiting(0), 1: waiting(1), 2: beat(2, phase="forward"), 3: waiting(3)}
    [f] = detect_hang(progress, None, world_size=4)
    assert f.kind == "hang" and f.severity == "critical"
    assert f.ranks == [2]  # the waiting ranks are victims, not culprits
    assert f.phase == "forward" and f.first_step == 40 and f.last_step == 40
    assert "rank 2 is in step 40 phase forward and never reached the collective" in f.evidence
    assert "rank(s) 0, 1, 3 wait in all_reduce" in f.evidence
    assert "no rank finished a step for 50.0 s (bound 10.0 s)" in f.evidence
    assert f.details["waiting_ranks"] == [0, 1, 3]
    assert f.details["stalled_s"] == pytest.approx(50.0) and f.details["bound_s"] == MIN_BOUND_S


def test_a_rank_that_stopped_reporting_is_named():
    progress = {0: waiting(0), 1: beat(1, time_s=NOW - 30.0, phase="forward"), 2: waiting(2), 3: waiting(3)}
    [f] = detect_hang(progress, None, world_size=4)
    assert f.ranks == [1]
    assert "rank 1 stopped reporting 30.0 s ago" in f.evidence
    assert "rank(s) 0, 2, 3 wait in all_reduce" in f.evidence  # the silent rank is not among them
    assert f.details["waiting_ranks"] == [0, 2, 3]


def test_a_rank_that_never_reported_is_named():
    progress = {0: waiting(0), 1: waiting(1), 2: waiting(2)}
    [f] = detect_hang(progress, None, world_size=4)
    assert f.ranks == [3]
    assert "rank 3 never reported" in f.evidence
    assert "rank(s) 0, 1, 2 wait in all_reduce" in f.evidence
    assert f.phase is None and f.first_step is None  # nothing is known of rank 3


def test_a_finished_job_with_a_rank_missing_is_still_checked():
    progress = {r: beat(r, last_step=99, open_step=None, open_step_since_s=None, finished=True) for r in range(3)}
    [f] = detect_hang(progress, None, world_size=4)
    assert f.ranks == [3] and "rank 3 never reported" in f.evidence


def test_everyone_blocked_alike_names_the_whole_job():
    progress = {r: waiting(r) for r in range(4)}
    [f] = detect_hang(progress, None, world_size=4)
    assert f.ranks == [0, 1, 2, 3]
    assert f.phase == "backward" and f.first_step == 40
    # each rank is said to wait, not to have "never reached the collective" it is blocked in
    assert "never reached" not in f.evidence and "rank 2 waits in all_reduce in step 40" in f.evidence


def test_a_stall_under_the_bound_is_no_finding():
    progress = {0: waiting(0, last_step_end_s=NOW - 9.0), 1: beat(1, phase="forward", last_step_end_s=NOW - 9.0)}
    assert detect_hang(progress, None, world_size=2) == []  # 9 s < the 10 s floor
    [f] = detect_hang(progress, None, world_size=2, bound_s=5.0)  # the user's bound is tighter
    assert f.ranks == [1] and f.details["bound_s"] == 5.0
    stalled = {0: waiting(0), 1: beat(1, phase="forward")}
    assert detect_hang(stalled, None, world_size=2, bound_s=60.0) == []  # 50 s < the user's 60 s


def test_the_newest_step_end_of_any_rank_counts():
    # rank 1 ended a step 2 s ago: the job is progressing, however old rank 0's last step is
    progress = {0: waiting(0, last_step_end_s=NOW - 500), 1: beat(1, phase="forward", last_step_end_s=NOW - 2)}
    assert detect_hang(progress, None, world_size=2) == []


def test_hang_bound_defaults():
    assert hang_bound(0.1, bound_s=2.0) == 2.0  # the user's bound wins, even under the floor
    assert hang_bound(5.0, bound_s=20.0) == 20.0
    assert hang_bound(1.0) == pytest.approx(30.0)  # 30 median steps
    assert hang_bound(0.1) == MIN_BOUND_S == 10.0  # at least 10 s
    assert hang_bound(None) == 10.0
    assert hang_bound(math.nan) == 10.0


def test_hang_bound_from_the_steps_table():
    table = pd.DataFrame(
        {
            "rank": [0, 1] * 5,
            "step": [s for s in range(5) for _ in (0, 1)],
            "start_s": [float(s) for s in range(5) for _ in (0, 1)],
            "duration_s": [1.0] * 10,
        }
    )
    m = from_table(table)
    assert hang_bound_s(m) == pytest.approx(30.0)
    assert hang_bound_s(m, 4.0) == 4.0
    assert hang_bound_s(None) == 10.0
    # the bound from the table is what detect_hang applies: 50 s stalled is within 30 x 2 s
    slow = from_table(table.assign(duration_s=2.0))
    assert detect_hang({0: waiting(0), 1: beat(1, phase="forward")}, slow, world_size=2) == []


@pytest.mark.parametrize("bound", [float("nan"), 0.0, -1.0])
def test_a_bound_that_is_not_a_positive_number_is_refused(bound):
    with pytest.raises(ValueError, match="accepted: a number of seconds above 0"):
        hang_bound(0.1, bound)


def test_the_waiting_ranks_call_is_named_by_its_number_in_its_group():
    """A heartbeat that numbers its call (hooks/groups.py: the same call, the same number on every rank of
    the group) is told with the number: the peers wait in all_reduce #1234, not in some all_reduce."""
    progress = {r: {**waiting(r), "collective_gid": "g1a2b3c4d", "collective_seq": 1234} for r in (0, 1, 3)}
    progress[2] = beat(2, phase="forward")
    [f] = detect_hang(progress, None, world_size=4)
    assert f.ranks == [2]
    assert "rank(s) 0, 1, 3 wait in all_reduce #1234" in f.evidence

"""A run whose ranks all stopped without a clean shutdown (telemetry/store/ended.py): a note, once its
heartbeats are stale, and the same staleness the lost-rank detector uses."""

from telemetry.analysis.detectors.lost import LOST_AFTER_S
from tests.helpers.heartbeats import NOW, beat


def killed(rank, signal="SIGKILL", code=-9, **kw):
    """A rank whose launcher saw its process end (rank-N.exit.json) after its last heartbeat."""
    return {**beat(rank, **kw), "exit": {"rank": rank, "exit_code": code, "signal": signal, "time_s": NOW - 29}}


def test_the_store_and_the_detector_agree_on_when_a_heartbeat_is_stale():
    from telemetry.store.ended import STALE_AFTER_S

    assert STALE_AFTER_S == LOST_AFTER_S


def test_a_job_killed_as_a_whole_is_a_note_once_its_heartbeats_are_stale_never_while_it_runs():
    from telemetry.store.ended import unclean_end

    beats = {0: beat(0, time_s=NOW - 30, last_step=41), 1: beat(1, time_s=NOW - 31, last_step=40)}
    [note] = unclean_end(beats, NOW)
    assert note.startswith("ranks 0-1 ended without a clean shutdown") and "last completed steps 40-41" in note
    assert unclean_end(beats, NOW - 28) == []  # 2 s after the last heartbeat: maybe still running
    assert unclean_end({**beats, 1: beat(1, finished=True, open_step=None)}, NOW) == []
    assert unclean_end({0: killed(0), 1: beats[1]}, NOW) == []  # the launcher saw it: rank_lost says it

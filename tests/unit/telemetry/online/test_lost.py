"""Online detection's lost ranks (telemetry/online.py): a rank that stops posting while its peers go on."""

import numpy as np


def test_a_rank_that_stops_posting_while_its_peers_go_on_is_lost_online():
    from telemetry.online import lost_rank_finding, missing_streaks

    rows = {b: {0, 1, 2, 3} for b in range(5)}
    rows.update({b: {0, 1, 3} for b in range(5, 9)})  # rank 2 gone from block 5
    assert missing_streaks(rows, 4, at_least=3) == {2: 5}
    assert missing_streaks(rows, 4, at_least=5) == {}  # not yet long enough
    rows[9] = {0, 1, 2, 3}  # it came back: a late rank, not a lost one
    assert missing_streaks(rows, 4, at_least=3) == {}
    never = {b: {0, 1} for b in range(6)}
    assert missing_streaks(never, 3, at_least=3) == {}  # rank 2 never reported: not started, not lost
    d = lost_rank_finding(2, 5, 8, every=10)
    assert (d["kind"], d["ranks"], d["first_step"], d["last_step"], d["severity"]) == (
        "rank_lost",
        [2],
        50,
        89,
        "critical",
    )
    assert d["online"] and d["block_steps"] == 10 and "rank 2 posted no summary for steps 50-89" in d["evidence"]


def test_missing_streaks_read_sets_or_arrays_alike():
    from telemetry.online import missing_streaks

    rows = {b: {0, 1, 2, 3} for b in range(5)}
    rows.update({b: {0, 1, 3} for b in range(5, 9)})
    rows[9] = set()  # a block nobody reported counts for nothing
    as_arrays = {b: np.array(sorted(s), dtype=np.int64) for b, s in rows.items()}
    assert missing_streaks(rows, 4, 3) == missing_streaks(as_arrays, 4, 3) == {2: 5}
    assert missing_streaks({}, 4, 3) == {}

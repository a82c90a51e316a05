"""Hand-made progress heartbeats (no job, no clock), as the pipeline writes them: the hang and
lost-rank detectors' tests build their jobs from these."""

NOW = 1000.0  # the newest heartbeat's time
LAST_END = 950.0  # when the last step ended on every rank: stalled for 50 s


def beat(
    rank,
    time_s=NOW,
    last_step=39,
    last_step_end_s=LAST_END,
    open_step=40,
    open_step_since_s=LAST_END,
    phase=None,
    collective=None,
    collective_since_s=None,
    finished=False,
):
    """One rank's heartbeat, as the pipeline writes it (Progress._asdict())."""
    return {
        "rank": rank,
        "time_s": time_s,
        "last_step": last_step,
        "last_step_end_s": last_step_end_s,
        "open_step": open_step,
        "open_step_since_s": open_step_since_s,
        "phase": phase,
        "collective": collective,
        "collective_since_s": collective_since_s,
        "finished": finished,
    }


def waiting(rank, **kw):
    """A rank blocked in the step's gradient all-reduce."""
    return beat(rank, phase="backward", collective="all_reduce", collective_since_s=LAST_END + 1.0, **kw)

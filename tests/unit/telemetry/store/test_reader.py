"""The run store's reader (telemetry/store/reader.py): readable while the job runs, a torn or corrupt
line skipped and said, a format-1 run directory still read."""

import os
import time

import telemetry
from telemetry.analysis.inputs.load import open_input
from telemetry.store import read_run


def train(n, fail_at=None):
    for i in range(n):
        try:
            with telemetry.step(tokens=64, samples=2):
                with telemetry.phase("forward"):
                    time.sleep(0.002)
                    if i == fail_at:
                        raise ValueError("bad batch")
                telemetry.log(loss=1.0 / (i + 1))
        except ValueError:
            pass


def test_readable_while_the_job_runs(run_dir):
    # A flush interval the pipeline thread never reaches here: the test ticks it by hand.
    session = telemetry.init(run_dir=run_dir, job="live", sinks=["store"], flush_interval_s=60.0)
    train(4)
    session.pipeline.tick()
    session.pipeline.settle()  # each sink's worker delivers
    session.pipeline.tick()  # a finished step is held for one tick; no shutdown
    session.pipeline.settle()  # each sink's worker delivers
    t = open_input(run_dir).table
    assert len(t) == 4
    progress = read_run(run_dir).progress[0]
    assert progress["finished"] is False and progress["last_step"] == 3


def live_tail(run_dir, steps):
    """A rank that wrote ``steps`` records to its tail and has not shut down (nor sealed)."""
    session = telemetry.init(run_dir=run_dir, job="tail", sinks=["store"], flush_interval_s=60.0)
    train(steps)
    session.pipeline.tick()
    session.pipeline.settle()  # each sink's worker delivers
    session.pipeline.tick()
    session.pipeline.settle()  # each sink's worker delivers
    [tail] = [n for n in os.listdir(os.path.join(run_dir, "ranks")) if ".tail-" in n]
    return session, os.path.join(run_dir, "ranks", tail)


def test_torn_last_record_is_skipped_with_a_warning(run_dir, caplog):
    session, path = live_tail(run_dir, 5)
    with open(path, "a") as f:
        f.write('[0,0,5,true,0,"AAAAAAAA')  # the process died mid-write
    run = open_input(run_dir)
    assert len(run.table) == 5
    assert any("torn last record" in w for w in run.warnings)
    assert "torn last record" in caplog.text
    telemetry.shutdown()


def test_corrupt_line_in_the_middle_is_skipped_and_reported(run_dir):
    session, path = live_tail(run_dir, 3)
    lines = open(path).read().splitlines(keepends=True)
    lines.insert(2, "not json at all\n")
    open(path, "w").writelines(lines)
    run = open_input(run_dir)
    assert sorted(run.table["step"]) == [0, 1, 2]
    assert any("1 invalid line(s) skipped" in w for w in run.warnings)
    telemetry.shutdown()


def test_a_format_1_run_directory_is_still_read(run_dir):
    """Run directories written before the columnar store (one JSON object per step)."""
    import json

    os.makedirs(os.path.join(run_dir, "ranks"))
    with open(os.path.join(run_dir, "meta.json"), "w") as f:
        json.dump({"job": "old", "world_size": 1, "format": 1}, f)
    with open(os.path.join(run_dir, "ranks", "rank-00000.steps.jsonl"), "w") as f:
        f.write(json.dumps({"session": "s1", "rank": 0, "start_time_s": 1.0}) + "\n")
        for s in range(5):
            f.write(
                json.dumps(
                    {
                        "rank": 0,
                        "step": s,
                        "start_s": 10.0 + s,
                        "duration_s": 0.5,
                        "ok": True,
                        "phases": {"forward": 0.2},
                        "phase_comm": {},
                        "comm_s": 0.0,
                        "ops": {},
                        "tokens": 8,
                        "samples": 1,
                        "scalars": {"loss": None},
                        "nonfinite": {"loss": "nan"},
                        "spans": [["phase", "forward", 10.0 + s, 10.2 + s, True, 0]],
                    }
                )
                + "\n"
            )
        f.write("not json\n")
    run = open_input(run_dir)
    assert list(run.table["step"]) == list(range(5)) and run.table["log.loss"].isna().all()
    assert len(run.records) == 5 and run.records[0]["spans"][0][1] == "forward"
    assert any("line 7 is not a valid step record" in w for w in run.warnings)

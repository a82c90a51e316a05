"""The run store's writer (telemetry/store/writer.py): records round-trip through the store, are sealed
into columns and read back the same; an unwritable directory or a failed seal costs nothing more."""

import os
import time

import pytest

import telemetry
from telemetry.analysis.inputs.load import open_input


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


@pytest.mark.real_clock  # a phase measured against a sleep of known real length
def test_round_trip_through_the_store(run_dir):
    telemetry.init(run_dir=run_dir, job="rt", sinks=["store"])
    train(6, fail_at=3)
    stats = telemetry.shutdown()
    assert stats["records"] == 6 and stats["events_dropped"] == 0

    run = open_input(run_dir)
    assert run.warnings == []
    assert run.meta["job"] == "rt" and run.meta["world_size"] == 1
    assert run.meta["hosts"] == {"0": os.uname().nodename}
    assert run.meta["config"]["sinks"] == ["store"] and "python" in run.meta["versions"]
    assert run.meta["start_time_s"] <= run.meta["end_time_s"]
    t = run.table
    assert list(t["step"]) == list(range(6))
    assert list(t["ok"]) == [True, True, True, False, True, True]
    assert (t["forward_s"] >= 0.002).all() and (t["duration_s"] >= t["forward_s"]).all()
    assert t["tokens"].tolist() == [64] * 6
    assert t.loc[t.step == 1, "log.loss"].item() == pytest.approx(0.5)
    assert pytest.approx(t["start_s"].iloc[0], abs=60) == time.time()
    assert run.progress[0]["finished"] is True and run.progress[0]["last_step"] == 5


def test_records_are_sealed_into_columns_and_read_back_the_same(run_dir, monkeypatch):
    """Step columns and spans in separate Parquet segments; a reader of the steps table never
    touches the spans; records with spans come back as they went in."""
    from telemetry.store import writer

    monkeypatch.setattr(writer, "SEAL_RECORDS", 4)
    telemetry.init(run_dir=run_dir, job="seal", sinks=["store"], flush_interval_s=0.05)
    train(10, fail_at=6)
    time.sleep(0.3)  # a few ticks: two segments sealed while running
    names = sorted(os.listdir(os.path.join(run_dir, "ranks")))
    assert "rank-00000.seg-000001.parquet" in names and "rank-00000.spans-000001.parquet" in names
    telemetry.shutdown()
    names = sorted(os.listdir(os.path.join(run_dir, "ranks")))
    assert not [n for n in names if ".tail-" in n]  # the last records sealed at shutdown, no tail left
    run = open_input(run_dir)
    t = run.table
    assert list(t["step"]) == list(range(10)) and t["ok"].tolist() == [i != 6 for i in range(10)]
    assert t["tokens"].tolist() == [64] * 10 and t.loc[t.step == 3, "log.loss"].item() == pytest.approx(0.25)
    recs = list(run.records)  # every record with its spans, read when asked
    assert [r["step"] for r in recs] == list(range(10))
    [span] = [s for s in recs[2]["spans"] if s[1] == "forward"]
    assert span[0] == "phase" and span[3] - span[2] == pytest.approx(recs[2]["phases"]["forward"], abs=1e-5)
    assert span[2] >= recs[2]["start_s"] - 1e-3


def test_unwritable_run_dir_disables_the_store_with_one_warning(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    telemetry.init(run_dir=str(blocker / "run"), job="ro", sinks=["store"])
    train(3)  # training goes on
    stats = telemetry.shutdown()
    assert stats["records"] == 3 and stats["sinks"] == {}
    assert caplog.text.count("sink 'store' disabled: OSError: cannot write run directory") == 1


def test_a_seal_that_fails_keeps_the_records_in_the_tail_and_says_so_once(run_dir, monkeypatch, caplog):
    """Disk full at a seal: nothing is lost (the tail has every record), one warning, a count."""
    import errno

    from telemetry.store import writer

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer, "SEAL_RECORDS", 3)
    monkeypatch.setattr(writer, "write_segment", full)
    telemetry.init(run_dir=run_dir, job="full", sinks=["store"], flush_interval_s=0.05)
    for _ in range(3):
        train(4)
        time.sleep(0.15)  # a few ticks: a seal tried at each
    stats = telemetry.shutdown()
    store = stats["sinks"]["store"]
    assert store["seal_failures"] >= 2 and store["segments"] == 0
    assert caplog.text.count("a segment could not be written") == 1
    run = open_input(run_dir)
    assert list(run.table["step"]) == list(range(12))  # all of it, from the tail

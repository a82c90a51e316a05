"""Compaction (telemetry/store/compact.py): a rank's sealed segments merged into one file, read back
row for row as before, and a compaction killed at any of its steps loses nothing and reads nothing
twice, before and after the rank's next session tidies up."""

import os
import signal
import subprocess
import sys
import time

import pytest

from telemetry.store import catalogue, compact, layout, seal, segreads
from telemetry.store.aggreads import read_aggregates
from telemetry.store.reader import TailFollower
from telemetry.store.seal import write_segment
from telemetry.store.segreads import read_records, read_step_columns
from tests.helpers.store_runs import make_run, record


def contents(run):
    """What readers read: the step columns, the records with spans, the aggregates over blocks of
    steps but their medians (a block the segments split has the parts' medians weighed, and once they
    are merged the median of its rows), and the warnings."""
    warnings = []
    rows = read_step_columns(run, warnings).to_pylist()
    records = read_records(run, warnings)
    agg = read_aggregates(run, warnings)
    blocks = [
        {k: round(v, 9) if isinstance(v, float) else v for k, v in b.items()}  # sums: in another order
        for b in agg.select([c for c in agg.column_names if not c.endswith("|p50")]).to_pylist()
    ]
    return rows, records, blocks, warnings


def names(run):
    return sorted(os.listdir(os.path.join(run, layout.RANKS_DIR)))


def test_merged_segments_read_back_row_for_row(tmp_path):
    run = make_run(tmp_path)
    before = contents(run)
    path = compact.merge(run, 0, [1, 2, 3, 4, 5])
    assert os.path.basename(path) == "rank-00000.seg-000001-000005.parquet"
    assert names(run) == [
        "rank-00000.agg-000001-000005.arrows",
        "rank-00000.seg-000001-000005.parquet",
        "rank-00000.spans-000001-000005.parquet",
        "rank-00000.tail-000006.jsonl",
    ]
    after = contents(run)
    assert after == before and after[3] == []
    rows = after[0]
    assert [r["step"] for r in rows] == list(range(50)) + list(range(45, 55))  # the order written
    assert [r["duration_s"] for r in rows if r["step"] == 47] == [0.3, 0.5]  # the later wins downstream
    assert after[1][0]["spans"] and after[1][0]["spans"] == before[1][0]["spans"]


def test_a_window_of_steps_still_skips_row_groups_it_does_not_need(tmp_path, monkeypatch):
    monkeypatch.setattr(compact, "ROW_GROUP", 10)
    run = make_run(tmp_path)
    compact.merge(run, 0, [1, 2, 3, 4, 5])
    warnings = []
    rows = read_step_columns(run, warnings, (12, 18)).to_pylist()
    assert [r["step"] for r in rows] == list(range(12, 19)) and warnings == []
    import pyarrow.parquet as pq

    assert pq.read_metadata(layout.compacted_path(run, 0, 1, 5)).num_row_groups == 6


KILL = """
import os, signal, sys
from telemetry.store import compact
stage = sys.argv[2]
def stop(name):
    if name == stage:
        os.kill(os.getpid(), signal.SIGKILL)
compact._stage = stop
compact.merge(sys.argv[1], 0, [1, 2, 3, 4, 5])
"""


@pytest.mark.parametrize("stage", compact.STAGES)
def test_a_compaction_killed_at_any_step_loses_nothing_and_reads_nothing_twice(tmp_path, stage):
    run = make_run(tmp_path)
    before = contents(run)
    proc = subprocess.run([sys.executable, "-c", KILL, run, stage], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr

    left = names(run)
    if stage in ("read",):
        assert left == names(make_run(tmp_path / "fresh"))  # nothing written yet
    if stage in ("spans written", "steps written"):
        assert any(".tmp" in n for n in left)  # a temporary, never read
    assert contents(run) == before  # as the job's own readers see it, before anyone tidies

    # the rank's next session (or `telemetry compact`) removes what was left and merges again
    compact.compact_rank(run, 0)
    assert contents(run) == before
    assert catalogue.leftovers(run, 0) == []
    assert [n for n in names(run) if ".seg-" in n] == ["rank-00000.seg-000001-000005.parquet"]


def test_a_reader_that_listed_files_a_compaction_then_deleted_lists_again(tmp_path, monkeypatch):
    run = make_run(tmp_path)
    before = contents(run)
    real = segreads.footer
    calls = []

    def footer_then_compact(path):
        calls.append(path)
        if len(calls) == 1:  # the reader has listed the five segments: they are merged and gone now
            compact.merge(run, 0, [1, 2, 3, 4, 5])
        return real(path)

    monkeypatch.setattr(segreads, "footer", footer_then_compact)
    assert contents(run) == before  # no warning, no row lost or read twice
    assert "rank-00000.seg-000001-000005.parquet" in {os.path.basename(c) for c in calls}  # it listed again


def test_the_live_follower_returns_each_record_once_across_a_compaction(tmp_path):
    run = str(tmp_path)
    os.makedirs(os.path.join(run, layout.RANKS_DIR))
    follower = TailFollower(run, 0)
    seen = []
    for seq in range(1, 4):
        write_segment(run, 0, seq, [record(s) for s in range((seq - 1) * 10, seq * 10)])
    seen += follower.read_new()
    for seq in range(4, 6):
        write_segment(run, 0, seq, [record(s) for s in range((seq - 1) * 10, seq * 10)])
    compact.merge(run, 0, [1, 2, 3, 4, 5])
    seen += follower.read_new()
    write_segment(run, 0, 6, [record(s) for s in range(50, 60)])
    seen += follower.read_new()
    assert [r["step"] for r in seen] == list(range(60))


def test_what_a_stopped_compaction_left_is_superseded_and_tidied(tmp_path):
    run = make_run(tmp_path)
    before = contents(run)
    compact.merge(run, 0, [1, 2])
    compact.merge(run, 0, [3, 4])
    # a larger compacted segment over both (its merged files not deleted yet), and compacted spans
    # whose step columns never came
    import pyarrow as pa
    import pyarrow.parquet as pq

    from telemetry.store import aggregates

    for kind in ("spans", "seg"):
        both = pa.concat_tables([pq.read_table(layout.compacted_path(run, 0, a, b, kind)) for a, b in ((1, 2), (3, 4))])
        seal.write_parquet(layout.compacted_path(run, 0, 1, 4, kind), both, False)
    aggregates.write_file(
        layout.compacted_path(run, 0, 1, 4, "agg"),
        aggregates.block_aggregates(pq.read_table(layout.compacted_path(run, 0, 1, 4))),
        False,
    )
    open(layout.compacted_path(run, 0, 5, 6, "spans"), "wb").close()
    leftover = {os.path.basename(p) for p in catalogue.leftovers(run, 0)}
    assert leftover == {
        "rank-00000.seg-000001-000002.parquet",
        "rank-00000.spans-000001-000002.parquet",
        "rank-00000.agg-000001-000002.arrows",
        "rank-00000.seg-000003-000004.parquet",
        "rank-00000.spans-000003-000004.parquet",
        "rank-00000.agg-000003-000004.arrows",
        "rank-00000.spans-000005-000006.parquet",
    }
    files = catalogue.rank_files(run)[0]
    assert sorted(files) == [4, 5, 6] and files[4]["first"] == "1"
    assert contents(run) == before
    compact.tidy(run, 0)
    assert catalogue.leftovers(run, 0) == []
    assert contents(run) == before


def test_groups_are_runs_of_sealed_segments_between_compacted_ones(tmp_path):
    run = make_run(tmp_path)
    compact.merge(run, 0, [2, 3])
    for seq in range(7, 12):
        write_segment(run, 0, seq, [record(1000 + seq)])
    # 1 | [2-3] | 4 5 | tail 6 | 7 8 9 10 11
    assert compact.groups(run, 0) == [[4, 5], [7, 8, 9, 10, 11]]
    assert compact.groups(run, 0, size=2) == [[4, 5], [7, 8], [9, 10]]
    assert compact.groups(run, 0, size=16, least=1) == [[1], [4, 5], [7, 8, 9, 10, 11]]
    with pytest.raises(ValueError, match="seqs"):
        compact.merge(run, 0, [5])


def test_the_writer_compacts_while_the_job_runs_and_at_shutdown(run_dir, monkeypatch):
    import telemetry
    from telemetry.analysis.inputs.load import open_input
    from telemetry.store import writer

    monkeypatch.setattr(writer, "SEAL_RECORDS", 2)
    monkeypatch.setattr(compact, "COMPACT_SEGMENTS", 4)
    telemetry.init(run_dir=run_dir, job="compact", sinks=["store"], flush_interval_s=0.01)
    for i in range(21):  # two steps at a time, each pair written (and sealed) before the next
        for _ in range(2):
            with telemetry.step():
                with telemetry.phase("forward"):
                    pass
        deadline = time.monotonic() + 60
        while telemetry.stats()["sinks"]["store"]["lines"] < 2 * i + 2 and time.monotonic() < deadline:
            time.sleep(0.005)
    stats = telemetry.shutdown()
    store = stats["sinks"]["store"]
    assert store["compactions"] >= 2 and store["compact_failures"] == 0
    segs = [n for n in names(run_dir) if ".seg-" in n]
    # 21 segments of 2 records -> 5 compacted of 4, and the last one alone (a group of one stays)
    assert store["segments"] == 21 and store["compactions"] == 5
    assert segs[-1] == "rank-00000.seg-000021.parquet" and segs[0] == "rank-00000.seg-000001-000004.parquet"
    assert len(segs) == 6
    run = open_input(run_dir)
    assert run.table["step"].tolist() == list(range(42)) and run.warnings == []


def test_telemetry_compact_merges_a_finished_run_and_analyze_says_the_same(tmp_path, capsys):
    from telemetry.cli import main

    run = str(tmp_path / "sim")
    assert (
        main(
            [
                "simulate",
                "--ranks",
                "4",
                "--steps",
                "5000",
                "--out",
                run,
                "--inject",
                "straggler:rank=2,phase=forward,factor=1.5",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["analyze", run, "--json"]) == 0
    before = capsys.readouterr().out
    assert len([n for n in names(run) if ".seg-" in n]) == 4 * 3  # 2,048 steps each

    assert main(["compact", run]) == 0
    said = capsys.readouterr().out
    assert "24 segment files -> 8 (4 compacted segments written)" in said  # step columns and aggregates
    assert [n for n in names(run) if ".seg-" in n] == [f"rank-0000{r}.seg-000001-000003.parquet" for r in range(4)]
    assert main(["analyze", run, "--json"]) == 0
    assert capsys.readouterr().out == before

    assert main(["compact", str(tmp_path)]) == 2
    assert "is not a run directory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["compact", run, "--segments", "1"])
    assert "accepted: a whole number, 2 or more" in capsys.readouterr().err

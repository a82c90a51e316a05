"""A long run's analysis kept in its directory by ``telemetry compact`` (telemetry/analysis/longrun/kept.py):
read instead of every rank's files while the run is unchanged, the same JSON to the byte; a run
written to since, a damaged summary or other settings are analyzed from the files as before."""

import contextlib
import io
import json
import os

import pytest

from telemetry.analysis.longrun import coarse
from telemetry.analysis.longrun import kept as runsummary
from telemetry.analysis.longrun.blockrun import keep
from telemetry.cli import main
from telemetry.demo.simrun import write_simulated_run
from telemetry.demo.simulate import Fault, Scenario

KEPT = "kept by telemetry compact"


@pytest.fixture
def long_run(tmp_path, monkeypatch):
    monkeypatch.setattr(coarse, "COARSE_ROWS", 10_000)  # 32 x 3,000 = 96,000 rows: a long run here
    out = str(tmp_path / "long")
    fault = Fault("straggler", ranks=(9,), phase="forward", factor=1.5, start=1000)
    write_simulated_run(Scenario(name="long", ranks=32, steps=3000, seed=3, faults=(fault,)), out)
    return out


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(args))
    return rc, out.getvalue(), err.getvalue()


def test_compact_keeps_the_analysis_and_analyze_prints_the_same_json_from_it(long_run):
    rc, before, err = cli("analyze", long_run, "--json")
    assert rc == 0 and KEPT not in err
    rc, out, _ = cli("compact", long_run)
    assert rc == 0 and "kept its analysis from 1,504 blocks" in out, out
    rc, out, _ = cli("compact", long_run)  # again: nothing to merge, nothing to analyze again
    assert rc == 0 and "its analysis already kept" in out and "(the run unchanged since)" in out, out
    assert sorted(os.listdir(os.path.join(long_run, "summary"))) == ["analysis.json", "blocks.parquet"]
    rc, after, err = cli("analyze", long_run, "--json")
    assert rc == 0 and KEPT in err, err
    assert after == before  # to the byte
    doc = json.loads(after)
    assert any(f["kind"] == "straggler" and f["ranks"] == [9] for f in doc["findings"]), doc["findings"]
    # the report reads it too, and --raw still reads every row
    rc, _, err = cli("analyze", long_run)
    assert rc == 0 and KEPT in err
    rc, raw, err = cli("analyze", long_run, "--json", "--raw")
    assert KEPT not in err and "coarse" not in json.loads(raw)["summary"]


def test_the_dashboard_draws_the_kept_analysis(long_run, monkeypatch):
    pytest.importorskip("streamlit")
    from telemetry.dashboards import source as S
    from tests.helpers.apptest import run_app

    fresh = S.load_view(long_run)
    assert cli("compact", long_run)[0] == 0
    kept = S.load_view(long_run)
    assert kept.blocks.kept and KEPT in kept.blocks.note and not fresh.blocks.kept
    assert [f.to_dict() for f in kept.analysis.findings] == [f.to_dict() for f in fresh.analysis.findings]
    assert kept.analysis.summary == fresh.analysis.summary
    assert kept.run.table.equals(fresh.run.table)  # the blocks drawn
    assert kept.matrix.n_ranks == 32 and kept.matrix.n_steps == fresh.matrix.n_steps
    monkeypatch.setattr(S, "ZOOM_ROWS", 32 * 200)  # the whole run is drawn from its blocks, not zoomed into
    at = run_app(monkeypatch, long_run)
    said = " ".join(c.value for c in at.caption)
    assert "drawn from medians over blocks of 64 steps, its analysis as `telemetry compact` kept it" in said, said
    assert any("straggler - rank 9 - phase forward" in e.label for e in at.expander)


def test_a_run_written_to_since_is_analyzed_from_its_files(long_run):
    assert cli("compact", long_run)[0] == 0
    progress = os.path.join(long_run, "ranks", "rank-00003.progress.json")
    with open(progress, "a", encoding="utf-8") as f:  # a heartbeat after the summary: the run is not the same
        f.write(" ")
    assert runsummary.read(long_run) is None
    rc, out, err = cli("analyze", long_run, "--json")
    assert rc == 0 and KEPT not in err and json.loads(out)["findings"]
    # compacted again: kept again, of the run as it is now
    rc, out, _ = cli("compact", long_run)
    assert "kept its analysis" in out and runsummary.read(long_run).doc is not None


def test_a_damaged_summary_is_the_files_read_again(long_run):
    rc, before, _ = cli("analyze", long_run, "--json")
    assert cli("compact", long_run)[0] == 0
    blocks = os.path.join(long_run, "summary", "blocks.parquet")
    with open(blocks, "r+b") as f:  # cut in half: no footer
        f.truncate(os.path.getsize(blocks) // 2)
    rc, out, err = cli("analyze", long_run, "--json")
    assert rc == 0 and KEPT not in err and out == before
    assert cli("compact", long_run)[0] == 0
    with open(os.path.join(long_run, "summary", "analysis.json"), "w", encoding="utf-8") as f:
        f.write('{"format": 1, "fingerp')  # cut: the kept blocks are analyzed afresh
    rc, out, err = cli("analyze", long_run, "--json")
    assert rc == 0 and KEPT not in err and out == before
    assert cli("compact", long_run)[0] == 0
    path = os.path.join(long_run, "summary", "analysis.json")
    doc = json.load(open(path, encoding="utf-8"))
    doc["findings"][0]["added_by_a_later_version"] = 1  # whole JSON that is no kept analysis of this version
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    rc, out, err = cli("analyze", long_run, "--json")
    assert rc == 0 and KEPT not in err and out == before
    rc, out, _ = cli("compact", long_run)  # not taken for a current summary: kept anew
    assert "kept its analysis from 1,504 blocks" in out and cli("analyze", long_run, "--json")[1] == before


def test_other_settings_analyze_the_kept_blocks_afresh(long_run):
    rc, want, _ = cli("analyze", long_run, "--json", "--busy-bound", "0.7")
    assert cli("compact", long_run)[0] == 0
    rc, got, err = cli("analyze", long_run, "--json", "--busy-bound", "0.7")
    assert rc == 0 and KEPT not in err and got == want


def test_no_summary_for_a_short_run_or_a_live_one(tmp_path, monkeypatch, long_run):
    short = str(tmp_path / "short")
    write_simulated_run(Scenario(name="short", ranks=4, steps=300, seed=3), short)
    rc, out, _ = cli("compact", short)
    assert (
        rc == 0
        and "no summary kept: 10,000 rows or fewer" in out
        and not os.path.exists(os.path.join(short, "summary"))
    )
    tail = os.path.join(long_run, "ranks", "rank-00000.tail-000099.arrows")
    open(tail, "wb").close()  # a rank's live tail: a run being written
    assert keep(long_run).startswith("no summary kept: a rank's live tail is there")
    assert not os.path.exists(os.path.join(long_run, "summary"))

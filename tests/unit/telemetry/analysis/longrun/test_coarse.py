"""A long run analyzed from the store's coarse level (telemetry/analysis/longrun/coarse.py): the blocks find
what the rows find (kind, ranks, phase, severity, what-if), to a block's steps; a finding with ranks
is measured again on raw rows; ``--raw`` and short runs read every row as before."""

import json

import pytest

from telemetry.analysis import analyze_run
from telemetry.analysis.longrun import coarse
from telemetry.demo.simrun import write_simulated_run
from telemetry.demo.simulate import Fault, Scenario


def run_of(tmp_path, name, *faults, steps=3000):
    out = str(tmp_path / name)
    write_simulated_run(Scenario(name=name, ranks=32, steps=steps, seed=3, faults=tuple(faults)), out)
    return out


def key(f):
    return (f.kind, f.severity, tuple(f.ranks), f.phase)


def both(path, monkeypatch):
    monkeypatch.setattr(coarse, "COARSE_ROWS", 10**12)
    raw = analyze_run(path)
    assert raw.note is None
    monkeypatch.setattr(coarse, "COARSE_ROWS", 10_000)  # 32 x 3,000 = 96,000 rows: read from blocks
    blocks = analyze_run(path)
    assert "analyzed from the medians over blocks of 64 steps" in (blocks.note or "")
    return raw, blocks


@pytest.mark.parametrize(
    "fault",
    [
        Fault("straggler", ranks=(9,), phase="forward", factor=1.5, start=1000),
        Fault("regression", phase="backward", factor=1.15, start=1800),
        Fault("data_stall", ranks=(4,), delay_s=0.03),
    ],
    ids=lambda f: f.kind,
)
def test_the_blocks_find_what_the_rows_find(tmp_path, monkeypatch, fault):
    raw, blocks = both(run_of(tmp_path, fault.kind, fault), monkeypatch)
    want = [f for f in raw.findings if f.severity != "info"]
    got = [f for f in blocks.findings if f.severity != "info"]
    assert want and [key(f) for f in got] == [key(f) for f in want]
    for w, g in zip(want, got):
        assert g.details["block_steps"] == 64
        assert g.first_step // 64 * 64 <= w.first_step < g.first_step + 64 or w.first_step <= 64  # to a block
        assert g.last_step == w.last_step == 2999
        assert g.slowdown == pytest.approx(w.slowdown, rel=0.25, abs=0.005)
        if g.ranks:  # measured again on the raw rows of a stretch of its steps
            a, b = g.details["measured_on"]
            assert g.first_step <= a <= b <= g.last_step and "what-if measured on the raw rows" in g.evidence
    assert blocks.summary["steps"] == 3000 and blocks.summary["coarse"]["block_steps"] == 64


def test_a_healthy_long_run_is_healthy_from_its_blocks_too(tmp_path, monkeypatch):
    raw, blocks = both(run_of(tmp_path, "clean"), monkeypatch)
    assert [f for f in raw.findings if f.severity != "info"] == []
    assert [f for f in blocks.findings if f.severity != "info"] == []


def test_raw_steps_and_runs_without_aggregates_read_every_row(tmp_path, monkeypatch, capsys):
    from telemetry.cli import main

    path = run_of(tmp_path, "r", Fault("straggler", ranks=(9,), phase="forward", factor=1.5))
    monkeypatch.setattr(coarse, "COARSE_ROWS", 10_000)
    assert main(["analyze", path, "--json"]) == 0
    out = capsys.readouterr()
    assert "from the medians over blocks" in out.err and "coarse" in json.loads(out.out)["summary"]
    for extra in (["--raw"], ["--steps", "0:2999"], ["--last", "3000"]):
        assert main(["analyze", path, "--json", *extra]) == 0
        out = capsys.readouterr()
        assert "coarse" not in json.loads(out.out)["summary"] and "blocks" not in out.err
    import glob
    import os

    for f in glob.glob(os.path.join(path, "ranks", "*.agg-*")):
        os.remove(f)  # written before aggregates existed: its rows, as before
    assert main(["analyze", path, "--json"]) == 0
    assert "coarse" not in json.loads(capsys.readouterr().out)["summary"]


def test_the_blocks_summary_agrees_with_its_findings_and_with_the_rows(tmp_path, monkeypatch):
    """Once a finding is measured again on raw rows, the summary says what the findings say (count,
    highest severity, the estimated slowdown), and the run's time is counted per step, not per block
    (a 10^8 run's summary said "critical", 8.8% and 98% of the time between steps beside one warning
    straggler of 1.3%)."""
    fault = Fault("straggler", ranks=(9,), phase="forward", factor=1.15, start=0)
    raw, blocks = both(run_of(tmp_path, "small", fault), monkeypatch)
    s, r = blocks.summary, raw.summary
    assert s["coarse"]["measured_again"], s["coarse"]
    assert s["findings"] == len(blocks.findings)
    assert s["severity"] == max((f.severity for f in blocks.findings), key=("info", "warning", "critical").index)
    ranked = [f for f in blocks.findings if f.ranks and f.severity != "info"]
    assert ranked and s["slowdown"] == pytest.approx(r["slowdown"], abs=0.01)
    assert s["uptime"]["wall_s"] == pytest.approx(r["uptime"]["wall_s"], rel=0.05)
    assert s["goodput"]["compute"] == pytest.approx(r["goodput"]["compute"], abs=0.05)
    assert s["goodput"].get("between_steps", 0.0) < 0.05
    # the busy split's wait for the findings' culprits is the rows' what-if, not the blocks'
    idle, want = s["utilization"]["idle"], r["utilization"]["idle"]
    assert idle["findings"] == pytest.approx(want["findings"], abs=0.005)
    assert idle["waiting_for_ranks"] == pytest.approx(want["waiting_for_ranks"], abs=0.01)

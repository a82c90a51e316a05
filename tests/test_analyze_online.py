"""`telemetry analyze RUN_DIR` shows what online detection said during the run, beside the offline
findings, and says where they disagree."""

import json

import telemetry
from telemetry.cli import main as cli


def run_with_online_findings(run_dir, findings):
    telemetry.init(run_dir=run_dir, job="on", sinks=["store"])
    for _ in range(30):
        with telemetry.step():
            with telemetry.phase("forward"):
                pass
    telemetry.shutdown()
    with open(f"{run_dir}/findings.jsonl", "w") as f:
        for d in findings:
            f.write(json.dumps(d) + "\n")
        f.write("{not json\n")


ONLINE = {
    "kind": "straggler",
    "ranks": [0],
    "phase": "forward",
    "first_step": 10,
    "last_step": 20,
    "severity": "warning",
    "slowdown": 0.02,
    "evidence": "rank 0 ...",
    "block_steps": 10,
    "online": True,
}


def test_online_findings_are_shown_marked_and_checked_against_the_offline_analysis(run_dir, capsys):
    run_with_online_findings(run_dir, [ONLINE])
    assert cli(["analyze", run_dir]) == 0
    out = capsys.readouterr().out
    assert "Online detection during the run (1 finding, marked [online])" in out
    assert (
        "[online] [warning] straggler  rank 0  phase forward  steps 10-20, blocks of 10 steps: NOT found offline" in out
    )
    assert "did not hold over the" in out
    assert "findings.jsonl: 1 unreadable line(s) skipped" in out

    assert cli(["analyze", run_dir, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    [online] = doc["summary"]["online_findings"]
    assert online["confirmed_offline"] is False and online["kind"] == "straggler"
    # offline: no straggler; a loop of empty steps computes nothing, so its one finding is that
    assert [f["kind"] for f in doc["findings"]] == ["low_utilization"]


def test_a_run_without_online_findings_has_no_such_section(run_dir, capsys):
    run_with_online_findings(run_dir, [])
    assert cli(["analyze", run_dir, "--json"]) == 0
    assert "online_findings" not in json.loads(capsys.readouterr().out)["summary"]


def test_a_multi_rank_run_without_collectives_is_called_out(tmp_path, capsys):
    import pandas as pd

    path = tmp_path / "t.csv"
    pd.DataFrame(
        {
            "rank": [0, 1, 0, 1],
            "step": [0, 0, 1, 1],
            "start_s": [0.0, 0.0, 1.0, 1.0],
            "duration_s": [1.0] * 4,
            "forward_s": [0.5] * 4,
        }
    ).to_csv(path, index=False)
    assert cli(["analyze", str(path)]) == 0
    assert "2 ranks but no time in collectives was recorded" in capsys.readouterr().out
    with_comm = tmp_path / "c.csv"
    pd.DataFrame(
        {"rank": [0, 1], "step": [0, 0], "start_s": [0.0, 0.0], "duration_s": [1.0, 1.0], "comm_s": [0.1, 0.2]}
    ).to_csv(with_comm, index=False)
    assert cli(["analyze", str(with_comm)]) == 0
    assert "no time in collectives" not in capsys.readouterr().out

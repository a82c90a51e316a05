"""`telemetry analyze` (telemetry/cli.py): steps tables from anyone, bad paths, and what online
detection said during the run shown beside the offline findings."""

import json

import pytest

import telemetry
from telemetry.cli import main as cli
from telemetry.demo.simulate import Fault, Scenario, simulate


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


def test_analyze_json_on_a_csv_table(tmp_path, capsys):
    path = tmp_path / "steps.csv"
    sc = Scenario(ranks=8, steps=200, faults=(Fault("straggler", ranks=(3,), phase="backward", factor=1.5),))
    simulate(sc).to_csv(path, index=False)
    assert cli(["analyze", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    [f] = [f for f in doc["findings"] if f["kind"] != "low_utilization"]  # the job waits for rank 3: busy < 80%
    assert set(f) >= {"kind", "ranks", "phase", "first_step", "last_step", "severity", "slowdown", "evidence"}
    assert (f["kind"], f["ranks"], f["phase"]) == ("straggler", [3], "backward")
    assert doc["summary"]["ranks"] == 8 and 0 < doc["summary"]["slowdown"] < 1
    assert cli(["analyze", str(path), "--fail-on", "warning"]) == 3


def test_analyze_readable_report_on_parquet(tmp_path, capsys):
    path = tmp_path / "steps.parquet"
    simulate(Scenario(ranks=4, steps=100)).to_parquet(path)
    assert cli(["analyze", str(path)]) == 0
    out = capsys.readouterr().out
    assert "4 ranks, 100 steps" in out and "Findings: none" in out
    assert "forward" in out and "backward" in out and "compute" in out


@pytest.mark.parametrize(
    "arg, message",
    [
        (
            "missing.csv",
            "does not exist; accepted: a run directory, a steps table or per-operation trace (.csv, .parquet)",
        ),
        ("notes.txt", "unknown file type"),
    ],
)
def test_analyze_bad_path(tmp_path, capsys, arg, message):
    (tmp_path / "notes.txt").write_text("hello")
    assert cli(["analyze", str(tmp_path / arg)]) == 2
    assert message in capsys.readouterr().err


def test_analyze_against_a_base_run(tmp_path, capsys):
    base, run = tmp_path / "base.csv", tmp_path / "run.parquet"
    simulate(Scenario(ranks=4, steps=200, gpu_signals=True)).to_csv(base, index=False)
    simulate(Scenario(ranks=4, steps=200, seed=1, gpu_signals=True, gap_s=0.008)).to_parquet(run)
    assert cli(["analyze", str(run), "--base", str(base), "--json", "--fail-on", "warning"]) == 3
    doc = json.loads(capsys.readouterr().out)
    [f] = [f for f in doc["findings"] if f["kind"] == "utilization_regression"]
    assert f["severity"] == "warning" and f["details"]["base"] == f"the base run {base}"
    assert f["details"]["grew"] == "between_steps" and f"against the base run {base}" in f["evidence"]
    assert cli(["analyze", str(run)]) == 0  # alone, the run is a healthy job at about 70% busy: info
    assert "utilization_regression" not in capsys.readouterr().out
    assert cli(["analyze", str(run), "--base", str(tmp_path / "missing.csv")]) == 2
    assert "missing.csv" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["--prometheus", "http://127.0.0.1:9", "runs/x"],
            "PATH is for a run directory or a table; accepted with --prometheus: --job",
        ),
        (["--prometheus", "http://127.0.0.1:9", "--steps", "1:5"], "--steps is for a run directory or a table"),
        (["--prometheus", "127.0.0.1:9090"], "accepted: an http:// or https:// URL"),
        (["--prometheus", "http://127.0.0.1:9", "--last", "30"], "accepted: a Prometheus duration such as 30m"),
        (["runs/x", "--job", "a"], "--job goes with --prometheus URL"),
        (["runs/x", "--last", "30m"], "accepted: a number of steps, 1 or more (a duration goes with --prometheus)"),
        ([], "give a run directory, a steps table or a trace directory, or --prometheus URL"),
    ],
)
def test_analyze_prometheus_arguments_are_checked_with_a_sentence(capsys, args, message):
    assert cli(["analyze", *args]) == 2
    assert message in capsys.readouterr().err


def test_analyze_prometheus_says_when_the_server_does_not_answer(capsys):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert cli(["analyze", "--prometheus", f"http://127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("telemetry analyze: ") and "Traceback" not in err and f"127.0.0.1:{port}" in err, err

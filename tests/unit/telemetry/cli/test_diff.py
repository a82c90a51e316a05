"""`telemetry diff BASE NEW` (telemetry/cli.py): its JSON, exit codes and refused arguments."""

import json

import pytest

from telemetry.cli import main as cli
from telemetry.demo.simulate import Fault, Scenario, simulate


def test_cli_diff_json_and_exit_code(tmp_path, capsys):
    b, n = tmp_path / "base.csv", tmp_path / "new.parquet"
    simulate(Scenario(ranks=4, steps=200, seed=3)).to_csv(b, index=False)
    simulate(Scenario(ranks=4, steps=200, seed=4, faults=(Fault("slow_comm", factor=3.0),))).to_parquet(n)
    assert cli(["diff", str(b), str(n), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert any(f["kind"] == "regression" and f["details"]["series"] == "comm" for f in doc["findings"])
    assert cli(["diff", str(b), str(n), "--fail-on", "warning"]) == 3
    out = capsys.readouterr().out
    assert "comm" in out and "regression" in out
    assert cli(["diff", str(b), str(tmp_path / "nope.csv")]) == 2


@pytest.mark.parametrize("effect", ["0", "1", "5", "-0.1"])
def test_min_effect_outside_its_stated_range_is_refused(tmp_path, capsys, effect):
    b = tmp_path / "base.csv"
    simulate(Scenario(ranks=2, steps=50)).to_csv(b, index=False)
    assert cli(["diff", str(b), str(b), "--min-effect", effect]) == 2
    assert "accepted: a fraction above 0 and below 1" in capsys.readouterr().err

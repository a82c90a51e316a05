"""``--steps A:B`` means the same to every command that takes it: one parser, one message."""

import pytest

from telemetry.analysis_options import parse_steps
from telemetry.cli import main
from telemetry.demo.simulate import Scenario, simulate


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("steps") / "run.parquet")
    simulate(Scenario(ranks=2, steps=30)).to_parquet(path, index=False)
    return path


@pytest.mark.parametrize(
    "text, said",
    [
        ("12", "accepted: A:B, A: or :B"),
        ("-5:3", "step numbers are 0 or more"),
        ("9:3", "the end is before the start"),
        ("a:b", "not step numbers"),
    ],
)
def test_every_command_refuses_the_same_range_with_the_same_sentence(table, tmp_path, capsys, text, said):
    commands = {
        "analyze": ["analyze", table, f"--steps={text}"],
        "diff": ["diff", table, table, f"--steps={text}"],
        "export": ["export", table, "--to", str(tmp_path / "t.json"), f"--steps={text}"],
    }
    messages = {}
    for name, argv in commands.items():
        assert main(argv) == 2, name
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"telemetry {name}: --steps {text!r}") and said in err, err
        messages[name] = err.split(": ", 1)[1]
    assert len(set(messages.values())) == 1, messages


def test_a_range_is_inclusive_and_either_side_may_be_empty():
    assert parse_steps("3:5") == (3, 5)
    assert parse_steps(":5") == (0, 5)
    assert parse_steps("5:")[0] == 5 and parse_steps("5:")[1] > 10**15
    assert parse_steps("7:7") == (7, 7)


def test_diff_compares_only_the_steps_asked_for(table, capsys):
    assert main(["diff", table, table, "--steps", "10:19", "--json"]) == 0
    assert '"findings": []' in capsys.readouterr().out

"""The `telemetry` command itself (the package telemetry/cli/: main in __init__.py, the parser in parser.py):
--version, and help that says what analyze finds and what the exit codes mean."""

import pytest

import telemetry
from telemetry.cli import main as cli


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        cli(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"telemetry {telemetry.__version__}"


def test_help_says_what_analyze_finds_and_what_exit_codes_mean(capsys):
    with pytest.raises(SystemExit):
        cli(["analyze", "--help"])
    out = capsys.readouterr().out
    for word in ("stragglers", "data stalls", "regressions", "hangs", "exit codes", "4    demo: the job hung"):
        assert word in out, word

"""A plug-in export that cannot write a run says why in one sentence (exit 2), never a traceback."""

import pytest

from telemetry.analysis import exports
from telemetry.cli import main
from telemetry.demo.simrun import write_simulated_run
from telemetry.demo.simulate import Scenario


class Refusing(exports.Export):
    suffixes = (".refused",)

    def write(self, run, path, first_step=None, last_step=None):
        raise exports.ExportError(
            f"{path}: this format holds at most 1 rank; the run has {run.table['rank'].nunique()}"
        )


@pytest.fixture
def run_dir(tmp_path):
    path = str(tmp_path / "run")
    write_simulated_run(Scenario(ranks=2, steps=20), path)
    return path


def test_an_export_error_is_a_sentence_and_exit_2(run_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(exports, "export_for", lambda path: Refusing() if path.endswith(".refused") else None)
    out = str(tmp_path / "x.refused")
    assert main(["export", run_dir, "--to", out]) == 2
    err = capsys.readouterr().err
    assert err == f"telemetry export: {out}: this format holds at most 1 rank; the run has 2\n"

"""A cause rule that fails is counted and said once; the finding stays, without causes, and the user
reads that its causes could not be worked out (never a silent "no causes")."""

import logging

from telemetry.analysis.detectors import analyze, causes
from telemetry.analysis.report import render
from telemetry.demo.simulate import Fault, Scenario, simulate


def _straggler_table():
    return simulate(Scenario(ranks=8, steps=200, faults=(Fault("straggler", ranks=(3,), phase="forward", factor=1.5),)))


def test_a_failing_cause_rule_is_counted_said_once_and_shown(monkeypatch, caplog):
    def broken(*_):
        raise ZeroDivisionError("planted")

    monkeypatch.setattr(causes, "_causes", broken)
    with caplog.at_level(logging.WARNING, logger="telemetry"):
        result = analyze(_straggler_table())
    assert result.findings and all(f.causes == [] for f in result.findings)
    failed = result.summary["cause_failures"]
    assert failed["findings"] == len(result.findings)
    assert "ZeroDivisionError: planted" in failed["first"]
    said = [r for r in caplog.records if "could not be worked out" in r.getMessage()]
    assert len(said) == 1
    assert "could not be worked out" in render(result, "run")


def test_no_failure_leaves_the_summary_as_it_was():
    result = analyze(_straggler_table())
    assert "cause_failures" not in result.summary
    assert any(f.kind == "straggler" and f.ranks == [3] for f in result.findings)

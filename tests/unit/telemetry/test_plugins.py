"""Sinks and exports are found by name through one registry of entry points (telemetry/plugins.py)."""

import importlib.metadata as md

import pytest

import telemetry
from telemetry import plugins
from telemetry.analysis.exports import export_for
from telemetry.config import Config, ConfigError


def test_built_in_sinks_and_exports_are_entry_points():
    assert set(plugins.names(plugins.SINKS)) >= {"store", "prometheus", "otlp"}
    from telemetry.exporters.perfetto import PerfettoExport
    from telemetry.store.writer import RunStoreSink

    assert plugins.load(plugins.SINKS, "store") is RunStoreSink
    assert isinstance(export_for("trace.JSON"), PerfettoExport)
    assert export_for("steps.xlsx") is None


@pytest.fixture
def third_party_sink(monkeypatch):
    """A sink installed by another package: an entry point of the group, nothing in our code."""
    ep = md.EntryPoint(name="printer", value="tests.helpers.third_party_sink:PrinterSink", group=plugins.SINKS)
    entries = dict(plugins._entries(plugins.SINKS), printer=ep)
    monkeypatch.setattr(plugins, "_entries", lambda group: entries if group == plugins.SINKS else {})
    yield


def test_config_accepts_exactly_the_installed_names(third_party_sink):
    assert Config.resolve({"sinks": ["store", "printer"]}, environ={}).sinks == ("store", "printer")
    with pytest.raises(ConfigError, match=r"sinks contains 'kafka'; accepted: otlp, printer, prometheus, store"):
        Config.resolve({"sinks": ["kafka"]}, environ={})


def test_a_third_party_sink_receives_the_records(third_party_sink, tmp_path):
    from tests.helpers.third_party_sink import PrinterSink

    PrinterSink.seen.clear()
    telemetry.init(run_dir=str(tmp_path / "run"), job="tp", sinks=["printer"])
    for _ in range(3):
        with telemetry.step():
            pass
    stats = telemetry.shutdown()
    assert PrinterSink.seen == [0, 1, 2]
    assert stats["sinks"]["printer"]["written"] == 3

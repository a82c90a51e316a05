"""Settings valid alone but not on this rank are refused at init, naming the field."""

import pytest

import telemetry
from telemetry import ConfigError


def test_a_port_above_65535_on_this_rank_is_refused_at_init(monkeypatch, tmp_path):
    monkeypatch.setenv("LOCAL_RANK", "7")
    monkeypatch.setenv("RANK", "7")
    monkeypatch.setenv("WORLD_SIZE", "8")
    with pytest.raises(
        ConfigError,
        match=r"prometheus_port=65530 \+ local rank 7 = 65537 is above 65535; "
        r"accepted: a port of at most 65528",
    ):
        telemetry.init(run_dir=str(tmp_path / "r"), prometheus_port=65530, online=False)
    assert telemetry.session() is None


def test_the_same_port_is_fine_without_the_prometheus_sink(monkeypatch, tmp_path):
    monkeypatch.setenv("LOCAL_RANK", "7")
    monkeypatch.setenv("RANK", "7")
    monkeypatch.setenv("WORLD_SIZE", "8")
    telemetry.init(run_dir=str(tmp_path / "r"), prometheus_port=65530, sinks=["store"], online=False)
    assert telemetry.session() is not None


def test_each_process_says_where_its_data_is(tmp_path, caplog):
    import logging

    with caplog.at_level(logging.INFO, logger="telemetry"):
        telemetry.init(run_dir=str(tmp_path / "r"), job="hello", sinks=["store"])
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("telemetry: rank")]
    assert line.startswith("telemetry: rank 0 of 1 (") and line.endswith(f"run directory {tmp_path / 'r'}")


def test_a_quiet_start_when_asked(tmp_path, caplog):
    import logging

    with caplog.at_level(logging.INFO, logger="telemetry"):
        telemetry.init(run_dir=str(tmp_path / "r"), job="hello", sinks=["store"], announce=False)
    assert not [r for r in caplog.records if r.getMessage().startswith("telemetry: rank")]

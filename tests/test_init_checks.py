"""Settings valid alone but not on this rank are refused at init, naming the field."""

import pytest

import telemetry
from telemetry import ConfigError


def test_a_port_above_65535_on_this_rank_is_refused_at_init(monkeypatch, tmp_path):
    monkeypatch.setenv("LOCAL_RANK", "7")
    monkeypatch.setenv("RANK", "7")
    monkeypatch.setenv("WORLD_SIZE", "8")
    with pytest.raises(ConfigError, match=r"prometheus_port=65530 \+ local rank 7 = 65537 is above 65535; "
                                          r"accepted: a port of at most 65528"):
        telemetry.init(run_dir=str(tmp_path / "r"), prometheus_port=65530, online=False)
    assert telemetry.session() is None


def test_the_same_port_is_fine_without_the_prometheus_sink(monkeypatch, tmp_path):
    monkeypatch.setenv("LOCAL_RANK", "7")
    monkeypatch.setenv("RANK", "7")
    monkeypatch.setenv("WORLD_SIZE", "8")
    telemetry.init(run_dir=str(tmp_path / "r"), prometheus_port=65530, sinks=["store"], online=False)
    assert telemetry.session() is not None

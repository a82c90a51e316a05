"""Configuration (telemetry/config.py): kwargs over TELEMETRY_* over defaults; errors name the field
and what is accepted."""

import pytest

import telemetry
from telemetry.config import Config, ConfigError


def test_defaults_and_precedence():
    env = {"TELEMETRY_JOB": "from-env", "TELEMETRY_FLUSH_INTERVAL_S": "0.2", "TELEMETRY_STRICT": "yes"}
    cfg = Config.resolve({"job": "from-kwarg"}, environ=env)
    assert cfg.job == "from-kwarg"  # kwargs win
    assert cfg.flush_interval_s == 0.2 and cfg.strict is True  # env over defaults
    assert cfg.run_dir == "runs/from-kwarg"  # derived default
    assert Config.resolve({}, environ={}).sinks == ("store", "prometheus")


def test_sinks_from_env_list():
    cfg = Config.resolve({}, environ={"TELEMETRY_SINKS": "store, otlp"})
    assert cfg.sinks == ("store", "otlp")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"flush_interval_s": 0}, r"flush_interval_s=0 is out of range; accepted: a number from 0.01"),
        ({"buffer_events": 10}, r"buffer_events=10 .* accepted: an integer from 1024"),
        ({"sinks": ["store", "kafka"]}, r"sinks contains 'kafka'; accepted: otlp, prometheus, store"),
        ({"job": "my job!"}, r"job='my job!' is invalid; accepted"),
        ({"strict": "yes"}, r"strict='yes' must be True or False"),
        (
            {"trace_ui_url": "http://h/trace"},
            r"trace_ui_url='http://h/trace'; accepted: an http:// or https:// URL with \{trace_id\}",
        ),
        ({"trace_ui_url": "ftp://h/{trace_id}"}, r"trace_ui_url='ftp://h/\{trace_id\}'; accepted"),
        ({"flush_intervl_s": 1}, r"unknown setting\(s\) flush_intervl_s; accepted: .*flush_interval_s"),
    ],
)
def test_bad_settings_name_field_and_accepted_values(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        Config.resolve(kwargs, environ={})


def test_bad_env_value_names_the_variable():
    with pytest.raises(ConfigError, match=r"TELEMETRY_STRICT='maybe' cannot be read; accepted: one of 1/0"):
        Config.resolve({}, environ={"TELEMETRY_STRICT": "maybe"})


def test_unknown_env_variable_is_warned_not_fatal(caplog):
    Config.resolve({}, environ={"TELEMETRY_FLUSH": "1"})
    assert "ignoring unknown environment variable TELEMETRY_FLUSH" in caplog.text


def test_the_variables_read_elsewhere_are_not_called_unknown(caplog):
    """TELEMETRY_GIT_COMMIT names the commit of a job run from a copy (docs/runs.md): no setting, but
    read by the package, so no warning on every rank (a demo series printed one per rank per run)."""
    env = {"TELEMETRY_GIT_COMMIT": "abc", "TELEMETRY_GIT_DIRTY": "1", "TELEMETRY_DASHBOARD_JOB": "j"}
    assert Config.resolve({}, environ=env) == Config.resolve({}, environ={})
    assert "unknown environment variable" not in caplog.text


def test_a_setting_of_the_wrong_type_is_not_called_out_of_range():
    with pytest.raises(ConfigError, match=r"prometheus_port='abc' is not an integer; accepted: an integer"):
        Config.resolve({"prometheus_port": "abc"}, environ={})
    with pytest.raises(ConfigError, match=r"flush_interval_s='x' is not a number"):
        Config.resolve({"flush_interval_s": "x"}, environ={})


def test_bad_device_settings_fail_at_init(run_dir):
    with pytest.raises(telemetry.ConfigError, match="mfu_dtype='int4'; accepted: fp8, bf16, fp16, tf32, fp32"):
        telemetry.init(run_dir=run_dir, mfu_dtype="int4")
    with pytest.raises(telemetry.ConfigError, match="device_interval_s=0.001"):
        telemetry.init(run_dir=run_dir, device_interval_s=0.001)


def test_metrics_level_is_checked_at_init_naming_the_setting(run_dir, monkeypatch):
    with pytest.raises(telemetry.ConfigError, match=r"metrics_level='ops'; accepted: full .*phase .*job"):
        telemetry.init(run_dir=run_dir, metrics_level="ops")
    monkeypatch.setenv("TELEMETRY_METRICS_LEVEL", "per-op")
    with pytest.raises(telemetry.ConfigError, match=r"metrics_level='per-op'.*TELEMETRY_METRICS_LEVEL"):
        telemetry.init(run_dir=run_dir)
    assert telemetry.session() is None


def test_online_window_is_auto_by_default_and_a_number_as_given():
    assert Config.resolve({}, environ={}).online_window == "auto"
    assert Config.resolve({"online_window": 120}, environ={}).online_window == 120
    assert Config.resolve({}, environ={"TELEMETRY_ONLINE_WINDOW": "64"}).online_window == 64
    assert Config.resolve({}, environ={"TELEMETRY_ONLINE_WINDOW": " Auto "}).online_window == "auto"
    assert Config.resolve({"online_window": "auto"}, environ={"TELEMETRY_ONLINE_WINDOW": "64"}).online_window == "auto"


@pytest.mark.parametrize(
    "value, said",
    [(7, "is out of range"), ("many", "cannot be read"), (20.5, "is not an integer"), (True, "is not an integer")],
)
def test_a_bad_online_window_names_the_field_and_what_is_accepted(value, said):
    with pytest.raises(
        ConfigError, match=rf"online_window=.* {said}; accepted: auto .* or an integer from 8 to 100000"
    ):
        Config.resolve({"online_window": value}, environ={})
    with pytest.raises(ConfigError, match=r"from the environment variable TELEMETRY_ONLINE_WINDOW"):
        Config.resolve({}, environ={"TELEMETRY_ONLINE_WINDOW": "5"})

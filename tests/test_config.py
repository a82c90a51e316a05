"""Configuration: kwargs over TELEMETRY_* over defaults; errors name the field and what is accepted."""

import pytest

from telemetry.config import Config, ConfigError
from telemetry.rank import RankContext


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


def test_rank_from_torchrun():
    ctx = RankContext.from_env(
        {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1"}
    )
    assert (ctx.rank, ctx.local_rank, ctx.world_size, ctx.local_world_size, ctx.node_rank) == (5, 1, 8, 4, 1)
    assert ctx.launcher == "torchrun"


def test_rank_from_slurm_with_compressed_tasks_per_node():
    ctx = RankContext.from_env(
        {
            "SLURM_PROCID": "9",
            "SLURM_LOCALID": "1",
            "SLURM_NTASKS": "16",
            "SLURM_NTASKS_PER_NODE": "8(x2)",
            "SLURM_NODEID": "1",
        }
    )
    assert (ctx.rank, ctx.local_rank, ctx.world_size, ctx.local_world_size, ctx.node_rank) == (9, 1, 16, 8, 1)
    assert ctx.launcher == "slurm"


def test_torchrun_wins_over_slurm():
    ctx = RankContext.from_env({"RANK": "1", "WORLD_SIZE": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"})
    assert ctx.rank == 1 and ctx.launcher == "torchrun"


def test_no_environment_is_a_single_rank():
    ctx = RankContext.from_env({})
    assert (ctx.rank, ctx.world_size, ctx.launcher) == (0, 1, "none")


@pytest.mark.parametrize(
    "env, message",
    [
        ({"RANK": "x", "WORLD_SIZE": "2"}, r"RANK='x' is not an integer"),
        ({"RANK": "4", "WORLD_SIZE": "4"}, r"RANK=4 must be below WORLD_SIZE=4"),
        ({"RANK": "0", "WORLD_SIZE": "0"}, r"WORLD_SIZE=0 is invalid; accepted: an integer >= 1"),
    ],
)
def test_bad_rank_variables(env, message):
    with pytest.raises(ConfigError, match=message):
        RankContext.from_env(env)

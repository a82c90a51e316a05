"""The public API (telemetry/__init__.py, api.py): init/shutdown lifecycle, decorator forms, forked
children, settings refused at init on this rank, what each process says at start, work after the
last step."""

import logging
import os

import pytest

import telemetry
from telemetry import ConfigError
from telemetry.analysis.inputs.load import open_input


def test_init_twice_with_same_settings_returns_the_running_session(run_dir):
    a = telemetry.init(run_dir=run_dir, job="a", sinks=["store"])
    assert telemetry.init(run_dir=run_dir, job="a", sinks=["store"]) is a


def test_init_twice_with_other_settings_names_what_differs(run_dir):
    telemetry.init(run_dir=run_dir, job="a", sinks=["store"])
    with pytest.raises(telemetry.ConfigError, match=r"already called with other settings \(job: 'a' now 'b'\)"):
        telemetry.init(run_dir=run_dir, job="b", sinks=["store"])
    telemetry.shutdown()
    telemetry.init(run_dir=run_dir, job="b", sinks=["store"])  # allowed after shutdown


def test_bad_setting_fails_at_init_not_later(run_dir):
    with pytest.raises(telemetry.ConfigError, match="flush_interval_s"):
        telemetry.init(run_dir=run_dir, flush_interval_s=-1)
    assert telemetry.session() is None


def test_calls_before_init_and_after_shutdown_are_harmless():
    with telemetry.step():
        with telemetry.phase("forward"):
            telemetry.log(loss=1.0)
    assert telemetry.shutdown() is None and telemetry.stats() == {}


def test_step_decorator_bare_and_with_arguments_records_each_call(run_dir):
    @telemetry.step
    def train_step():
        with telemetry.phase("forward"):
            pass

    @telemetry.step(samples=16)
    def train_step_sized():
        pass

    @telemetry.phase("optimizer")
    def opt_step():
        pass

    telemetry.init(run_dir=run_dir, job="deco", sinks=["store"])  # decorated before init: still recorded
    train_step()
    train_step_sized()
    train_step()
    with telemetry.step():
        opt_step()
    telemetry.shutdown()
    t = open_input(run_dir).table
    assert list(t["step"]) == [0, 1, 2, 3]
    assert t["samples"].tolist()[1] == 16
    assert t["forward_s"].tolist()[0] > 0 and t["optimizer_s"].tolist()[3] > 0
    assert train_step.__name__ == "train_step"


def test_step_rejects_a_positional_non_callable():
    with pytest.raises(TypeError, match="keyword arguments only"):
        telemetry.step(5)


def test_forked_child_records_nothing_and_parent_carries_on(run_dir):
    telemetry.init(run_dir=run_dir, job="fork", sinks=["store"])
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        from telemetry import recorder

        ok = recorder.current.active() is recorder.NULL and telemetry.session() is None
        with telemetry.step():
            pass
        os.write(w, b"1" if ok else b"0")
        os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"1"
    os.waitpid(pid, 0)
    with telemetry.step():
        pass
    telemetry.shutdown()
    assert list(open_input(run_dir).table["step"]) == [0]


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
    s = telemetry.init(run_dir=str(tmp_path / "r"), prometheus_port=65530, sinks=["store"], online=False)
    # the session runs as rank 7 of 8 and records, with the run store alone (no metrics endpoint)
    assert telemetry.session() is s and (s.ctx.rank, s.ctx.world_size) == (7, 8) and s.off_reason is None
    assert [k.name for k in s.sinks] == ["store"]
    with telemetry.step():
        pass
    telemetry.shutdown()
    t = open_input(str(tmp_path / "r")).table
    assert list(zip(t["rank"], t["step"])) == [(7, 0)]


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


def test_work_outside_any_step_is_reported_at_shutdown(run_dir, caplog):
    telemetry.init(run_dir=run_dir, job="stray", sinks=["store"])
    with telemetry.step():
        pass
    with telemetry.phase("eval"):
        pass
    telemetry.log(acc=0.9)
    with caplog.at_level(logging.WARNING, logger="telemetry"):
        stats = telemetry.shutdown()
    assert stats["unattributed_events"] == 2
    assert any("2 phase or log event(s) came after the last step" in r.getMessage() for r in caplog.records)


def test_importing_telemetry_leaves_the_readers_libraries_unloaded():
    """A rank writes and never reads: `import telemetry` costs it no pandas and no pyarrow.dataset
    (they were 0.45 s of every rank's start; the store's reader comes when `read_run` is first asked for)."""
    import subprocess
    import sys

    code = (
        "import sys, telemetry, telemetry.store.writer; "
        "print(sorted(m for m in ('pandas', 'pyarrow.dataset', 'telemetry.store.reader') if m in sys.modules)); "
        "from telemetry.store import read_run; print(read_run.__module__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["[]", "telemetry.store.reader"], out.stdout

"""The public API: init/shutdown lifecycle, decorator forms, forked children."""

import os

import pytest

import telemetry
from telemetry.analysis.load import open_input


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


def test_dataloader_with_forked_workers_times_the_wait(run_dir):
    torch = pytest.importorskip("torch")
    import time

    class Slow(torch.utils.data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            time.sleep(0.02)
            return torch.zeros(3)

    telemetry.init(run_dir=run_dir, job="dl", sinks=["store"])
    loader = torch.utils.data.DataLoader(Slow(), batch_size=2, num_workers=2, multiprocessing_context="fork")
    for _batch in telemetry.watch(loader):
        with telemetry.step():
            pass
    telemetry.shutdown()
    t = open_input(run_dir).table
    assert len(t) == 4 and t["samples"].tolist() == [2, 2, 2, 2]
    assert (t["data_s"] > 0).all()
    assert len(os.listdir(os.path.join(run_dir, "ranks"))) == 4  # no files from the workers (meta, progress, a segment)

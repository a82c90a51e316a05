"""A process whose rank nobody named yet (no launcher variables, a process group on its way) writes
nothing until torch.distributed's group says its rank; then everything it held is written as that
rank's. A rank already written by another live process is refused. (torch.distributed is faked here,
at its boundary, by a module object in sys.modules; tests/integration/test_launches.py runs the real
torch.multiprocessing.spawn.)"""

import logging
import os
import sys
import time
import types

import pytest

import telemetry
from telemetry.analysis.inputs.load import open_input
from telemetry.store.claim import RankInUse, claim_rank


class Store:
    def __init__(self):
        self.data = {}

    def set(self, key, value):
        self.data[key] = value.encode() if isinstance(value, str) else value

    def check(self, keys):
        return all(k in self.data for k in keys)

    def get(self, key):
        return self.data[key]


def fake_dist(rank, world, store, peers_host="peer-host"):
    """torch.distributed with an initialized default group of ``world`` ranks; the other ranks have
    posted their hosts already."""
    for r in range(world):
        if r != rank:
            store.set(f"telemetry/host/{r}", peers_host)
    c10d = types.SimpleNamespace(_get_default_store=lambda: store)
    return types.SimpleNamespace(
        is_available=lambda: True,
        is_initialized=lambda: True,
        get_rank=lambda: rank,
        get_world_size=lambda: world,
        distributed_c10d=c10d,
    )


def steps(n):
    for _ in range(n):
        with telemetry.step():
            with telemetry.phase("forward"):
                pass


def files(run_dir):
    ranks = os.path.join(run_dir, "ranks")
    return sorted(os.listdir(ranks)) if os.path.isdir(ranks) else []


@pytest.fixture
def waiting(monkeypatch):
    """A process with a rendezvous address but no rank, and no process group yet."""
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.delitem(sys.modules, "torch.distributed", raising=False)


def test_nothing_is_written_under_a_guessed_rank_and_the_group_names_the_rank(waiting, run_dir, monkeypatch):
    session = telemetry.init(run_dir=run_dir, sinks=["store"], flush_interval_s=0.05, online=False, collectives=False)
    assert session.pending
    steps(5)
    session.pipeline.tick()
    session.pipeline.tick()
    assert files(run_dir) == [] and len(session.pipeline.held) == 5  # held, written as no rank
    store = Store()
    monkeypatch.setitem(sys.modules, "torch.distributed", fake_dist(1, 2, store))
    deadline = time.monotonic() + 10
    while session.pending and time.monotonic() < deadline:  # the next tick sees the group
        time.sleep(0.02)
    assert not session.pending and session.ctx.rank == 1 and session.ctx.world_size == 2
    assert session.ctx.launcher == "process_group" and session.ctx.local_rank == 0  # the peer is elsewhere
    assert store.data["telemetry/host/1"].decode() == session.env_ctx.node
    steps(3)
    telemetry.shutdown()
    t = open_input(run_dir).table
    assert sorted(t["rank"].unique()) == [1] and t["step"].tolist() == list(range(8))
    assert all(f.startswith("rank-00001") for f in files(run_dir))


def test_a_job_that_ends_before_any_group_was_one_process(waiting, run_dir, caplog):
    session = telemetry.init(run_dir=run_dir, sinks=["store"], online=False, collectives=False)
    steps(4)
    assert session.pending
    with caplog.at_level(logging.INFO, logger="telemetry"):
        telemetry.shutdown()
    assert "was rank 0 of 1" in caplog.text
    t = open_input(run_dir).table
    assert t["rank"].unique().tolist() == [0] and t["step"].tolist() == [0, 1, 2, 3]


def test_the_group_wins_over_launcher_variables_that_disagree(run_dir, monkeypatch, caplog):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setitem(sys.modules, "torch.distributed", fake_dist(1, 2, Store(), peers_host="elsewhere"))
    with caplog.at_level(logging.WARNING, logger="telemetry"):
        session = telemetry.init(
            run_dir=run_dir, sinks=["store"], flush_interval_s=0.05, online=False, collectives=False
        )
        steps(2)
        deadline = time.monotonic() + 10
        while session.pending and time.monotonic() < deadline:
            time.sleep(0.02)
    assert session.ctx.rank == 1
    assert caplog.text.count("the group is trusted") == 1
    telemetry.shutdown()
    assert open_input(run_dir).table["rank"].unique().tolist() == [1]


def test_launcher_variables_that_agree_with_the_group_start_at_once(run_dir, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setitem(sys.modules, "torch.distributed", fake_dist(1, 2, Store()))
    session = telemetry.init(run_dir=run_dir, sinks=["store"], online=False, collectives=False)
    assert not session.pending and session.ctx.launcher == "env" and files(run_dir)


def test_a_rank_another_live_process_writes_is_refused_and_this_one_records_nothing(run_dir, caplog):
    other = claim_rank(run_dir, 0)  # as another process's session holds it
    try:
        with caplog.at_level(logging.ERROR, logger="telemetry"):
            session = telemetry.init(run_dir=run_dir, sinks=["store"], online=False, collectives=False)
        steps(3)
        stats = telemetry.shutdown()
        assert session.off_reason and f"pid {os.getpid()} on " in session.off_reason
        assert "rank 0 of this run directory is being written by another live process" in caplog.text
        assert stats["records"] == 0 and [f for f in files(run_dir) if not f.endswith(".lock")] == []
        with pytest.raises(RankInUse, match="another live process"):
            telemetry.init(run_dir=run_dir, sinks=["store"], online=False, collectives=False, strict=True)
    finally:
        other.release()
    telemetry.init(run_dir=run_dir, sinks=["store"], online=False, collectives=False)  # free again: it starts
    steps(1)
    telemetry.shutdown()
    assert open_input(run_dir).table["step"].tolist() == [0]

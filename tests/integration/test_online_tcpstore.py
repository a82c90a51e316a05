"""Online detection against a real TCPStore (127.0.0.1) with 256 simulated ranks: rank 0 reads a
block in a few batched requests, not a few per rank, and still gets every row, names the ranks that
stopped posting, skips and counts a malformed summary, and finds the straggler.

The simulated ranks post as ranks do (one ``set`` of a summary vector per block, and their phase
names once), from the test's own client connection; ``CHUNK`` (telemetry/online/reads.py) is made
64 so that 256 ranks are four chunks."""

from __future__ import annotations

import collections
import subprocess
import sys
import time
from datetime import timedelta

import numpy as np
import pytest
import torch.distributed as dist

from telemetry import online
from telemetry.online import reads

WORLD = 256


CHUNK = 64


EVERY = 10


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(reads, "CHUNK", CHUNK)


class Counting:
    """A store that counts its calls by name (a round trip each) and hands the rest on."""

    def __init__(self, inner, calls=None):
        self.inner = inner
        self.calls = collections.Counter() if calls is None else calls

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def counted(*a, **k):
            self.calls[name] += 1
            return attr(*a, **k)

        return counted

    @property
    def timeout(self):
        return self.inner.timeout

    def clone(self):
        self.calls["clone"] += 1
        return Counting(self.inner.clone(), collections.Counter())


SERVER = """
import sys
from datetime import timedelta
import torch.distributed as dist
store = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=30), wait_for_workers=False)
print(store.port, flush=True)
sys.stdin.read()  # until the test closes it
"""


@pytest.fixture
def server():
    """A TCPStore server on 127.0.0.1 in a process of its own (stopped after the test), a client
    connection for rank 0 and one for the simulated ranks, under the prefix the job's store has."""
    proc = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        yield [
            dist.PrefixStore("telemetry/", dist.TCPStore("127.0.0.1", port, 1, False, timedelta(seconds=10)))
            for _ in range(2)
        ]
    finally:
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def summary(block, rank, rng, straggler=None):
    """A rank's summary vector: block, steps, step, compute, comm, data, backward, forward (compute)."""
    fwd = 0.010 * (1.5 if rank == straggler else 1.0) * (1 + 0.02 * rng.standard_normal())
    bwd = 0.020 * (1 + 0.02 * rng.standard_normal())
    step = 0.050
    return np.array([block, EVERY, step, fwd + bwd + 0.001, step - fwd - bwd - 0.001, 0.001, 0, bwd, fwd])  # traced: 0


def post(store, block, rng, skip=(), straggler=None, junk=None):
    for r in range(WORLD):
        if r in skip:
            continue
        if block == 0:
            store.set(f"phases/{r}", "backward,forward")
        store.set(f"s/{block}/{r}", junk[r] if junk and r in junk else summary(block, r, rng, straggler).tobytes())
    # a set is not answered; a request on the same connection is, after the server has done the
    # sets before it: only then may another connection (rank 0's) expect to see them
    store.num_keys()


def keys_left(store, block):
    return [k for k in store.list_keys() if k.startswith(f"s/{block}/")]


def wait_deleted(det, store, block, timeout=10.0):
    deadline = time.monotonic() + timeout
    while keys_left(store, block) and time.monotonic() < deadline:
        time.sleep(0.05)
    return keys_left(store, block)


def test_a_block_is_read_in_a_few_requests_per_chunk(server):
    master, ranks = server
    store = Counting(master)
    det = online.OnlineDetector(store, rank=1, world=WORLD, every=EVERY, window=50, wait_blocks=3, min_interval_s=0)
    rng = np.random.default_rng(0)
    post(ranks, 0, rng)
    assert det.reads.complete_chunks(0, 0) == WORLD // CHUNK
    det._collect(0, WORLD // CHUNK)
    assert dict(store.calls) == {"check": 4, "multi_get": 4, "clone": 1}  # not 3 per rank
    assert det._rows[0].ranks.tolist() == list(range(WORLD))
    assert det._rows[0].parts[0][1][:, 0].tolist() == [0.0] * WORLD
    assert wait_deleted(det, master, 0) == []  # deleted, one delete_key each, on the deleter's connection
    assert det.reads.deleter.store.calls["delete_key"] == WORLD

    store.calls.clear()
    table = det._table()  # the phase names, read once for every rank: batched too
    assert dict(store.calls) == {"check": 4, "multi_get": 4}
    assert len(table) == WORLD and {"backward_s", "forward_s", "comm.forward_s"} <= set(table.columns)
    store.calls.clear()
    det._table()
    assert not store.calls  # and never again

    # A block read with a known chunk still incomplete: the missing ranks are found by halving
    post(ranks, 1, rng, skip={5, 130})
    store.calls.clear()
    known = det.reads.complete_chunks(1, 0)
    assert known == 0 and store.calls["check"] == 1  # stops at the first incomplete chunk
    det._collect(1, known)
    assert det._rows[1].ranks.tolist() == sorted(set(range(WORLD)) - {5, 130})
    assert store.calls["multi_get"] == 4 and store.calls["get"] == 0
    assert store.calls["check"] <= 1 + 2 * (2 * 6 + 1) + 2  # per missing rank about 2 log2(CHUNK)

    ranks.set("s/1/5", summary(1, 5, rng).tobytes())  # rank 5's block 1, after rank 0 read that block
    for block in range(2, 8):
        post(ranks, block, rng)
        det._collect(block, det.reads.complete_chunks(block, 0))
    assert wait_deleted(det, master, 1) == []  # not left behind: deleted 2 x wait_blocks blocks later
    assert all(wait_deleted(det, master, b) == [] for b in range(2, 8))
    det.stop()


def test_rank_zero_gets_every_row_names_lost_ranks_skips_bad_summaries_and_finds_the_straggler(server, caplog):
    master, ranks = server
    store = Counting(master)
    det = online.OnlineDetector(store, rank=0, world=WORLD, every=EVERY, window=50, wait_blocks=3, min_interval_s=0)
    rng = np.random.default_rng(1)
    results = []
    lost = {17, 200}  # stop posting from block 6 on
    bad = {3: {40: b"not a vector"}, 4: {41: summary(9, 41, rng).tobytes()}}  # garbage; another block's
    blocks = 16
    try:
        for block in range(blocks):
            post(ranks, block, rng, skip=lost if block >= 6 else (), straggler=77, junk=bad.get(block))
            det._inbox.put(block)  # as rank 0's own post does
            if block < 6:  # wait for a complete block to be read, so that block numbers stay in step
                deadline = time.monotonic() + 10
                while block not in det._rows and time.monotonic() < deadline:
                    time.sleep(0.01)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (blocks - 1 - 3) not in det._rows:
            time.sleep(0.05)
        assert (blocks - 1 - 3) in det._rows, "the blocks were not read in 20 s"

        def told(kind: str) -> list:
            return [f for r in results for f in r.findings if f["kind"] == kind]

        # the last analyses may still run: poll until both lost ranks and the straggler are said (30 s at most)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (len(told("rank_lost")) >= len(lost) and told("straggler")):
            results += det.poll()
            time.sleep(0.05)
    finally:
        det.stop()
    rows = det._rows
    assert all(rows[b].ranks.tolist() == list(range(WORLD)) for b in (0, 1, 2, 5))  # every rank's row
    assert 40 not in rows[3].ranks and 41 not in rows[4].ranks and det.bad_summaries == 2
    assert len(rows[3].ranks) == len(rows[4].ranks) == WORLD - 1
    assert all(set(rows[b].ranks.tolist()) == set(range(WORLD)) - lost for b in range(6, blocks - 3))
    findings = [f for r in results for f in r.findings]
    assert sorted(f["ranks"][0] for f in findings if f["kind"] == "rank_lost") == sorted(lost)
    assert [f["ranks"] for f in findings if f["kind"] == "straggler"] == [[77]]
    scores = results[-1].straggler_scores
    assert max(scores, key=lambda r: scores[r]) in (77, "77")
    assert store.calls["get"] == 0  # nothing read one key at a time
    assert store.calls["multi_get"] <= 2 * blocks * WORLD // CHUNK  # summaries and, once, phase names
    assert "is not a summary vector" in caplog.text


def test_trace_roots_wait_for_a_late_ranks_extents(server):
    """A block read before every rank posted it (``wait_blocks`` late): its trace roots are held until
    the late ranks' vectors come (then read, and their keys deleted), so each root covers every rank."""
    from telemetry.online.wire import BlockSummarizer
    from telemetry.pipeline.records import StepRecord, TraceRoots

    master, ranks = server
    world = 3
    det = online.OnlineDetector(
        master, rank=1, world=world, every=2, window=50, wait_blocks=3, trace_sampler=lambda: lambda r: True
    )

    def vector(rank, offset):
        s = BlockSummarizer(2, sampler=lambda r: True)
        recs = [
            StepRecord(rank, i, 100.0 + i + offset, 0.5, True, {"fwd": 0.4}, {}, 0.0, {}, None, None, {}, ())
            for i in range(2)
        ]
        return s.add(recs)[0]

    ranks.set("s/0/0", vector(0, 0.0).tobytes())
    ranks.set("s/0/1", vector(1, -0.01).tobytes())
    ranks.num_keys()  # the sets are done
    det._collect(0, 0)  # rank 2 has not posted block 0
    assert det.poll() == [] and list(det._late_roots) == [0]
    det._late_extents()
    assert det.poll() == []  # still waiting for rank 2
    ranks.set("s/0/2", vector(2, 0.02).tobytes())
    ranks.num_keys()
    det._late_extents()
    [roots] = det.poll()
    assert isinstance(roots, TraceRoots) and not det._late_roots
    assert [(s, round(a, 3), round(b, 3), n) for s, a, b, n in roots.roots] == [
        (0, 99.99, 100.52, 3),
        (1, 100.99, 101.52, 3),
    ]
    assert wait_deleted(det, master, 0) == []  # the late key read and deleted too

"""The Prometheus sink's I/O series from StepRecord.io (telemetry/exporters/prometheus.py): checkpoint
seconds by kind and part (blocking, async, storage), checkpoint bytes, and the input counters
(train_input_steps_total, train_input_ready_steps_total, train_input_read_bytes_total). Records are fed
to the sink as the pipeline would hand them over, and the exposition is scraped."""

import math
import os

import pytest

import telemetry
from telemetry.exporters.prometheus import storage_by_kind
from telemetry.pipeline.records import SPAN_CHECKPOINT, SPAN_PHASE, Span, StepRecord
from tests.helpers.servers import free_port, http_get

NEVER = 60.0  # the pipeline thread never ticks within a test: the records are written by hand


def record(step, io=None, spans=()):
    return StepRecord(
        rank=0,
        step=step,
        start_s=1000.0 + step,
        duration_s=1.0,
        ok=True,
        phases={"forward": 0.5},
        phase_comm={},
        comm_s=0.0,
        ops={},
        tokens=None,
        samples=None,
        scalars={},
        spans=(Span(SPAN_PHASE, "forward", 1000.0 + step, 1000.5 + step), *spans),
        io=io,
    )


def ckpt(name, start, seconds, nbytes=0):
    return Span(SPAN_CHECKPOINT, name, start, start + seconds, True, nbytes)


def samples(port, job):
    """{(name, frozenset of the labels beyond the base ones): value} of the scrape's train_* samples."""
    base = {"job": job, "rank": "0", "local_rank": "0", "node": os.uname().nodename}
    out = {}
    for line in http_get(f"http://127.0.0.1:{port}/metrics").decode().splitlines():
        if not line.startswith("train_") or line.startswith("#"):
            continue
        head, value = line.rsplit(" ", 1)
        name, _, rest = head.partition("{")
        labels = dict(kv.split("=", 1) for kv in rest.rstrip("}").split(",")) if rest else {}
        labels = {k: v.strip('"') for k, v in labels.items()}
        assert {k: labels.pop(k) for k in base} == base, line
        out[(name, frozenset(labels.items()))] = float(value)
    return out


def start(run_dir, **kw):
    port = free_port()
    session = telemetry.init(
        run_dir=run_dir, job="io", sinks=["prometheus"], prometheus_port=port, flush_interval_s=NEVER, **kw
    )
    [s] = session.sinks
    return s, lambda: samples(port, "io")


@pytest.fixture
def sink(run_dir):
    yield start(run_dir, device_interval_s=0)  # no sampler: no storage reading unless a record carries one
    telemetry.shutdown()


def test_the_read_bytes_counter_is_born_at_zero_when_storage_is_read(run_dir):
    # Storage reads are counted from init: the series is 0 before the first step, so that what a job reads
    # before Prometheus's first scrape is an increase it sees (a series born at 12 MB shows increase 0)
    try:
        s, scrape = start(run_dir)  # the sampler on: /proc/self/io is readable here
        got = scrape()
        assert got[("train_input_read_bytes_total", frozenset())] == 0.0
        assert ("train_input_steps_total", frozenset()) not in got  # no watched loader: still absent
        s.write([record(1, {"read_bytes": 4096.0})])
        assert scrape()[("train_input_read_bytes_total", frozenset())] == 4096.0
    finally:
        telemetry.shutdown()


def ck(kind, part):
    return ("train_checkpoint_seconds_total", frozenset({("kind", kind), ("part", part)}))


def nbytes(kind):
    return ("train_checkpoint_bytes_total", frozenset({("kind", kind)}))


INPUT = (
    ("train_input_steps_total", frozenset()),
    ("train_input_ready_steps_total", frozenset()),
    ("train_input_read_bytes_total", frozenset()),
)


def test_storage_seconds_take_the_kind_of_the_steps_checkpoints(sink):
    s, scrape = sink
    s.write(
        [
            # a DCP save: 4 s blocked, 2.5 s of it this rank's own storage writes, 1 GB
            record(
                1, {"checkpoint_s": 4.0, "checkpoint_io_s": 2.5, "checkpoint_bytes": 1e9}, [ckpt("save", 1, 4.0, 10**9)]
            ),
            # an async save: the call returns at once, the upload ends two steps later with the storage time
            record(2, {"checkpoint_s": 0.1, "checkpoint_io_s": 0.0}, [ckpt("save", 2, 0.1)]),
            record(4, {"checkpoint_async_s": 6.0, "checkpoint_io_s": 3.0}, [ckpt("save.async", 4, 6.0, 2 * 10**9)]),
            # a load: its own kind
            record(5, {"checkpoint_s": 2.0, "checkpoint_io_s": 1.0}, [ckpt("load", 5, 2.0, 10**9)]),
            record(6),  # no io at all: nothing changes
        ]
    )
    got = scrape()
    assert got[ck("save", "blocking")] == pytest.approx(4.1)
    assert got[ck("save", "async")] == pytest.approx(6.0)
    assert got[ck("save", "storage")] == pytest.approx(5.5)
    assert got[ck("load", "blocking")] == pytest.approx(2.0)
    assert got[ck("load", "storage")] == pytest.approx(1.0)
    assert got[nbytes("save")] == 3e9 and got[nbytes("load")] == 1e9
    assert ck("load", "async") not in got
    # save bandwidth, as the alert and the dashboard read it: bytes / own storage seconds
    assert got[nbytes("save")] / got[ck("save", "storage")] == pytest.approx(3e9 / 5.5)
    for key in INPUT:  # no watched loader, no storage reading: absent, not 0
        assert key not in got


def test_a_step_with_both_kinds_splits_its_storage_seconds_by_their_time(sink):
    s, scrape = sink
    s.write(
        [
            record(
                1,
                {"checkpoint_s": 4.0, "checkpoint_io_s": 2.0},
                [ckpt("load", 1, 1.0, 10), ckpt("save", 2, 3.0, 30)],
            )
        ]
    )
    got = scrape()
    assert got[ck("load", "storage")] == pytest.approx(0.5)
    assert got[ck("save", "storage")] == pytest.approx(1.5)


def test_no_storage_series_without_a_known_storage_time(sink):
    """io.checkpoint_io_s 0 is "not known" (a telemetry.checkpoint block, a marked save): no storage
    series, so that bytes / storage seconds is never a division by a false 0."""
    s, scrape = sink
    s.write([record(1, {"checkpoint_s": 3.0, "checkpoint_io_s": 0.0}, [ckpt("save", 1, 3.0, 100)])])
    got = scrape()
    assert got[ck("save", "blocking")] == 3.0 and got[nbytes("save")] == 100
    assert ck("save", "storage") not in got


def test_input_steps_ready_steps_and_read_bytes(sink):
    s, scrape = sink
    s.write([record(1), record(2, {"read_bytes": 0.0})])  # a storage reading, no watched batch yet
    got = scrape()
    assert got[("train_input_read_bytes_total", frozenset())] == 0.0  # read nothing: a real 0
    assert ("train_input_steps_total", frozenset()) not in got
    assert ("train_input_ready_steps_total", frozenset()) not in got

    s.write([record(3, {"input_ready": 0.0, "read_bytes": 4096.0})])  # the first watched batch was late
    got = scrape()
    # both counters start together: readiness 0/1 is known, never absent
    assert [got[k] for k in INPUT] == [1.0, 0.0, 4096.0]

    s.write(
        [
            record(4, {"input_ready": 1.0, "read_bytes": 1e6}),
            record(5, {"input_ready": 1.0, "read_bytes": 2e6, "checkpoint_s": 0.0}),
            record(6, {"input_ready": math.nan, "read_bytes": math.nan}),  # no watched batch: not a step of input
            record(7, {"input_ready": 0.0}),
            record(8),
        ]
    )
    got = scrape()
    assert [got[k] for k in INPUT] == [4.0, 2.0, 4096.0 + 3e6]
    assert got[("train_steps_total", frozenset())] == 8.0


def test_storage_by_kind():
    assert storage_by_kind(2.0, {"save": 0.5}) == {"save": 2.0}
    assert storage_by_kind(3.0, {"save": 2.0, "load": 1.0}) == {"save": 2.0, "load": 1.0}
    assert storage_by_kind(2.0, {"save": 0.0, "load": 0.0}) == {"save": 1.0, "load": 1.0}
    for unknown in (0.0, -1.0, math.nan, None):
        assert storage_by_kind(unknown, {"save": 1.0}) == {}
    assert storage_by_kind(1.0, {}) == {}  # no span to give it a kind

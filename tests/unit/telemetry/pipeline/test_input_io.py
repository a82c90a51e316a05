"""The input's columns (telemetry/pipeline/assembler.py): ``io.read_bytes`` from the sampler's storage
counter, in the step during which it was read; ``io.input_ready`` from the loader's waits."""

import math

import numpy as np

import telemetry
from telemetry.analysis.inputs.load import open_input
from telemetry.pipeline.assembler import READY_NS, Assembler
from telemetry.recorder import events as ev

MS = 1_000_000


def _step(i: int, t0: int, t1: int) -> list[tuple]:
    return [(ev.STEP_BEGIN, t0, i), (ev.STEP_END, t1, i, t0, True, None, None)]


def _build(events: list[tuple]):
    asm = Assembler(0, lambda ns: ns * 1e-9)
    return asm.feed(events) + asm.flush_waiting()


def test_storage_bytes_land_in_the_step_they_were_read_in_and_sum_to_the_counter():
    events = [(ev.DEVICE, 1 * MS, {"storage_read_bytes": 100.0})]  # before step 0: counts in it
    events += _step(0, 2 * MS, 10 * MS)
    events += [(ev.DEVICE, 15 * MS, {"storage_read_bytes": 100.0})]  # nothing new: step 1 read 0
    events += _step(1, 12 * MS, 20 * MS)
    events += [(ev.DEVICE, 25 * MS, {"storage_read_bytes": 4196.0, "process_cpu_ratio": 1.0})]
    events += _step(2, 22 * MS, 30 * MS)
    r0, r1, r2 = _build(events)
    assert (r0.io["read_bytes"], r1.io["read_bytes"], r2.io["read_bytes"]) == (100.0, 0.0, 4096.0)
    assert "input_ready" not in r0.io  # no watched loader: readiness unknown, not "not ready"


def test_no_storage_reading_and_no_loader_leave_no_input_columns():
    (r,) = _build(_step(0, 0, 10 * MS))
    assert r.io is None


def test_a_batch_is_ready_when_the_loader_returned_within_the_threshold():
    events = [(ev.DATA, 1 * MS + READY_NS, 1 * MS, 8, None)]  # at the threshold: waiting for us
    events += _step(0, 4 * MS, 10 * MS)
    events += [(ev.DATA, 20 * MS, 11 * MS, 8, None)]  # 9 ms: it was being made
    events += _step(1, 21 * MS, 30 * MS)
    events += _step(2, 31 * MS, 40 * MS)  # no batch in this step
    r0, r1, r2 = _build(events)
    assert r0.io == {"input_ready": 1.0} and r1.io == {"input_ready": 0.0} and r2.io is None


def test_a_long_steps_batch_is_ready_when_taking_it_cost_under_a_tenth_of_the_step():
    """Taking a waiting batch off a worker's queue costs a few ms on a busy host: against a 50 ms step a 4 ms
    next() was a waiting batch; 6 ms against a 50 ms step, or 4 ms against a 20 ms one, was not."""
    events = [(ev.DATA, 4 * MS, 0, 8, None)] + _step(0, 5 * MS, 55 * MS)
    events += [(ev.DATA, 62 * MS, 56 * MS, 8, None)] + _step(1, 63 * MS, 113 * MS)
    events += [(ev.DATA, 118 * MS, 114 * MS, 8, None)] + _step(2, 119 * MS, 139 * MS)
    r0, r1, r2 = _build(events)
    assert [r.io["input_ready"] for r in (r0, r1, r2)] == [1.0, 0.0, 0.0]


def test_ready_and_waiting_batches_read_back_from_the_store(run_dir):
    import time

    def batches():
        yield 1  # the first: ready at once
        time.sleep(0.03)  # the second is made while the loop waits
        yield 2

    telemetry.init(run_dir=run_dir, job="input", sinks=["store"], device_interval_s=0)
    it = iter(telemetry.watch(batches()))
    for i in range(3):
        if i < 2:
            next(it)
        with telemetry.step():
            pass
    telemetry.shutdown()
    ready = open_input(run_dir).table.sort_values("step")["io.input_ready"].to_numpy(dtype=float)
    # the second batch slept: 0, kept as 0 (not dropped as a zero); the step without a batch: unknown.
    # The first was ready at once, unless a busy host took the CPU away for 2 ms just then
    assert ready[0] in (0.0, 1.0) and ready[1] == 0.0 and math.isnan(ready[2]), ready
    assert np.isnan(ready).sum() == 1

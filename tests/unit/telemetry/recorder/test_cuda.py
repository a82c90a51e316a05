"""Device-side timing with CUDA events (telemetry/recorder/cuda.py), against a fake ``torch.cuda.Event``
(no GPU here)."""

import pytest

from telemetry.pipeline.assembler import Assembler
from telemetry.recorder import events as ev
from telemetry.recorder.cuda import CudaRecorder, EventPool


class FakeGpu:
    def __init__(self):
        self.now_ms = 0.0  # device time of the end of the queued work
        self.completed_ms = 0.0  # how far the device has got

    def launch(self, ms):
        self.now_ms += ms


class FakeEvent:
    def __init__(self, gpu):
        self.gpu = gpu
        self.at = None
        self.records = 0

    def record(self):
        self.at = self.gpu.now_ms
        self.records += 1

    def query(self):
        return self.at is not None and self.gpu.completed_ms >= self.at

    def elapsed_time(self, other):
        if not (self.query() and other.query()):
            raise RuntimeError("event not completed")
        return other.at - self.at


class HostClock:
    def __init__(self):
        self.t = 0

    def __call__(self):
        self.t += 10_000  # 10 us of host time per reading
        return self.t


def setup():
    gpu = FakeGpu()
    pool = EventPool(lambda: FakeEvent(gpu))
    rec = CudaRecorder(4096, pool, clock=HostClock())
    released = []
    asm = Assembler(0, lambda ns: ns * 1e-9, release_events=lambda evs: (released.extend(evs), pool.release(evs)))
    return gpu, pool, rec, asm, released


def test_phase_times_are_gpu_times_not_launch_times():
    gpu, pool, rec, asm, released = setup()
    with rec.step():
        with rec.phase("forward"):
            gpu.launch(30.0)  # 30 ms of kernels, launched in microseconds
        with rec.phase("backward"):
            gpu.launch(60.0)
    assert asm.feed(rec.drain()) == []  # held one tick
    assert asm.feed([]) == []  # the GPU has not finished: the step waits (query() never blocks)
    gpu.completed_ms = 1e9
    [r] = asm.feed([])
    assert r.phases["forward"] == pytest.approx(0.030) and r.phases["backward"] == pytest.approx(0.060)
    assert r.duration_s == pytest.approx(0.090)  # the GPU's step: start to end event
    assert r.host_duration_s == pytest.approx(5 * 10e-6)  # the host only launched
    assert len(released) == 6 and pool.created == 6  # step, 2 phases: 2 events each, all returned
    with rec.step():  # events are reused, not created again
        with rec.phase("forward"):
            gpu.launch(1.0)
    gpu.completed_ms = 1e9
    asm.feed(rec.drain())
    asm.feed([])
    assert pool.created == 6


def test_collective_time_and_per_phase_wait_come_from_the_gpu_timeline():
    gpu, pool, rec, asm, _ = setup()
    from telemetry.recorder import events as ev

    with rec.step():
        with rec.phase("backward"):
            gpu.launch(20.0)
            e0, t0 = rec.mark(), rec.now()
            gpu.launch(15.0)  # the all-reduce holds the compute stream for 15 ms
            e1, t1 = rec.mark(), rec.now()
            rec.emit((ev.COLLECTIVE_DEV, t1, "all_reduce", t0, 4000, 4, "default", t1 - t0, 1.5, "", -1, e0, e1))
    gpu.completed_ms = 1e9
    asm.feed(rec.drain())
    [r] = asm.feed([])
    assert r.phases["backward"] == pytest.approx(0.035)
    assert r.comm_s == pytest.approx(0.015) and r.phase_comm["backward"] == pytest.approx(0.015)
    [span] = [s for s in r.spans if s.kind == "collective"]
    assert span.end_s - span.start_s == pytest.approx(0.015)


def test_events_that_never_complete_fall_back_to_host_time():
    gpu, pool, rec, _, _ = setup()
    asm = Assembler(0, lambda ns: ns * 1e-9, pending_timeout_s=0.0)
    with rec.step():
        with rec.phase("forward"):
            gpu.launch(30.0)
    asm.feed(rec.drain())
    [r] = asm.feed([])  # timed out at once: host times, no exception
    assert r.phases["forward"] == pytest.approx(10e-6)


def test_device_timing_cuda_without_a_gpu_is_refused_at_init(run_dir):
    import telemetry

    with pytest.raises(telemetry.ConfigError, match="device_timing='cuda' but torch sees no CUDA device"):
        telemetry.init(run_dir=run_dir, device_timing="cuda", sinks=["store"])


def test_the_same_phase_nested_keeps_each_intervals_events():
    gpu, pool, rec, asm, released = setup()
    with rec.step():
        with rec.phase("layer"):
            gpu.launch(10.0)
            with rec.phase("layer"):
                gpu.launch(5.0)
            gpu.launch(1.0)
    events = [e for e in rec.drain() if e[0] == ev.PHASE_DEV]
    spans = [(e[ev.PHASE_E0].at, e[ev.PHASE_E1].at) for e in events]
    assert spans == [(10.0, 15.0), (0.0, 16.0)]  # inner, then the outer with its own start event
    assert pool.created == 6  # step, 2 phases: 2 events each

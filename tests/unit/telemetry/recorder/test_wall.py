"""The hot path (telemetry/recorder/wall.py): what the wall-clock recorder buffers for steps, phases,
logs, and when the API is misused."""

import threading

import pytest

from telemetry.pipeline.assembler import Assembler
from telemetry.recorder import Recorder
from telemetry.recorder import events as ev
from telemetry.usage import TelemetryUsageError


class FakeClock:
    def __init__(self):
        self.t = 0

    def __call__(self):
        self.t += 1_000_000  # 1 ms per reading
        return self.t


def make(strict=False, capacity=4096):
    return Recorder(capacity, strict=strict, clock=FakeClock())


def records(rec):
    asm = Assembler(0, lambda ns: ns * 1e-9)
    return asm.feed(rec.drain()) + asm.flush_waiting()


def test_step_with_phases_yields_one_record_with_phase_times():
    rec = make()
    with rec.step(tokens=100, samples=4):
        with rec.phase("forward"):
            pass
        with rec.phase("backward"):
            pass
    [r] = records(rec)
    assert r.step == 0 and r.ok and r.tokens == 100 and r.samples == 4
    assert r.phases == {"forward": pytest.approx(0.001), "backward": pytest.approx(0.001)}
    assert r.duration_s == pytest.approx(0.005)  # the step read the clock 1st and 6th


def test_steps_count_up_and_index_overrides():
    rec = Recorder(1024, start_step=10)
    for _ in range(3):
        with rec.step():
            pass
    with rec.step(index=100):
        pass
    with rec.step():
        pass
    assert [r.step for r in records(rec)] == [10, 11, 12, 100, 101]


def test_exception_in_step_propagates_unchanged_and_step_is_recorded_failed():
    rec = make()
    err = RuntimeError("boom")
    with pytest.raises(RuntimeError) as caught:
        with rec.step():
            with rec.phase("forward"):
                raise err
    assert caught.value is err
    [r] = records(rec)
    assert r.ok is False
    assert r.spans[0].ok is False and r.spans[0].name == "forward"
    # the recorder is usable again: the next step is not "nested"
    with rec.step():
        pass
    assert records(rec)[0].ok


def test_nested_step_is_reported_and_ignored_by_default(caplog):
    rec = make()
    with rec.step():
        with rec.step():
            pass
    assert rec.usage.counts == {"nested-step": 1}
    assert "steps cannot nest" in caplog.text
    assert len(records(rec)) == 1


def test_nested_step_raises_in_strict_mode():
    rec = make(strict=True)
    with rec.step():
        with pytest.raises(TelemetryUsageError, match="steps cannot nest"):
            with rec.step():
                pass


@pytest.mark.parametrize("bad", ["for ward", "1st", "", "comm", "duration", 3, ["x"]])
def test_invalid_phase_name_is_rejected_with_what_is_accepted(bad):
    rec = make(strict=True)
    with pytest.raises(TelemetryUsageError, match="Python identifier"):
        rec.phase(bad)
    lax = make()
    with lax.step():
        with lax.phase(bad):  # a no-op, training goes on
            pass
    assert lax.usage.counts == {"phase-name": 1}
    assert records(lax)[0].phases == {}


def test_log_values_are_attached_to_the_step_and_tokens_are_counted():
    torch = pytest.importorskip("torch")
    rec = make()
    with rec.step():
        rec.log({"loss": torch.tensor(2.5), "lr": 1e-3, "tokens": 64})
        rec.log({"tokens": 64, "loss": 1.5})
    [r] = records(rec)
    assert r.scalars == {"loss": 1.5, "lr": 1e-3}
    assert r.tokens == 128


def test_log_rejects_non_numbers_but_keeps_the_rest():
    torch = pytest.importorskip("torch")
    rec = make()
    with rec.step():
        rec.log({"loss": 1.0, "name": "abc", "vec": torch.zeros(3)})
    [r] = records(rec)
    assert r.scalars == {"loss": 1.0}
    assert rec.usage.counts == {"log-value": 2}


def test_many_threads_logging_lose_nothing():
    rec = Recorder(1 << 20)
    n_threads, per_thread = 8, 2000
    barrier = threading.Barrier(n_threads)

    def work(i):
        barrier.wait()
        for k in range(per_thread):
            rec.log({f"t{i}": float(k)})

    with rec.step():
        threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    events = rec.drain()
    logs = [e for e in events if e[0] == ev.LOG]
    assert len(logs) == n_threads * per_thread
    asm = Assembler(0, lambda ns: ns * 1e-9)
    [r] = asm.feed(events) + asm.flush_waiting()
    assert r.scalars == {f"t{i}": float(per_thread - 1) for i in range(n_threads)}


def test_full_buffer_drops_and_counts_instead_of_growing():
    rec = Recorder(1024)
    for _ in range(1500):
        rec.log({"x": 1.0})
    assert rec.buffered == 1024
    assert rec.dropped == 476


def test_events_between_steps_belong_to_the_next_step():
    rec = make()
    with rec.phase("data"):  # e.g. waiting for the batch before the step
        pass
    rec.log({"lr": 0.1})
    with rec.step():
        pass
    with rec.step():
        pass
    first, second = records(rec)
    assert first.phases == {"data": pytest.approx(0.001)} and first.scalars == {"lr": 0.1}
    assert second.phases == {} and second.scalars == {}


def test_a_finished_step_is_held_one_tick_for_late_events():
    asm = Assembler(0, lambda ns: ns * 1e-9)
    first = [(ev.STEP_BEGIN, 10, 0), (ev.STEP_END, 50, 0, 10, True, None, None)]
    assert asm.feed(first) == []  # held for one tick
    # an async collective's completion callback ran late, but completed at t=40, inside step 0
    late = [
        (ev.COLLECTIVE, 40, "all_reduce", 20, 4000, 4, "default", 20, 1.5),
        (ev.STEP_BEGIN, 60, 1),
        (ev.STEP_END, 90, 1, 60, True, None, None),
    ]
    [r0] = asm.feed(late)
    assert r0.step == 0 and r0.ops["all_reduce"].count == 1 and r0.comm_s == pytest.approx(20e-9)
    [r1] = asm.feed([])
    assert r1.step == 1 and r1.ops == {}

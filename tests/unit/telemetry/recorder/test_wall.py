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


def test_a_phase_name_has_one_context_and_the_same_name_nested_times_both_intervals():
    rec = make()
    assert rec.phase("forward") is rec.phase("forward")  # made at the name's first use, then handed out again
    with rec.step():
        with rec.phase("layer"):  # clock 2 ..
            with rec.phase("layer"):  # 3 .. 4: the inner interval
                pass
        # .. 5: the outer interval, its start kept while the inner one ran
    events = [e for e in rec.drain() if e[ev.KIND] == ev.PHASE]
    assert [(e[ev.PHASE_T0], e[ev.T]) for e in events] == [(3_000_000, 4_000_000), (2_000_000, 5_000_000)]
    assert rec.phase("layer")._t0 is None  # closed again


def test_open_step_and_current_phase_are_read_off_the_contexts():
    rec = make()
    assert rec.open_step is None and rec.current_phase is None
    with rec.step(index=7):
        assert rec.open_step == (7, 1_000_000)
        with rec.phase("forward"):
            assert rec.current_phase == "forward"
            with rec.phase("attention"):
                assert rec.current_phase == "attention"  # the innermost
            assert rec.current_phase == "forward"
        assert rec.current_phase is None
    assert rec.open_step is None


def test_the_step_context_is_handed_out_again_and_a_nested_one_leaves_the_open_step_alone():
    rec = make()
    with rec.step(tokens=10) as outer:
        inner = rec.step(tokens=99)  # while a step is open: a new context, not the open one
        assert inner is not outer
        with inner:
            pass
    with rec.step(tokens=20) as again:
        pass
    assert again is outer
    assert [(r.step, r.tokens) for r in records(rec)] == [(0, 10), (1, 20)]
    assert rec.usage.counts == {"nested-step": 1}


def test_a_step_appends_one_event_and_a_phase_one():
    rec = make()
    with rec.step():
        with rec.phase("forward"):
            pass
    assert [e[ev.KIND] for e in rec.drain()] == [ev.PHASE, ev.STEP_END]  # no STEP_BEGIN: STEP_END holds the start


def test_the_public_api_uses_the_active_recorders_contexts(caplog):
    import telemetry
    from telemetry.recorder import NULL, current

    rec = make()
    current.set_active(rec)
    try:
        with telemetry.step(tokens=5):
            with telemetry.phase("forward"):
                pass
            with telemetry.phase(["not", "a", "name"]):  # unhashable: rejected, reported, no exception
                pass
        assert telemetry.phase("forward") is rec.phase("forward")
    finally:
        current.set_active(NULL)
    [r] = records(rec)
    assert r.tokens == 5 and set(r.phases) == {"forward"}
    assert rec.usage.counts == {"phase-name": 1}
    assert telemetry.phase("forward") is NULL.phase("forward")  # the null recorder's, after

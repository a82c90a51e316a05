"""User code doing what user code does, in this process: raising inside steps and phases, calling
telemetry from many threads, DataLoader workers (fork and spawn), microsecond steps that overrun the
buffer, and a sink of a third-party package that raises."""

from __future__ import annotations

import gc
import importlib.metadata as md
import logging
import os
import socket
import threading
import time
import traceback

import psutil
import pytest
import torch

import telemetry
from telemetry import plugins
from telemetry.analysis.inputs.load import open_input
from telemetry.pipeline.sinks import Sink
from tests.helpers.servers import free_port, http_get


def metric(port: int, name: str, **labels: str) -> float | None:
    """The value of one sample on a rank's /metrics (None: no such sample)."""
    text = http_get(f"http://127.0.0.1:{port}/metrics").decode()
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


# ---- sinks another package could ship (found through the registry, as an entry point) ---------------
class CaptureSink(Sink):
    """Keeps every record it is given (the spans included) for the test to count."""

    name = "capture"
    records: list = []

    def __init__(self, config, ctx, run_info):
        CaptureSink.records = []

    def write(self, records):
        CaptureSink.records.extend(records)


class RaisingSink(Sink):
    """A backend whose client raises on every call: an error in write, a SystemExit (a library that
    calls sys.exit) in progress."""

    name = "raiser"
    calls = {"write": 0, "progress": 0}

    def __init__(self, config, ctx, run_info):
        RaisingSink.calls = {"write": 0, "progress": 0}

    def write(self, records):
        RaisingSink.calls["write"] += 1
        raise RuntimeError("the backend is down")

    def progress(self, progress):
        RaisingSink.calls["progress"] += 1
        raise SystemExit(3)


@pytest.fixture
def test_sinks(monkeypatch):
    entries = dict(plugins._entries(plugins.SINKS))
    for name, cls in (("capture", CaptureSink), ("raiser", RaisingSink)):
        entries[name] = md.EntryPoint(name=name, value=f"{__name__}:{cls.__name__}", group=plugins.SINKS)
    monkeypatch.setattr(plugins, "_entries", lambda group: entries if group == plugins.SINKS else {})


# ---- exceptions from user code ------------------------------------------------------------------
class Boom(Exception):
    pass


def user_code(exc: BaseException) -> None:
    raise exc


@telemetry.step
def decorated_step(exc: BaseException) -> None:
    user_code(exc)


@telemetry.phase("decorated")
def decorated_phase(exc: BaseException) -> None:
    user_code(exc)


def in_step(exc):
    with telemetry.step():
        user_code(exc)


def in_phase(exc):
    with telemetry.step():
        with telemetry.phase("forward"):
            user_code(exc)


def in_decorated_phase(exc):
    with telemetry.step():
        decorated_phase(exc)


def test_exceptions_from_user_code_propagate_unchanged(run_dir, fault_table):
    telemetry.init(run_dir=run_dir, job="raises", sinks=["store"], announce=False)
    cases = [
        ("with step()", in_step, Boom("in a step")),
        ("with phase()", in_phase, ValueError("in a phase")),
        ("@telemetry.step", decorated_step, Boom("in a decorated step")),
        ("@telemetry.phase", in_decorated_phase, Boom("in a decorated phase")),
        ("KeyboardInterrupt in a phase", in_phase, KeyboardInterrupt()),
    ]
    for _i, (what, call, exc) in enumerate(cases):
        with pytest.raises(BaseException) as info:
            call(exc)
        assert info.value is exc, what  # the same object, so the same type and message
        assert exc.__context__ is None and exc.__cause__ is None, what  # nothing chained by telemetry
        frames = traceback.extract_tb(exc.__traceback__)
        # intact: from here down to the raise, telemetry's decorator frames in between, nothing after
        assert frames[0].name == "test_exceptions_from_user_code_propagate_unchanged", what
        assert call.__name__ in [f.name for f in frames[1:3]] and frames[-1].name == "user_code", what
        with telemetry.step():  # and the loop goes on
            with telemetry.phase("forward"):
                pass
    stats = telemetry.shutdown()
    t = open_input(run_dir).table.sort_values("step")
    assert t["step"].tolist() == list(range(2 * len(cases)))
    assert t["ok"].tolist() == [False, True] * len(cases)  # each raising step recorded, ok = false
    assert (t["forward_s"].iloc[[2, 3, 5, 9]] > 0).all() and t["decorated_s"].iloc[6] > 0  # the phases too
    assert stats["usage_errors"] == {} and stats["sinks"]["store"]["dropped"] == 0
    fault_table.add(
        "user code",
        "exceptions raised inside telemetry.step(), phase(), @telemetry.step, "
        "@telemetry.phase, and a KeyboardInterrupt inside a phase",
        "each propagated unchanged (the same object, its traceback ending at the raise, nothing "
        "chained); the loop went on",
        f"nothing: all {len(t)} steps recorded, the {int((~t['ok']).sum())} that raised with "
        "ok = false and the time of their phases",
    )


# ---- many threads ------------------------------------------------------------------------------------
def test_telemetry_from_many_threads_at_once(run_dir, fault_table, test_sinks, caplog):
    threads, each = 8, 500
    telemetry.init(run_dir=run_dir, job="threads", sinks=["store", "capture"], announce=False, flush_interval_s=0.05)
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def loop(i: int) -> None:
        try:
            start.wait()
            for k in range(each):
                with telemetry.step():
                    with telemetry.phase("work"):
                        time.sleep(0)  # let the other threads in mid-step, as real work would
                        telemetry.log(thread=i, k=k)
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    with telemetry.step():  # the main loop's next step: whatever the threads left unattributed lands here
        pass
    stats = telemetry.shutdown()
    assert not errors and not any(w.is_alive() for w in workers)
    assert len(CaptureSink.records) == stats["records"]
    records = CaptureSink.records[:-1]  # the threads' steps (the last is the main loop's)
    steps = [r.step for r in CaptureSink.records]
    assert len(steps) == len(set(steps))  # no step recorded twice
    ignored = stats["usage_errors"].get("nested-step", 0)
    attempts = threads * each
    assert len(records) + ignored == attempts  # each step recorded, or counted as a misuse
    assert set(stats["usage_errors"]) <= {"nested-step"} and stats["events_dropped"] == 0
    phases = sum(1 for r in CaptureSink.records for s in r.spans if s.name == "work")
    spans_dropped = sum(r.spans_dropped for r in CaptureSink.records)
    assert phases + spans_dropped == attempts  # every phase, rejected step or not, is in a step
    assert stats["unattributed_events"] == 0 and stats["sinks"]["store"]["written"] == stats["records"]
    assert caplog.text.count("a step entered from another thread meanwhile is ignored") == (1 if ignored else 0)
    fault_table.add(
        "user code",
        f"{threads} threads at once, each {each} steps with a phase and a log",
        f"no exception in any thread; {len(records)} steps recorded, {ignored} entered while "
        "another thread's step was open (one step at a time per process): ignored, logged once",
        f"nothing unaccounted: {len(records)} recorded + {ignored} in stats()['usage_errors']"
        f"['nested-step'] = {attempts} steps; all {attempts} phases are in recorded steps"
        + (f" ({spans_dropped} over the 512-span cap, counted)" if spans_dropped else ""),
    )


# ---- DataLoader workers ---------------------------------------------------------------------------------
class Probe(torch.utils.data.Dataset):
    """Each item takes 10 ms and reports whether telemetry is live in the worker that made it (its
    recorder, session, threads), after the dataset code itself called telemetry as a user might."""

    def __len__(self):
        return 24

    def __getitem__(self, i):
        time.sleep(0.01)
        import telemetry as t
        from telemetry.recorder import NULL, current

        with t.step():  # user code inside a worker: must record nothing
            t.log(item=i)
        live = [th.name for th in threading.enumerate() if th.name.startswith("telemetry")]
        state = (current.active() is not NULL) + (t.session() is not None) + bool(t.stats()) + len(live)
        return torch.full((4,), float(i)), torch.tensor(state), torch.tensor(os.getpid())


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers_record_nothing_and_start_nothing(run_dir, fault_table, context):
    port = free_port()
    telemetry.init(run_dir=run_dir, job="workers", sinks=["store", "prometheus"], prometheus_port=port, announce=False)
    loader = torch.utils.data.DataLoader(
        Probe(), batch_size=4, num_workers=2, multiprocessing_context=context, persistent_workers=True
    )
    states, pids = [], set()
    t0 = time.monotonic()
    for _epoch in range(2):
        for _x, state, pid in telemetry.watch(loader):
            with telemetry.step():
                states += state.tolist()
                pids.update(pid.tolist())
    wall_s = time.monotonic() - t0
    stats = telemetry.shutdown()
    try:
        assert len(pids) == 2 and os.getpid() not in pids and all(psutil.pid_exists(p) for p in pids)
        with socket.socket() as s:  # the workers, still alive, hold no copy of the /metrics socket
            s.bind(("127.0.0.1", port))
    finally:
        del loader  # ends the persistent workers
        gc.collect()
    assert len(states) == 2 * 24 and set(states) == {0}  # telemetry off in every worker, every item
    t = open_input(run_dir).table
    assert t["step"].tolist() == list(range(12)) and (t["samples"] == 4).all()  # only the main loop's steps
    # the main process's wait for each batch: the first starts the workers, 4 items of 10 ms
    assert (t["data_s"] > 0).all() and t["data_s"].iloc[0] > 0.04
    assert stats["unattributed_events"] == 0 and stats["usage_errors"] == {}
    fault_table.add(
        "user code",
        f"DataLoader with 2 persistent {context}ed workers (2 epochs) whose dataset calls telemetry.step() and log()",
        f"finished in {wall_s:.1f} s; the workers had no session, no recorder, no telemetry thread, "
        "and held no copy of the /metrics socket (the port was free after shutdown while they "
        f"lived); the main loop's data wait recorded (median {t['data_s'].median() * 1e3:.0f} ms a "
        "batch)",
        "nothing: the main loop's 12 steps, and nothing from the workers (as documented)",
    )


# ---- microsecond steps overrunning the buffer ---------------------------------------------------------
def test_microsecond_steps_overrun_the_buffer_without_blocking_or_growing(run_dir, fault_table, caplog):
    port = free_port()
    telemetry.init(
        run_dir=run_dir,
        job="tight",
        sinks=["store", "prometheus"],
        prometheus_port=port,
        buffer_events=1024,
        announce=False,
    )
    n, chunk = 200_000, 1000
    proc = psutil.Process()
    for _ in range(2000):  # warm-up: the sinks' first writes (imports, buffers) are not the buffer's growth
        with telemetry.step():
            pass
    ticks = telemetry.stats()["ticks"]
    deadline = time.monotonic() + 30
    while telemetry.stats()["ticks"] < ticks + 2 and time.monotonic() < deadline:  # the sinks took them
        time.sleep(0.05)
    gc.collect()
    rss0 = peak = proc.memory_info().rss
    slowest = 0.0
    t0 = time.perf_counter()
    for c in range(n // chunk):
        c0 = time.perf_counter()
        for _ in range(chunk):
            with telemetry.step():
                pass
        slowest = max(slowest, time.perf_counter() - c0)
        if c % 20 == 0:
            peak = max(peak, proc.memory_info().rss)
    loop_s = time.perf_counter() - t0
    peak = max(peak, proc.memory_info().rss)
    live = telemetry.stats()
    exported = metric(port, "train_telemetry_dropped_total", sink="buffer")
    after = telemetry.stats()["events_dropped"]
    stats = telemetry.shutdown()
    growth_mib = (peak - rss0) / 2**20
    rate = n / loop_s
    # every step is one event (its end, which carries its start); a step whose event was accepted is recorded
    events = n + 2000
    assert live["events_dropped"] > n // 2  # most of them: the pipeline drains 1,024 events every 0.5 s
    # the scrape reads the count as it is then: the loop's drops, and any event another thread (the
    # sampler) put into the still-full buffer since (one, under the stress mode's slowed clocks)
    assert live["events_dropped"] <= exported <= after
    assert stats["events_dropped"] >= live["events_dropped"]
    written = stats["sinks"]["store"]["written"]
    assert written == stats["records"] and 0 < written < n
    # holding every event would take about 25 MiB (a tuple a step); bounded, the buffer is 1,024 events
    assert f"not delivered: buffer: {stats['events_dropped']} event(s) (the hot-path buffer was full)" in caplog.text
    assert growth_mib < 16, f"RSS grew {growth_mib:.1f} MiB"
    assert rate > 50_000 and slowest < 0.5, (rate, slowest)  # never blocked waiting for the pipeline
    fault_table.add(
        "user code",
        f"{n:,} empty steps in a tight loop, buffer_events 1024",
        f"never blocked: {rate / 1e3:.0f}k steps/s, slowest 1,000 steps {slowest * 1e3:.1f} ms; "
        f"memory grew {growth_mib:.1f} MiB (bound 16 MiB)",
        f"{stats['events_dropped']:,} of {events:,} events dropped, so {n + 2000 - written:,} of "
        f"{n + 2000:,} steps not recorded; counted in stats()['events_dropped'] and "
        f'train_telemetry_dropped_total{{sink="buffer"}} ({int(exported):,} at the end of the loop) '
        "and the shutdown warning",
    )


# ---- a sink that raises -------------------------------------------------------------------------------
def test_a_raising_sink_is_isolated_logged_once_and_counted(run_dir, fault_table, test_sinks, caplog):
    port = free_port()
    caplog.set_level(logging.WARNING, logger="telemetry")
    telemetry.init(
        run_dir=run_dir,
        job="raiser",
        sinks=["store", "prometheus", "raiser"],
        prometheus_port=port,
        flush_interval_s=0.05,
        announce=False,
    )
    n = 50
    for _i in range(n):
        with telemetry.step():
            with telemetry.phase("forward"):
                time.sleep(0.002)
    deadline = time.monotonic() + 10
    while telemetry.stats()["sinks"]["store"]["written"] < n and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # a few more ticks: progress heartbeats keep raising
    exported = metric(port, "train_telemetry_dropped_total", sink="raiser")
    scraped_steps = metric(port, "train_steps_total")
    stats = telemetry.shutdown()
    assert scraped_steps == n  # the Prometheus sink beside it has every step
    raiser = stats["sinks"]["raiser"]
    assert stats["sinks"]["store"]["written"] == n and stats["sinks"]["store"]["dropped"] == 0
    assert stats["pipeline_errors"] == 0
    assert raiser["dropped"] == n and exported == n  # every record it was given, counted and exported
    assert raiser["failures"] == RaisingSink.calls["write"] + RaisingSink.calls["progress"]
    assert RaisingSink.calls["progress"] >= 3  # the pipeline went on calling it, tick after tick
    messages = [r.getMessage() for r in caplog.records if r.name == "telemetry"]
    writes = [m for m in messages if "sink 'raiser' failed in write: RuntimeError: the backend is down" in m]
    progresses = [m for m in messages if "sink 'raiser' failed in progress: SystemExit" in m]
    assert len(writes) == 1 and len(progresses) == 1, messages
    t = open_input(run_dir).table
    assert t["step"].tolist() == list(range(n))
    fault_table.add(
        "user code",
        "a sink plug-in that raises on every call (RuntimeError in write, SystemExit in progress)",
        f"unaffected; the sink's {raiser['failures']} failures isolated, each kind logged once",
        f"what that sink was given: {raiser['dropped']} step records, counted in "
        "stats()['sinks']['raiser'] and train_telemetry_dropped_total{sink=\"raiser\"}; the store "
        f"and /metrics have all {n} steps",
    )

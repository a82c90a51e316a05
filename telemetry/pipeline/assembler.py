"""Events -> one StepRecord per (rank, step). Runs on the pipeline thread; pure logic, no I/O.

The attribution rule: an event whose time falls after the end of step N-1 and up to the end of step N
belongs to step N, so the data wait before a step and phases run between steps count towards the
next step, while ``duration_s`` is the step's own wall time. A finished step is held for one pipeline
tick before it is built, so that events appended late by other threads (an async collective's
callback, DDP's bucket callbacks) still reach their step. ``comm_s`` is the time blocked in collectives
inside the step's window, kept per phase too. Values logged as CUDA tensors (PendingValue) are waited
for, in order, at most ``pending_timeout_s``; then the unread values are dropped and counted.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Callable

from ..logonce import LogOnce
from ..recorder import events as ev
from ..recorder.events import (
    CKPT_BLOCKING,
    CKPT_BYTES,
    CKPT_IO_NS,
    CKPT_KIND,
    CKPT_T0,
    COLL_BLOCKED_NS,
    COLL_BYTES,
    COLL_E0,
    COLL_E1,
    COLL_FACTOR,
    COLL_GID,
    COLL_GROUP_NAME,
    COLL_OP,
    COLL_SEQ,
    COLL_T0,
    DATA_SAMPLES,
    DATA_T0,
    DATA_TOKENS,
    PHASE_E0,
    PHASE_E1,
    PHASE_NAME,
    PHASE_OK,
    PHASE_T0,
    STEP_E0,
    STEP_E1,
    STEP_INDEX,
    STEP_OK,
    STEP_SAMPLES,
    STEP_T0,
    STEP_TOKENS,
    VALUES,
    T,
)
from ..recorder.values import PendingValue
from .records import SPAN_CHECKPOINT, SPAN_COLLECTIVE, SPAN_DATA, SPAN_PHASE, OpStats, Span, StepRecord

if TYPE_CHECKING:
    from ..recorder.cuda import TimingEvent

MAX_SPANS_PER_STEP = 512
# A batch was ready when next() returned within the larger of READY_NS and a tenth of the step (taking one
# off the queue is not free on a loaded host: docs/instrumenting.md, "The input pipeline")
READY_NS = 2_000_000
READY_SHARE = 10  # of the step's time (its own span: the wait before it is not in it)
STORAGE_READ = "storage_read_bytes"  # the sampler's reading (devices/storage.py)
_FLOAT_MAX_INT = int(1.7976931348623157e308)  # a logged int beyond this is no float: kept as inf


class _Open:
    """What has arrived for the step being assembled."""

    __slots__ = ("phases", "colls", "data", "logs", "ckpts", "read_bytes")

    def __init__(self) -> None:
        self.phases: list[tuple] = []
        self.colls: list[tuple] = []
        self.data: list[tuple] = []
        self.logs: list[tuple] = []
        self.ckpts: list[tuple] = []
        self.read_bytes = 0.0  # bytes read from storage by the rank and its workers (sampler readings)


class Assembler:
    def __init__(
        self,
        rank: int,
        to_epoch_s: Callable[[int], float],
        pending_timeout_s: float = 10.0,
        monotonic: Callable[[], float] = time.monotonic,
        flops_per_token: float = 0.0,
        peak_flops: float = 0.0,
        release_events: Callable[[list], None] | None = None,
    ):
        self.rank = rank
        self._release_events = release_events  # give used CUDA events back to the pool
        self.flops_per_token = flops_per_token
        self.peak_flops = peak_flops
        self.last_device: dict[str, float] | None = None
        self.groups_seen: dict[str, None] = {}  # the process groups' labels this rank has used, in order
        self._epoch = to_epoch_s
        self._open = _Open()
        self._waiting: list[tuple[float, tuple, _Open]] = []  # ended, not yet ready to build
        self._pending_timeout = pending_timeout_s
        self._monotonic = monotonic
        self.unread_values = 0
        self.nonfinite_values = 0
        self._storage_read: float | None = None  # the last storage_read_bytes reading (a counter)
        self._once = LogOnce()
        self.last_step: int | None = None
        self.last_step_end_s: float | None = None
        self._held: list[list] = []  # [STEP_END event, _Open, round it ended in]
        self._round = 0

    def feed(self, events: list[tuple]) -> list[StepRecord]:
        """Consume events; return the records that are complete (those ended before this call)."""
        self._round += 1
        held = self._held
        for e in events:
            kind = e[0]
            kind = ev.HOST_KIND.get(kind, kind)
            if kind == ev.STEP_END:
                held.append([e, self._open, self._round])
                self._open = _Open()
                self.last_step = e[STEP_INDEX]
                self.last_step_end_s = self._epoch(e[T])
                continue
            if kind == ev.STEP_BEGIN:
                continue  # the STEP_END repeats it; the recorder's open_step serves the heartbeat
            read = 0.0
            if kind == ev.DEVICE:
                self.last_device = e[VALUES]
                total = e[VALUES].get(STORAGE_READ)
                if total is None:
                    continue
                read = total - (self._storage_read or 0.0)  # the sampler's counter starts at 0
                self._storage_read = total
                if read <= 0:
                    continue
            acc = self._open
            if held and e[T] <= held[-1][0][T]:
                for h in held:  # a late event: the held step whose window holds its time
                    if e[T] <= h[0][T]:
                        acc = h[1]
                        break
            if kind == ev.PHASE:
                acc.phases.append(e)
            elif kind == ev.COLLECTIVE:
                acc.colls.append(e)
            elif kind == ev.LOG:
                acc.logs.append(e)
            elif kind == ev.DATA:
                acc.data.append(e)
            elif kind == ev.CHECKPOINT:
                acc.ckpts.append(e)
            elif kind == ev.DEVICE:
                acc.read_bytes += read
        while held and held[0][2] < self._round:
            end, acc, _ = held.pop(0)
            self._waiting.append((self._monotonic(), end, acc))
        return self._release()

    def flush_waiting(self) -> list[StepRecord]:
        """At shutdown: build every step, with what device times and values are ready."""
        for end, acc, _ in self._held:
            self._waiting.append((self._monotonic(), end, acc))
        self._held.clear()
        out = [self._finish(end, acc) for _, end, acc in self._waiting]
        self._waiting.clear()
        return out

    @property
    def unattributed(self) -> int:
        """Events after the last step ended (they would belong to a step that never came)."""
        a = self._open
        return len(a.phases) + len(a.colls) + len(a.data) + len(a.logs) + len(a.ckpts)

    @property
    def unattributed_work(self) -> int:
        """Of those, the user's own phases and logged values: work meant for a step (a collective, a data
        wait or a checkpoint after the last step is the job's wind-down: a final barrier, the last save)."""
        a = self._open
        return len(a.phases) + len(a.logs)

    # ---- internals --------------------------------------------------------------------
    def _release(self) -> list[StepRecord]:
        out = []
        now = self._monotonic()
        while self._waiting:
            since, end, acc = self._waiting[0]
            if not _ready(end, acc) and now - since < self._pending_timeout:
                break  # in order: later steps wait behind this one
            self._waiting.pop(0)
            out.append(self._finish(end, acc))
        return out

    def _finish(self, end: tuple, acc: _Open) -> StepRecord:
        used: list = []
        host_duration = None
        if end[0] == ev.STEP_END_DEV:  # device timing: place every interval on the GPU timeline
            host_duration = (end[T] - end[STEP_T0]) * 1e-9
            end, acc = _on_gpu_timeline(end, acc, used)
        rec = self._resolve(self._build(end, acc))
        self._check_finite(rec)
        if host_duration is not None:
            rec = rec._replace(host_duration_s=host_duration)
        if used and self._release_events is not None:
            self._release_events(used)
        return rec

    def _check_finite(self, rec: StepRecord) -> None:
        """Count NaN and infinite logged values, and say so once per name: a diverged loss is
        worth knowing at once. They are kept (the store writes them as such), never dropped."""
        for k, v in rec.scalars.items():
            if type(v) is int and not -_FLOAT_MAX_INT <= v <= _FLOAT_MAX_INT:  # no float holds it: infinite
                rec.scalars[k] = v = math.inf if v > 0 else -math.inf
            if type(v) is float and not math.isfinite(v):
                self.nonfinite_values += 1
                self._once(
                    k,
                    "telemetry: rank %d step %d: telemetry.log(%s=%s) is not a finite number "
                    "(kept as %s; further non-finite values are counted in stats()['nonfinite_values'])",
                    rec.rank,
                    rec.step,
                    k,
                    v,
                    v,
                )

    def _resolve(self, rec: StepRecord) -> StepRecord:
        if not any(type(v) is PendingValue for v in rec.scalars.values()):
            return rec
        scalars = {}
        for k, v in rec.scalars.items():
            if type(v) is PendingValue:
                if v.ready():
                    scalars[k] = v.value()
                else:
                    self.unread_values += 1
                continue
            scalars[k] = v
        return rec._replace(scalars=scalars)

    def _build(self, end: tuple, acc: _Open) -> StepRecord:
        t0, t1, index = end[STEP_T0], end[T], end[STEP_INDEX]
        epoch = self._epoch
        phases: dict[str, float] = {}
        spans: list[Span] = []
        data_samples, data_tokens = _data_waits(acc.data, epoch, phases, spans)
        for p in acc.phases:
            name, p0, p1 = p[PHASE_NAME], p[PHASE_T0], p[T]
            phases[name] = phases.get(name, 0.0) + (p1 - p0) * 1e-9
            spans.append(Span(SPAN_PHASE, name, epoch(p0), epoch(p1), p[PHASE_OK]))
        comm_ns, phase_comm, ops, groups = _collectives(acc.colls, acc.phases, t0, t1, epoch, spans)
        for g in groups:
            self.groups_seen.setdefault(g, None)
        scalars, log_tokens, log_samples = _logged(acc.logs)
        io = None
        if acc.ckpts:  # their spans first: a step's spans past the bound are dropped from the end
            ck: list[Span] = []
            io = _checkpoints(acc.ckpts, epoch, ck)
            spans[:0] = ck
        if self._storage_read is not None:  # from the first reading on: 0 in a step that read nothing
            io = io or {}
            io["read_bytes"] = acc.read_bytes
        if acc.data:  # 1 when every batch of the step was already waiting
            io = io or {}
            ready_ns = max(READY_NS, (t1 - t0) // READY_SHARE)
            io["input_ready"] = float(all(d[T] - d[DATA_T0] <= ready_ns for d in acc.data))
        tokens, samples = end[STEP_TOKENS], end[STEP_SAMPLES]
        if tokens is None:
            tokens = log_tokens if log_tokens is not None else (data_tokens or None)
        if samples is None:
            samples = log_samples if log_samples is not None else (data_samples or None)

        dropped = max(0, len(spans) - MAX_SPANS_PER_STEP)
        if dropped:
            spans = spans[:MAX_SPANS_PER_STEP]
        duration_s = (t1 - t0) * 1e-9
        tokens = _count(tokens)
        return StepRecord(
            rank=self.rank,
            step=index,
            start_s=epoch(t0),
            duration_s=duration_s,
            ok=bool(end[STEP_OK]),
            phases=phases,
            phase_comm=phase_comm,
            comm_s=comm_ns * 1e-9,
            ops={k: OpStats(*v) for k, v in ops.items()},
            tokens=tokens,
            samples=_count(samples),
            scalars=scalars,
            spans=tuple(spans),
            spans_dropped=dropped,
            device=self.last_device,
            mfu=self._mfu(tokens, duration_s),
            # every group this rank has used, 0 in a step that did not use it
            comm_groups={g: _seconds_bytes(groups.get(g)) for g in self.groups_seen} or None,
            io=io,
        )

    def _mfu(self, tokens: int | None, duration_s: float) -> float | None:
        """Model FLOPs utilization of one step, when FLOPs per token and the peak are known."""
        if tokens and self.flops_per_token and self.peak_flops and duration_s > 0:
            return tokens * self.flops_per_token / (duration_s * self.peak_flops)
        return None


def _data_waits(
    data: list[tuple], epoch: Callable[[int], float], phases: dict[str, float], spans: list[Span]
) -> tuple[int, int]:
    """Add the data-loader waits to ``phases["data"]`` and ``spans``; return the samples and
    tokens the loader counted."""
    data_ns = data_samples = data_tokens = 0
    for d in data:
        d0, d1 = d[DATA_T0], d[T]
        data_ns += d1 - d0
        data_samples += d[DATA_SAMPLES] or 0
        data_tokens += d[DATA_TOKENS] or 0
        spans.append(Span(SPAN_DATA, "data", epoch(d0), epoch(d1)))
    if data:
        phases["data"] = phases.get("data", 0.0) + data_ns * 1e-9
    return data_samples, data_tokens


def _collectives(
    colls: list[tuple], phase_events: list[tuple], t0: int, t1: int, epoch: Callable[[int], float], spans: list[Span]
) -> tuple[int, dict[str, float], dict[str, list], dict[str, list]]:
    """Time blocked in collectives during the step (ns), and inside each phase (s); per-op stats; per
    group (its label: the parallel dimension) the time blocked in the step (s) and the bytes.

    A synchronous op blocks for its whole interval: the part inside the step's window counts, and
    each phase it overlaps is charged the overlap. An async op's blocked time is its ``wait()``,
    which ended at the op's end: it counts when that falls in the step, charged to the phase open
    then."""
    comm_ns = 0
    phase_comm: dict[str, float] = {}
    ops: dict[str, list] = {}
    groups: dict[str, list] = {}  # [seconds blocked, bytes]
    for c in colls:
        op, c0, c1, nbytes, blocked_ns = c[COLL_OP], c[COLL_T0], c[T], c[COLL_BYTES], c[COLL_BLOCKED_NS]
        before = comm_ns
        if blocked_ns == c1 - c0:  # synchronous
            comm_ns += max(0, min(c1, t1) - max(c0, t0))
            for p in phase_events:
                overlap = min(c1, p[T]) - max(c0, p[PHASE_T0])
                if overlap > 0:
                    name = p[PHASE_NAME]
                    phase_comm[name] = phase_comm.get(name, 0.0) + overlap * 1e-9
        elif t0 <= c1 <= t1:
            comm_ns += blocked_ns
            if blocked_ns:
                for p in phase_events:
                    if p[PHASE_T0] <= c1 <= p[T]:
                        name = p[PHASE_NAME]
                        phase_comm[name] = phase_comm.get(name, 0.0) + blocked_ns * 1e-9
        g = groups.get(c[COLL_GROUP_NAME])
        if g is None:
            g = groups[c[COLL_GROUP_NAME]] = [0.0, 0]
        g[0] += (comm_ns - before) * 1e-9
        g[1] += nbytes
        s = ops.get(op)
        if s is None:
            s = ops[op] = [0, 0.0, 0.0, 0, 0.0]  # the fields of OpStats
        s[0] += 1
        s[1] += (c1 - c0) * 1e-9
        s[2] += blocked_ns * 1e-9
        s[3] += nbytes
        s[4] += nbytes * c[COLL_FACTOR]
        call = (c[COLL_GID], c[COLL_SEQ]) if len(c) > COLL_SEQ else ("", -1)  # (an event made by hand: none)
        spans.append(Span(SPAN_COLLECTIVE, op, epoch(c0), epoch(c1), True, nbytes, c[COLL_GROUP_NAME], *call))
    return comm_ns, phase_comm, ops, groups


def _checkpoints(ckpts: list[tuple], epoch: Callable[[int], float], spans: list[Span]) -> dict[str, float]:
    """A step's checkpoints: seconds blocked, seconds of async upload, bytes, seconds of the rank's own
    storage I/O, and how many saves returned in it; each one a span."""
    blocked = upload = io = 0.0
    nbytes = saves = 0
    for c in ckpts:
        c0, c1, n = c[CKPT_T0], c[T], int(c[CKPT_BYTES] or 0)
        if c[CKPT_BLOCKING]:
            blocked += (c1 - c0) * 1e-9
            name = c[CKPT_KIND]
            saves += name == "save"
        else:
            upload += (c1 - c0) * 1e-9
            name = f"{c[CKPT_KIND]}.async"
        nbytes += n
        io += (c[CKPT_IO_NS] or 0) * 1e-9
        spans.append(Span(SPAN_CHECKPOINT, name, epoch(c0), epoch(c1), True, n))
    return {
        "checkpoint_s": blocked,
        "checkpoint_async_s": upload,
        "checkpoint_bytes": float(nbytes),
        "checkpoint_io_s": io,
        "checkpoint_saves": float(saves),
    }


def _logged(logs: list[tuple]) -> tuple[dict[str, Any], int | None, int | None]:
    """The last value logged per name; ``tokens`` and ``samples`` logged in the step, summed (a
    count that is not a finite number is kept as a scalar, where it is reported, not summed)."""
    scalars: dict[str, Any] = {}
    log_tokens = log_samples = None
    for e in logs:
        for k, v in e[VALUES].items():
            if k == "tokens" and type(v) is not PendingValue and _finite(v):
                log_tokens = (log_tokens or 0) + int(v)
            elif k == "samples" and type(v) is not PendingValue and _finite(v):
                log_samples = (log_samples or 0) + int(v)
            else:
                scalars[k] = v
    return scalars, log_tokens, log_samples


def _seconds_bytes(g: list | None) -> tuple[float, int]:
    """A group's [seconds blocked, bytes] in a step, (0.0, 0) for one the step did not use."""
    return (0.0, 0) if g is None else (g[0], g[1])


def _finite(v: object) -> bool:
    return type(v) is not float or math.isfinite(v)


def _ready(end: tuple, acc: _Open) -> bool:
    """Device times and device values of a step can be read without waiting."""
    if end[0] == ev.STEP_END_DEV:
        if not _done(end[STEP_E1]):
            return False
        for e in acc.phases:
            if e[0] == ev.PHASE_DEV and not _done(e[PHASE_E1]):
                return False
        for e in acc.colls:
            if e[0] == ev.COLLECTIVE_DEV and not _done(e[COLL_E1]):
                return False
    for e in acc.logs:
        for v in e[VALUES].values():
            if type(v) is PendingValue and not v.ready():
                return False
    return True


def _done(event: TimingEvent) -> bool:
    try:
        return bool(event.query())
    except Exception:  # noqa: BLE001 - a broken CUDA event must not hold the pipeline
        return True  # a broken event must not hold the pipeline; its interval falls back to host time


def _on_gpu_timeline(end: tuple, acc: _Open, used: list) -> tuple[tuple, _Open]:
    """Rewrite a step's intervals in GPU time: each event's offset from the step's start event,
    added to the step's host start. Intervals before the step (or whose events failed) keep their
    host times. The step keeps its host start; its duration becomes the GPU's (start to end
    event), so that compute = duration - comm is measured on one clock. Returns host-kind events."""
    se0, se1 = end[STEP_E0], end[STEP_E1]
    used.extend((se0, se1))
    base = end[STEP_T0]
    t_end = end[T]
    try:
        t_end = base + int(se0.elapsed_time(se1) * 1e6)
    except Exception:  # noqa: BLE001 - keep the host duration
        pass
    end = (ev.STEP_END, t_end) + end[STEP_INDEX:STEP_E0]

    def place(e0: TimingEvent, e1: TimingEvent, h0: int, h1: int) -> tuple[int, int, bool]:
        used.extend((e0, e1))
        if h0 < base:
            return h0, h1, False
        try:
            off = se0.elapsed_time(e0)  # milliseconds
            dur = e0.elapsed_time(e1)
        except Exception:  # noqa: BLE001 - not completed (timed out) or invalid
            return h0, h1, False
        start = base + int(off * 1e6)
        return start, start + int(max(dur, 0.0) * 1e6), True

    out = _Open()
    out.data, out.logs, out.ckpts = acc.data, acc.logs, acc.ckpts  # host-timed: durations as the host saw them
    for e in acc.phases:
        if e[0] == ev.PHASE_DEV:
            p0, p1, _ = place(e[PHASE_E0], e[PHASE_E1], e[PHASE_T0], e[T])
            e = (ev.PHASE, p1, e[PHASE_NAME], p0, e[PHASE_OK])
        out.phases.append(e)
    for e in acc.colls:
        if e[0] == ev.COLLECTIVE_DEV:
            c0, c1, on_gpu = place(e[COLL_E0], e[COLL_E1], e[COLL_T0], e[T])
            if on_gpu:  # the GPU interval is the time the compute stream was held by the op
                e = (
                    (ev.COLLECTIVE, c1, e[COLL_OP], c0)
                    + e[COLL_BYTES:COLL_BLOCKED_NS]
                    + (c1 - c0, e[COLL_FACTOR], e[COLL_GID], e[COLL_SEQ])
                )
            else:
                e = (ev.COLLECTIVE,) + e[T:COLL_E0]
        out.colls.append(e)
    return end, out


def _count(value: Any) -> int | None:  # a count as logged: any number, or what is not one
    if value is None:
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        return None
    return n if n >= 0 else None

"""Events -> one StepRecord per (rank, step). Runs on the pipeline thread; pure logic, no I/O.

Attribution rule: an event whose time falls after the end of step N-1 and up to the end of step N
belongs to step N. So the data-loader wait before a step (``for batch in telemetry.watch(loader)``)
and phases run between steps count towards the next step, while ``duration_s`` is the step's own
wall time. A finished step is held for one pipeline tick before it is built, so that events
appended late by other threads (an async collective's completion callback, DDP's bucket
callbacks) still reach the step their time belongs to.
``comm_s`` is the time blocked in collectives inside the step's window; per-phase blocked time is
kept so that detectors can separate compute from waiting.

Values logged as CUDA tensors arrive as PendingValue; a record waits (in order) until its values
are on the host, for at most ``pending_timeout_s``, then the unread values are dropped and counted.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from . import events as ev
from .records import SPAN_COLLECTIVE, SPAN_DATA, SPAN_PHASE, OpStats, Span, StepRecord
from .values import PendingValue

MAX_SPANS_PER_STEP = 512


class _Open:
    """What has arrived for the step being assembled."""

    __slots__ = ("phases", "colls", "data", "logs")

    def __init__(self) -> None:
        self.phases: list[tuple] = []
        self.colls: list[tuple] = []
        self.data: list[tuple] = []
        self.logs: list[tuple] = []


class Assembler:
    def __init__(self, rank: int, to_epoch_s: Callable[[int], float],
                 pending_timeout_s: float = 10.0, monotonic: Callable[[], float] = time.monotonic,
                 flops_per_token: float = 0.0, peak_flops: float = 0.0,
                 release_events: Callable[[list], None] | None = None):
        self.rank = rank
        self._release_events = release_events  # give used CUDA events back to the pool
        self.flops_per_token = flops_per_token
        self.peak_flops = peak_flops
        self.last_device: dict[str, float] | None = None
        self._epoch = to_epoch_s
        self._open = _Open()
        self._waiting: list[tuple[float, tuple, _Open]] = []  # ended, not yet ready to build
        self._pending_timeout = pending_timeout_s
        self._monotonic = monotonic
        self.unread_values = 0
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
            if kind == ev.STEP_END:
                held.append([e, self._open, self._round])
                self._open = _Open()
                self.last_step = e[2]
                self.last_step_end_s = self._epoch(e[1])
                continue
            if kind == ev.STEP_BEGIN:
                continue  # the STEP_END repeats it; the recorder's open_step serves the heartbeat
            if kind == ev.DEVICE:
                self.last_device = e[2]
                continue
            acc = self._open
            if held and e[1] <= held[-1][0][1]:
                for h in held:  # a late event: the held step whose window holds its time
                    if e[1] <= h[0][1]:
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
        return len(a.phases) + len(a.colls) + len(a.data) + len(a.logs)

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
        if len(end) == 9:  # device timing: place every interval on the GPU timeline
            host_duration = (end[1] - end[3]) * 1e-9
            end, acc = _on_gpu_timeline(end, acc, used)
        rec = self._resolve(self._build(end, acc))
        if host_duration is not None:
            rec = rec._replace(host_duration_s=host_duration)
        if used and self._release_events is not None:
            self._release_events(used)
        return rec

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
        _, t1, index, t0, ok, tokens, samples = end[:7]
        epoch = self._epoch
        phases: dict[str, float] = {}
        phase_comm: dict[str, float] = {}
        spans: list[Span] = []
        data_ns = 0
        data_samples = 0
        data_tokens = 0
        for _, d1, d0, d_samples, d_tokens in acc.data:
            data_ns += d1 - d0
            data_samples += d_samples or 0
            data_tokens += d_tokens or 0
            spans.append(Span(SPAN_DATA, "data", epoch(d0), epoch(d1)))
        if acc.data:
            phases["data"] = phases.get("data", 0.0) + data_ns * 1e-9

        for _, p1, name, p0, p_ok, *_ in acc.phases:
            phases[name] = phases.get(name, 0.0) + (p1 - p0) * 1e-9
            spans.append(Span(SPAN_PHASE, name, epoch(p0), epoch(p1), p_ok))
        comm_ns = 0
        ops: dict[str, list] = {}
        for c in acc.colls:
            _, c1, op, c0, nbytes, _gsize, _gname, blocked_ns, factor = c[:9]
            sync = blocked_ns == c1 - c0
            if sync:
                comm_ns += max(0, min(c1, t1) - max(c0, t0))
                for _, p1, name, p0, _ok, *_ in acc.phases:
                    overlap = min(c1, p1) - max(c0, p0)
                    if overlap > 0:
                        phase_comm[name] = phase_comm.get(name, 0.0) + overlap * 1e-9
            elif t0 <= c1 <= t1:
                comm_ns += blocked_ns
                if blocked_ns:  # an async op's wait ended at c1: charge the phase open then
                    for _, p1, name, p0, _ok, *_ in acc.phases:
                        if p0 <= c1 <= p1:
                            phase_comm[name] = phase_comm.get(name, 0.0) + blocked_ns * 1e-9
            s = ops.get(op)
            if s is None:
                s = ops[op] = [0, 0.0, 0.0, 0, 0.0]
            s[0] += 1
            s[1] += (c1 - c0) * 1e-9
            s[2] += blocked_ns * 1e-9
            s[3] += nbytes
            s[4] += nbytes * factor
            spans.append(Span(SPAN_COLLECTIVE, op, epoch(c0), epoch(c1), True, nbytes))

        scalars: dict[str, Any] = {}
        log_tokens = log_samples = None
        for _, _t, values in acc.logs:
            for k, v in values.items():
                if k == "tokens" and type(v) is not PendingValue:
                    log_tokens = (log_tokens or 0) + int(v)
                elif k == "samples" and type(v) is not PendingValue:
                    log_samples = (log_samples or 0) + int(v)
                else:
                    scalars[k] = v
        if tokens is None:
            tokens = log_tokens if log_tokens is not None else (data_tokens or None)
        if samples is None:
            samples = log_samples if log_samples is not None else (data_samples or None)

        dropped = max(0, len(spans) - MAX_SPANS_PER_STEP)
        if dropped:
            spans = spans[:MAX_SPANS_PER_STEP]
        start_s = epoch(t0)
        duration_s = (t1 - t0) * 1e-9
        tokens = _count(tokens)
        mfu = None
        if tokens and self.flops_per_token and self.peak_flops and duration_s > 0:
            mfu = tokens * self.flops_per_token / (duration_s * self.peak_flops)
        return StepRecord(
            rank=self.rank, step=index, start_s=start_s, duration_s=duration_s, ok=bool(ok),
            phases=phases, phase_comm=phase_comm, comm_s=comm_ns * 1e-9,
            ops={k: OpStats(*v) for k, v in ops.items()},
            tokens=tokens, samples=_count(samples), scalars=scalars,
            spans=tuple(spans), spans_dropped=dropped, device=self.last_device, mfu=mfu)


def _ready(end: tuple, acc: _Open) -> bool:
    """Device times and device values of a step can be read without waiting."""
    if len(end) == 9:
        if not _done(end[8]):
            return False
        for e in acc.phases:
            if len(e) == 7 and not _done(e[6]):
                return False
        for e in acc.colls:
            if len(e) == 11 and not _done(e[10]):
                return False
    for _, _t, values in acc.logs:
        for v in values.values():
            if type(v) is PendingValue and not v.ready():
                return False
    return True


def _done(event: Any) -> bool:
    try:
        return bool(event.query())
    except Exception:  # noqa: BLE001
        return True  # a broken event must not hold the pipeline; its interval falls back to host time


def _on_gpu_timeline(end: tuple, acc: _Open, used: list) -> tuple[tuple, _Open]:
    """Rewrite a step's intervals in GPU time: each event's offset from the step's start event,
    added to the step's host start. Intervals before the step (or whose events failed) keep their
    host times. The step keeps its host start; its duration becomes the GPU's (start to end
    event), so that compute = duration - comm is measured on one clock."""
    se0, se1 = end[7], end[8]
    used.extend((se0, se1))
    base = end[3]
    try:
        end = end[:1] + (base + int(se0.elapsed_time(se1) * 1e6),) + end[2:]
    except Exception:  # noqa: BLE001 - keep the host duration
        pass

    def place(e0: Any, e1: Any, h0: int, h1: int) -> tuple[int, int, bool]:
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
    out.data, out.logs = acc.data, acc.logs
    for e in acc.phases:
        if len(e) == 7:
            p0, p1, _ = place(e[5], e[6], e[3], e[1])
            e = (e[0], p1, e[2], p0, e[4])
        out.phases.append(e)
    for e in acc.colls:
        if len(e) == 11:
            c0, c1, on_gpu = place(e[9], e[10], e[3], e[1])
            if on_gpu:  # the GPU interval is the time the compute stream was held by the op
                e = (e[0], c1, e[2], c0, e[4], e[5], e[6], c1 - c0, e[8])
            else:
                e = e[:9]
        out.colls.append(e)
    return end[:7], out


def _count(value: Any) -> int | None:
    if value is None:
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        return None
    return n if n >= 0 else None

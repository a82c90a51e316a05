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
                 flops_per_token: float = 0.0, peak_flops: float = 0.0):
        self.rank = rank
        self.flops_per_token = flops_per_token
        self.peak_flops = peak_flops
        self.last_device: dict[str, float] | None = None
        self._epoch = to_epoch_s
        self._open = _Open()
        self._waiting: list[tuple[float, StepRecord]] = []
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
            self._waiting.append((self._monotonic(), self._build(end, acc)))
        return self._release()

    def flush_waiting(self) -> list[StepRecord]:
        """At shutdown: build every held step and release every record, reading what values are ready."""
        for end, acc, _ in self._held:
            self._waiting.append((self._monotonic(), self._build(end, acc)))
        self._held.clear()
        out = []
        for _, rec in self._waiting:
            out.append(self._resolve(rec, force=True))
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
            since, rec = self._waiting[0]
            if not _ready(rec) and now - since < self._pending_timeout:
                break
            self._waiting.pop(0)
            out.append(self._resolve(rec, force=True))
        return out

    def _resolve(self, rec: StepRecord, force: bool) -> StepRecord:
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
        _, t1, index, t0, ok, tokens, samples = end
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

        for _, p1, name, p0, p_ok in acc.phases:
            phases[name] = phases.get(name, 0.0) + (p1 - p0) * 1e-9
            spans.append(Span(SPAN_PHASE, name, epoch(p0), epoch(p1), p_ok))
        comm_ns = 0
        ops: dict[str, list] = {}
        for c in acc.colls:
            _, c1, op, c0, nbytes, _gsize, _gname, blocked_ns, factor = c
            sync = blocked_ns == c1 - c0
            if sync:
                comm_ns += max(0, min(c1, t1) - max(c0, t0))
                for _, p1, name, p0, _ok in acc.phases:
                    overlap = min(c1, p1) - max(c0, p0)
                    if overlap > 0:
                        phase_comm[name] = phase_comm.get(name, 0.0) + overlap * 1e-9
            elif t0 <= c1 <= t1:
                comm_ns += blocked_ns
                if blocked_ns:  # an async op's wait ended at c1: charge the phase open then
                    for _, p1, name, p0, _ok in acc.phases:
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


def _ready(rec: StepRecord) -> bool:
    return all(v.ready() for v in rec.scalars.values() if type(v) is PendingValue)


def _count(value: Any) -> int | None:
    if value is None:
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        return None
    return n if n >= 0 else None

"""Prometheus: one /metrics endpoint per rank, on ``prometheus_port + local_rank``, from a registry of
this sink's own (never the process-global one).

Every series carries ``job``, ``rank`` (always the exporting rank: a scored rank is ``scored_rank``),
``local_rank`` and ``node``; ``phase``, ``op`` and ``name`` are capped at ``max_label_values`` values per
rank (beyond: dropped and counted); never a step number or a shape as a label. ``metrics_level`` leaves
whole families out (:mod:`telemetry.metrics.names`), and a value not known yet has no sample: never a
false zero. Checkpoint I/O by part: :func:`storage_by_kind`; exemplars only on steps the OTLP sink
exports; targets: :mod:`.prometheus_targets`; scrape-time collectors: :mod:`.prometheus_collectors`. What
is exported, and why: docs/exporters.md, "Prometheus".
"""

from __future__ import annotations

import errno
import logging
import math
import os
import platform
import ssl
import sys
import time
import weakref
from typing import Any, Sequence, TypeGuard

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from telemetry.metrics import names as N
from telemetry.metrics.names import BASE_LABELS
from telemetry.pipeline import records as rec_types
from telemetry.pipeline.records import OnlineResult, Progress, StepRecord
from telemetry.pipeline.sinks import TRACE_SAMPLER, Sink, SinkStartError
from telemetry.traceids import trace_id_hex

from .device_metrics import DeviceCollector
from .labels import LabelGate
from .prometheus_collectors import DropCollector, FindingsCollector
from .prometheus_targets import Targets, target_address
from .pushgateway import PushWorker

log = logging.getLogger("telemetry")
PORT_TRIES = 16  # a taken port: this many of the local rank's own ports are tried


# The kinds online detection reports (train_findings{kind} has a sample for each after its first analysis).
ONLINE_KINDS = (
    "straggler",
    "data_stall",
    "input_bound",
    "slow_comm",
    "regression",
    "stage_imbalance",
    "memory_growth",
    "low_utilization",
    "utilization_regression",
    "hang",
    "rank_lost",
)


class _FirstValue:
    """One series of this rank that has no sample until its first real value, so that what is not
    known (MFU not configured, a rank whose steps carry no tokens) is absent, never a false 0."""

    __slots__ = ("_metric", "_values", "_child")

    def __init__(self, metric: Any, values: list[str]) -> None:
        self._metric = metric
        self._values = values
        self._child: Any = None

    def _get(self) -> Any:
        if self._child is None:
            self._child = self._metric.labels(*self._values)
        return self._child

    def set(self, value: float) -> None:
        self._get().set(value)

    def inc(self, value: float) -> None:
        self._get().inc(value)


def _close_in_forked_children(server: Any) -> None:
    """A forked child (a DataLoader worker) inherits the listening socket of this rank's /metrics:
    it is closed there, so that the child serves nothing and does not hold the port after this
    rank's shutdown (a worker that outlives it would otherwise keep the port taken). Only the
    child's copy is closed; the parent serves on."""
    ref = weakref.ref(server)

    def after_in_child() -> None:
        served = ref()
        if served is not None:
            try:
                served.socket.close()
            except OSError:
                pass

    os.register_at_fork(after_in_child=after_in_child)


def _check_tls(tls: dict) -> None:
    """Load the certificate, key and CA before binding: prometheus_client binds the port first and
    loads them after, so a bad file would leave a socket listening, unserved, behind the error."""
    try:
        check = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        check.load_cert_chain(tls["certfile"], tls["keyfile"])
        if tls.get("client_cafile"):
            check.load_verify_locations(tls["client_cafile"])
    except (OSError, ssl.SSLError) as exc:
        raise OSError(
            f"cannot serve metrics over TLS (prometheus_certfile, prometheus_keyfile, prometheus_client_cafile): {exc}"
        ) from None


class PrometheusSink(Sink):
    name = "prometheus"

    def __init__(
        self, config: Any, ctx: Any, run_info: dict[str, Any], registry: CollectorRegistry | None = None
    ) -> None:
        self.config = config
        self.ctx = ctx
        self.job = config.job
        self.port = config.prometheus_port + ctx.local_rank
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.labels = {"job": config.job, **ctx.labels()}
        self._run_info = run_info
        self._trace_sampled: Any = None  # decided at the first write (see _exemplar)
        self._gates = {k: LabelGate(k, config.max_label_values) for k in ("phase", "op", "name", "group")}
        self.level = getattr(config, "metrics_level", "full")
        self._build_metrics(config)
        self._push: PushWorker | None = None
        self.registry.register(
            DropCollector(
                self.labels,
                run_info.get("stats", dict),
                self._gates.values(),
                lambda: self._push.failures if self._push is not None else None,
            )
        )
        if (run_info.get("device") or {}).get("storage_read"):
            # Storage reads are counted from init: the series is born at 0, so that the bytes the job reads
            # before the first scrape (a dataset's first read-ahead) are an increase Prometheus counts, not
            # the value a series first appears with, which increase() never sees.
            self.read_bytes.inc(0.0)
        self._device: dict | None = None
        self._findings = FindingsCollector(self.labels)
        if ctx.rank == 0:
            self.registry.register(self._findings)
        gpu = str((run_info.get("device") or {}).get("gpu") or ctx.local_rank)
        self.registry.register(DeviceCollector(self.labels, lambda: self._device, gpu))
        self._children: dict[tuple[str, str], Any] = {}
        tls = {}
        if config.prometheus_certfile:
            tls = {"certfile": config.prometheus_certfile, "keyfile": config.prometheus_keyfile}
            if config.prometheus_client_cafile:
                tls.update(client_cafile=config.prometheus_client_cafile, client_auth_required=True)
        self._server, self._thread = self._serve(config, ctx, tls)
        self.address = target_address(config.prometheus_host, self.port)
        self._targets = Targets(config, ctx, self.address, self.labels)
        self._targets.write_entry()
        self._push = PushWorker(config, self.registry, self.labels) if config.pushgateway_url else None

    def _serve(self, config: Any, ctx: Any, tls: dict) -> tuple[Any, Any]:
        """Serve /metrics on this rank's port; when it is taken (a previous job's rank still
        holding it, another service), on the next free one of this local rank's own series (port +
        k x local ranks, so that the node's other ranks keep theirs), with one warning: the run's
        file_sd entry lists the port actually served. With ``strict``, a taken port fails ``init``."""
        if tls:
            _check_tls(tls)
        wanted = self.port
        step = max(1, int(getattr(ctx, "local_world_size", 1) or 1))
        for k in range(PORT_TRIES):
            port = wanted + k * step
            if port > 65535:
                break
            try:
                served = start_http_server(port, addr=config.prometheus_host, registry=self.registry, **tls)
            except OSError as exc:
                if getattr(exc, "errno", None) != errno.EADDRINUSE:
                    raise OSError(
                        f"cannot serve metrics on {config.prometheus_host}:{port}: {exc.strerror or exc}"
                    ) from None
                if config.strict:
                    raise SinkStartError(
                        f"prometheus_port: {config.prometheus_host}:{port} is in use (rank {ctx.rank} serves "
                        f"prometheus_port + local rank); free it, or choose another prometheus_port, or leave "
                        "strict off to fall back to the next free port"
                    ) from None
                continue
            if port != wanted:
                log.warning(
                    "telemetry: rank %d: port %d is in use; serving /metrics on %s:%d instead (the run's "
                    "Prometheus targets list it)",
                    ctx.rank,
                    wanted,
                    config.prometheus_host,
                    port,
                )
            self.port = port
            _close_in_forked_children(served[0])
            return served
        raise OSError(
            f"cannot serve metrics on {config.prometheus_host}: ports {wanted} to "
            f"{wanted + (PORT_TRIES - 1) * step} (every {step}) are all in use"
        )

    # ---- metric definitions -----------------------------------------------------------
    def _build_metrics(self, c: Any) -> None:
        r, L = self.registry, BASE_LABELS
        base = [self.labels[k] for k in L]

        def declare(cls: Any, m: N.Metric, **kw: Any) -> Any:
            """The metric, or None when this rank's metrics_level leaves it out (never declared)."""
            if not m.exported_at(self.level):
                return None
            return cls(m.name, m.help, m.all_labels, registry=r, **kw)

        self.step_hist = declare(Histogram, N.STEP_DURATION, buckets=c.step_buckets_s).labels(*base)
        self.phase_hist = declare(Histogram, N.PHASE_DURATION, buckets=c.step_buckets_s)
        self.data_hist = declare(Histogram, N.DATALOADER_WAIT, buckets=c.step_buckets_s).labels(*base)
        self.coll_hist = declare(Histogram, N.COLLECTIVE_DURATION, buckets=c.collective_buckets_s)
        self.coll_bytes = declare(Counter, N.COLLECTIVE_BYTES)
        self.coll_calls = declare(Counter, N.COLLECTIVE_CALLS)
        # Counters of every call (the duration histogram sees only the spans a step keeps): with them,
        # rate(bus_bytes) / rate(seconds) is a window's exact bus bandwidth, for any number of calls.
        self.coll_seconds = declare(Counter, N.COLLECTIVE_SECONDS)
        self.coll_bus_bytes = declare(Counter, N.COLLECTIVE_BUS_BYTES)
        self.busbw = declare(Gauge, N.COLLECTIVE_BUSBW)
        self.algbw = declare(Gauge, N.COLLECTIVE_ALGBW)
        self.comm_total = declare(Counter, N.COLLECTIVE_BLOCKED).labels(*base)
        # per phase, so that a reader tells a phase's compute from its waiting (the phase a straggler is slow in)
        self.phase_blocked = declare(Counter, N.PHASE_BLOCKED)
        # per process group, by its parallel dimension's label (hooks/groups.py)
        self.group_blocked = declare(Counter, N.COMM_GROUP_BLOCKED)
        self.group_bytes = declare(Counter, N.COMM_GROUP_BYTES)
        self.ckpt_seconds = declare(Counter, N.CHECKPOINT_SECONDS)
        self.ckpt_bytes = declare(Counter, N.CHECKPOINT_BYTES)
        # from the first step that has them (absent before: no false zeros); both input counters start together
        self.input_steps = _FirstValue(declare(Counter, N.INPUT_STEPS), base)
        self.input_ready = _FirstValue(declare(Counter, N.INPUT_READY_STEPS), base)
        self.read_bytes = _FirstValue(declare(Counter, N.INPUT_READ_BYTES), base)
        self.steps = declare(Counter, N.STEPS).labels(*base)
        self.failures = declare(Counter, N.STEP_FAILURES).labels(*base)
        # No sample until a real value arrives (_FirstValue): absent, never a false 0.
        self.tokens = _FirstValue(declare(Counter, N.TOKENS), base)
        self.samples = _FirstValue(declare(Counter, N.SAMPLES), base)
        self.tps = _FirstValue(declare(Gauge, N.TOKENS_PER_SECOND), base)
        self.sps = _FirstValue(declare(Gauge, N.SAMPLES_PER_SECOND), base)
        self.mfu = _FirstValue(declare(Gauge, N.MFU), base)
        self.last_step = _FirstValue(declare(Gauge, N.LAST_STEP), base)
        self.last_step_ts = _FirstValue(declare(Gauge, N.LAST_STEP_TIMESTAMP), base)
        self.step_open = declare(Gauge, N.STEP_IN_PROGRESS).labels(*base)
        self.in_coll = declare(Gauge, N.BLOCKED_IN_COLLECTIVE).labels(*base)
        self.scalar = declare(Gauge, N.LOG_VALUE)
        info = declare(Gauge, N.BUILD_INFO)
        torch = sys.modules.get("torch")
        from telemetry import __version__

        info.labels(*base, __version__, platform.python_version(), str(getattr(torch, "__version__", "none"))).set(1)

    def _child(self, metric: Any, gate: str, value: str) -> Any | None:
        key = (metric._name, value)
        child = self._children.get(key)
        if child is None:
            if not self._gates[gate].admit(value):
                return None
            child = self._children[key] = metric.labels(*(self.labels[k] for k in BASE_LABELS), value)
        return child

    # ---- sink interface ---------------------------------------------------------------
    def _exemplar(self, r: StepRecord) -> dict[str, str] | None:
        """A trace_id exemplar only for a step whose trace this rank's OTLP sink exports. Decided at
        the first write, when every sink of the session has been built; the sampler then sees
        every record, as the OTLP sink's does, so both choose the same steps."""
        if self._trace_sampled is None:
            factory = self._run_info.get(TRACE_SAMPLER)
            self._trace_sampled = factory() if factory is not None else False
        if self._trace_sampled and self._trace_sampled(r):
            return {"trace_id": trace_id_hex(self.job, r.step)}
        return None

    def write(self, records: Sequence[StepRecord]) -> None:
        for r in records:
            self.step_hist.observe(r.duration_s, exemplar=self._exemplar(r))
            self.steps.inc()
            if not r.ok:
                self.failures.inc()
            for name, sec in r.phases.items():
                if name == "data":  # its own metric, train_dataloader_wait_seconds
                    self.data_hist.observe(sec)
                    continue
                if self.phase_hist is None:  # metrics_level job: no per-phase series
                    continue
                child = self._child(self.phase_hist, "phase", name)
                if child is not None:
                    child.observe(sec)
                    # 0 too: a phase's series starts with the phase, so "no waiting" never reads as "not known"
                    blocked = self._child(self.phase_blocked, "phase", name)
                    if blocked is not None:  # made with the phase's histogram child: the same names
                        blocked.inc(r.phase_comm.get(name, 0.0))
            for span in r.spans if self.coll_hist is not None else ():
                if span.kind == rec_types.SPAN_COLLECTIVE:
                    child = self._child(self.coll_hist, "op", span.name)
                    if child is not None:
                        child.observe(span.end_s - span.start_s)
            for op, s in r.ops.items():
                for metric, value in (
                    (self.coll_bytes, s.bytes),
                    (self.coll_calls, s.count),
                    (self.coll_seconds, s.duration_s),
                    (self.coll_bus_bytes, s.bus_bytes),
                ):
                    if metric is None:  # left out by metrics_level
                        continue
                    child = self._child(metric, "op", op)
                    if child is not None:
                        child.inc(value)
                if s.duration_s > 0 and self.busbw is not None:
                    for metric, value in ((self.busbw, s.bus_bytes), (self.algbw, s.bytes)):
                        child = self._child(metric, "op", op)
                        if child is not None:
                            child.set(value / s.duration_s)
            self.comm_total.inc(r.comm_s)
            for group, (sec, nbytes) in (r.comm_groups or {}).items() if self.group_blocked is not None else ():
                child = self._child(self.group_blocked, "group", group)
                if child is not None:
                    child.inc(sec)
                    group_bytes = self._child(self.group_bytes, "group", group)
                    if group_bytes is not None:  # made with the group's seconds child: the same names
                        group_bytes.inc(nbytes)
            if r.io:
                self._io(r)
            if r.tokens:
                self.tokens.inc(r.tokens)
                if r.duration_s > 0:
                    self.tps.set(r.tokens / r.duration_s)
            if r.samples:
                self.samples.inc(r.samples)
                if r.duration_s > 0:
                    self.sps.set(r.samples / r.duration_s)
            for name, value in r.scalars.items() if self.scalar is not None else ():
                if isinstance(value, (int, float)):
                    child = self._child(self.scalar, "name", name)
                    if child is not None:
                        child.set(value)
            if r.mfu is not None:
                self.mfu.set(r.mfu)
            if r.device:
                self._device = r.device
            self.last_step.set(r.step)
            self.last_step_ts.set(r.start_s + r.duration_s)

    def _io(self, r: StepRecord) -> None:
        """Checkpoints from the step's checkpoint spans (kind and part take few values: no gate) and its
        io.checkpoint_io_s (part=storage); the input counters from io.input_ready and io.read_bytes."""
        io = r.io or {}
        base = [self.labels[k] for k in BASE_LABELS]
        span_s: dict[str, float] = {}  # kind -> seconds of its spans in the step
        for sp in r.spans:
            if sp.kind == rec_types.SPAN_CHECKPOINT:
                kind, _, part = sp.name.partition(".")
                sec = max(sp.end_s - sp.start_s, 0.0)
                self.ckpt_seconds.labels(*base, kind, "async" if part else "blocking").inc(sec)
                self.ckpt_bytes.labels(*base, kind).inc(sp.nbytes)
                span_s[kind] = span_s.get(kind, 0.0) + sec
        for kind, sec in storage_by_kind(io.get("checkpoint_io_s"), span_s).items():
            self.ckpt_seconds.labels(*base, kind, "storage").inc(sec)
        ready = io.get("input_ready")
        if _finite(ready):
            self.input_steps.inc(1.0)
            self.input_ready.inc(1.0 if ready >= 1.0 else 0.0)  # 0 too: readiness 0 is known, not absent
        nbytes = io.get("read_bytes")
        if _finite(nbytes) and nbytes >= 0:
            self.read_bytes.inc(nbytes)

    def progress(self, progress: Progress) -> None:
        if progress.device:
            self._device = progress.device
        self.step_open.set(
            max(0.0, progress.time_s - progress.open_step_since_s) if progress.open_step_since_s else 0.0
        )
        self.in_coll.set(1 if progress.collective else 0)
        if not self._targets.done and self.ctx.rank == 0:
            self._targets.merge()

    def findings(self, result: OnlineResult) -> None:
        self._findings.scores = dict(result.straggler_scores)
        self._findings.costs = dict(result.straggler_costs or {})
        # Once online detection has analyzed, every kind it reports has a sample (0 when none), so
        # "nothing found" reads apart from "detection not running" (no train_findings at all).
        self._findings.counts = {**{k: 0 for k in ONLINE_KINDS}, **result.counts}

    def describe(self) -> str | None:
        scheme = "https" if self.config.prometheus_certfile else "http"
        return f"metrics {scheme}://{self.address}/metrics"

    def close(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        if self._push is not None:
            self._push.close(max(0.05, deadline - time.monotonic()))
        if self.ctx.rank == 0:
            self._targets.merge(shared=False)
            self._targets.remove_shared()
        self._server.shutdown()
        self._server.server_close()

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"port": self.port, "label_values_refused": sum(g.refused for g in self._gates.values())}
        if self._push is not None:
            out.update(self._push.stats())
        return out


def _finite(x: object) -> TypeGuard[float]:
    return isinstance(x, (int, float)) and math.isfinite(x)


def storage_by_kind(storage_s: Any, span_s: dict[str, float]) -> dict[str, float]:
    """A step's own storage seconds (io.checkpoint_io_s, one number for the step) by checkpoint kind.

    The kind is the one of the step's checkpoint spans; in a step with both a save and a load (rare: a
    resumed job that saves in its first step) the seconds are split in proportion to each kind's span
    time, within which its storage I/O ran (evenly when the spans took no time). None when there is no
    storage time (0 is DCP's "not known": ``telemetry.checkpoint`` blocks, a marked save) or no span
    to give it a kind.

    >>> storage_by_kind(2.0, {"save": 3.0})
    {'save': 2.0}
    >>> storage_by_kind(2.0, {"save": 3.0, "load": 1.0})
    {'save': 1.5, 'load': 0.5}
    >>> storage_by_kind(0.0, {"save": 3.0}), storage_by_kind(2.0, {})
    ({}, {})
    """
    if not _finite(storage_s) or storage_s <= 0 or not span_s:
        return {}
    if len(span_s) == 1:
        return {kind: float(storage_s) for kind in span_s}
    total = sum(span_s.values())
    if total <= 0:
        return {kind: storage_s / len(span_s) for kind in span_s}
    return {kind: storage_s * sec / total for kind, sec in span_s.items()}

"""``init`` and ``shutdown``: build the recorder, sinks and pipeline of one telemetry session.

>>> import telemetry
>>> telemetry.init(run_dir="runs/doc", job="doc", sinks=["store"])   # doctest: +SKIP
>>> with telemetry.step(samples=8):                                   # doctest: +SKIP
...     with telemetry.phase("forward"):
...         pass
>>> telemetry.shutdown()                                              # doctest: +SKIP
"""

from __future__ import annotations

import atexit
import logging
import os
import platform
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Sequence

from . import runlog
from .analysis_options import AnalysisOptions
from .config import Config, ConfigError
from .devices.sampler import build_sampler
from .flops import peak_flops_for
from .hooks import checkpoint as _checkpoints
from .hooks import collectives as _collectives
from .hooks.ddp import auto_instrument_ddp, undo_auto_instrument_ddp
from .pipeline.sinks import TRACE_SAMPLER, build_sinks
from .pipeline.thread import Pipeline
from .rank import RankContext, exchange_hosts, group_may_come, group_rank
from .recorder import NULL, build_recorder, current
from .store.claim import RankInUse, claim_rank
from .version import __version__

if TYPE_CHECKING:
    from signal import _HANDLER
    from types import FrameType

    from torch._C._distributed_c10d import Store  # torch.distributed.Store

    from .online.capture import Captures
    from .pipeline.records import StepRecord
    from .recorder.capture import ProfilerCapture

log = logging.getLogger("telemetry")
_lock = threading.RLock()
_session: "Session | None" = None
_process_hooks_installed = False


class Session:
    """One init..shutdown: the recorder, the pipeline thread and the sinks of this rank.

    ``ctx`` None: the rank is not known yet (no launcher variables, a process group on its way:
    :func:`telemetry.rank.group_may_come`). The recorder and the pipeline run from init; records are
    held (at most ``sink_backlog_records``) and nothing is written under any rank until the process
    group appears, at a pipeline tick (:class:`RankWait`); then the sampler and the sinks start as
    that rank and the held records go to them first. A job that ends with no group is rank 0 of 1.
    """

    def __init__(self, config: Config, ctx: RankContext | None, env_ctx: RankContext | None = None) -> None:
        self.config = config
        self.env_ctx = env_ctx or ctx or RankContext.from_env()
        self.ctx = ctx or self.env_ctx
        self.pending = ctx is None
        self.closed = False
        self.off_reason: str | None = None  # why this process records nothing (its rank is taken)
        self.start_time_s = time.time()
        self.thread_id = threading.get_native_id()  # the training thread: its run-queue delay is sampled
        self._anchor_wall_ns = time.time_ns()
        self._anchor_perf_ns = time.perf_counter_ns()
        self.recorder = build_recorder(
            config.buffer_events,
            config.device_timing,
            strict=config.strict,
            start_step=config.start_step,
            profiler_ranges=config.profiler_ranges,
        )
        self.sampler = None
        self.capturer: ProfilerCapture | None = None  # with captures on
        self.sinks: list = []
        self.claim = None
        self.run_log: runlog.RunLog | None = None  # the rank's warnings, also in RUN_DIR/logs/
        self.run_info = {
            "start_time_s": self.start_time_s,
            "session": f"{self._anchor_wall_ns}-{os.getpid()}",
            "versions": _versions(),
            "device": {},
            "stats": lambda: self.stats(),  # for sinks that export telemetry's own health
        }
        pool = getattr(self.recorder, "pool", None)
        self.pipeline = Pipeline(
            self.recorder,
            [],
            self.ctx.rank,
            self.to_epoch_s,
            config.flush_interval_s,
            config.flops_per_token,
            0.0,
            release_events=pool.release if pool is not None else None,
            backlog_records=config.sink_backlog_records,
            hold=True,
        )
        self._instrumented = False
        self._checkpoints = False
        self._ddp_auto = False
        self._prev_sigterm: _HANDLER = None
        if not self.pending:
            self._begin_as(self.ctx)

    def to_epoch_s(self, t_ns: int) -> float:
        return (self._anchor_wall_ns + (t_ns - self._anchor_perf_ns)) * 1e-9

    def _begin_as(self, ctx: RankContext) -> None:
        """This process is ``ctx``'s rank: claim the rank's files, start the sampler and the sinks,
        hand them what was held. At init (rank known then) or on the pipeline thread (RankWait)."""
        config = self.config
        self.ctx = ctx
        self.pending = False
        if ("store" in config.sinks or "prometheus" in config.sinks) and config.run_dir:
            try:
                self.claim = claim_rank(config.run_dir, ctx.rank)
            except RankInUse as exc:
                self._turn_off(str(exc))
                if config.strict:
                    raise
                return
        _check_against_rank(config, ctx)
        if "store" in config.sinks and config.run_dir and self.run_log is None:
            self.run_log = runlog.attach(config.run_dir, ctx.rank)  # warnings also in RUN_DIR/logs/rank-N.log
        self.sampler, device = build_sampler(self.recorder, config, ctx.local_rank, self.thread_id)
        peak = (
            config.peak_flops or peak_flops_for(device.get("gpu_name") or _torch_device_name(), config.mfu_dtype) or 0.0
        )
        self.run_info["device"] = {
            **device,
            "peak_flops": peak or None,
            "mfu_dtype": config.mfu_dtype,
            "flops_per_token": config.flops_per_token or None,
        }
        self.pipeline.assembler.peak_flops = peak
        self.sinks = build_sinks(config, ctx, self.run_info)
        self.pipeline.attach(self.sinks, ctx.rank)
        if config.online and ctx.world_size > 1:
            from .online import OnlineDetector, OnlineStarter

            c = config
            if c.capture and hasattr(self.recorder, "capture"):
                from .recorder.capture import ProfilerCapture

                self.capturer = ProfilerCapture(self.recorder, ctx.rank, int(c.capture_max_mb * (1 << 20)))

            def captures(store: Store) -> Captures | None:
                if self.capturer is None:
                    return None
                from .online.capture import Captures

                return Captures(
                    store,
                    ctx.rank,
                    ctx.world_size,
                    c.online_every,
                    c.online_wait_blocks,
                    self.capturer,
                    c.run_dir,
                    c.capture_steps,
                    c.capture_max,
                    c.capture_min_interval_s,
                    ctx.local_world_size,
                    c.capture_baseline,
                )

            # Starts now when the process group exists, else on the first pipeline tick that sees it.
            self.pipeline.add_listener(
                OnlineStarter(
                    lambda store: OnlineDetector(
                        store,
                        ctx.rank,
                        ctx.world_size,
                        c.online_every,
                        c.online_window,
                        c.online_wait_blocks,
                        c.online_interval_s,
                        AnalysisOptions.from_config(c),
                        self.run_info.get(TRACE_SAMPLER),
                        captures(store),
                    )
                )
            )

    def _turn_off(self, reason: str) -> None:
        """Record nothing from here on (another live process writes this rank): said once."""
        self.off_reason = reason
        log.error("telemetry: %s", reason)
        current.set_active(NULL)
        self.pipeline.held.clear()
        self.pipeline.holding = False

    def resolve(self, group: tuple[int, int], hosts: list[str | None]) -> None:
        """The process group is here (RankWait, on the pipeline thread): become its rank."""
        from .rank import from_group

        ctx = from_group(group[0], group[1], hosts, self.env_ctx)
        if self.env_ctx.launcher != "none" and (self.env_ctx.rank, self.env_ctx.world_size) != group:
            log.warning(
                "telemetry: the launcher's variables say rank %d of %d (%s), the process group says rank %d "
                "of %d: the group is trusted",
                self.env_ctx.rank,
                self.env_ctx.world_size,
                self.env_ctx.launcher,
                *group,
            )
        log.info("telemetry: rank %d of %d, from torch.distributed's process group", ctx.rank, ctx.world_size)
        self._begin_as(ctx)
        if self.config.announce and self.off_reason is None:
            self._announce()

    def _settle_rank(self) -> None:
        """At shutdown, a rank still not known: the process group's if there is one now (the job may
        have ended before a tick saw it), else rank 0 of 1 (what the environment says)."""
        if not self.pending or self.off_reason is not None:
            return
        if not RankWait(self).on_records(()):
            log.info("telemetry: no process group appeared while telemetry ran: this process was rank 0 of 1")
            self._begin_as(self.env_ctx)

    def start(self) -> None:
        if self.pending:
            self.pipeline.add_listener(RankWait(self))
        self.pipeline.start()
        if self.off_reason is None:
            current.set_active(self.recorder)
        if self.config.collectives:
            self._instrumented = _collectives.instrument_collectives()
            self._ddp_auto = auto_instrument_ddp()
        if self.config.checkpoints:
            self._checkpoints = _checkpoints.instrument_checkpoints()
        if self.config.handle_sigterm:
            self._install_sigterm()
        if self.config.announce and not self.pending and self.off_reason is None:
            self._announce()
        elif self.pending:
            log.info(
                "telemetry: no launcher variables name this process's rank and no process group exists yet: "
                "its records are held until torch.distributed's process group appears (init_process_group)"
            )

    def _announce(self) -> None:
        """One line per process: where its data goes. Through the ``telemetry`` logger when the
        application configured logging, else on stderr (a library's INFO would otherwise vanish)."""
        where = [d for d in (s.describe() for s in self.sinks) if d]
        ctx = self.ctx
        line = f"telemetry: rank {ctx.rank} of {ctx.world_size} ({ctx.node}): " + (
            "; ".join(where) if where else "no sink is running (see the warnings above)"
        )
        if runlog.configured():
            log.info(line)
        else:
            print(line, file=sys.stderr, flush=True)

    def _install_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        try:
            if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
                return  # the application (or torchrun) has its own handler: leave it alone
            self._prev_sigterm = signal.signal(signal.SIGTERM, _on_sigterm)
        except (ValueError, OSError):
            pass

    def close(self, timeout_s: float) -> dict[str, Any]:
        if self.closed:
            return self.stats()
        self.closed = True
        deadline = time.monotonic() + timeout_s
        if self.sampler is not None:
            self.sampler.stop()
        if self.capturer is not None:
            self.capturer.finish()  # a capture still running: stopped here, written by its thread
        current.set_active(NULL)
        if self._instrumented:
            _collectives.uninstrument_collectives()
        if self._checkpoints:
            _checkpoints.uninstrument_checkpoints()
        if self._ddp_auto:
            undo_auto_instrument_ddp()
        if self._prev_sigterm is not None and threading.current_thread() is threading.main_thread():
            try:
                if signal.getsignal(signal.SIGTERM) is _on_sigterm:
                    signal.signal(signal.SIGTERM, self._prev_sigterm)
            except (ValueError, OSError):
                pass
        # A job that ended before any process group appeared was one process: rank 0 of 1 (what the
        # environment says), and what it held is written as that rank's, before the final drain.
        self.pipeline.stop(timeout_s, before_final=self._settle_rank if self.pending else None)
        for listener in self.pipeline.listeners:
            listener.stop()
        if self.capturer is not None:  # its last trace written (a few steps: well under a second), in the budget
            self.capturer.join(max(0.0, min(2.0, deadline - time.monotonic())))
        if self.claim is not None:
            self.claim.release()
        stats = self.stats()
        stray = self.pipeline.assembler.unattributed_work
        if stray:
            log.warning(
                "telemetry: rank %d: %d phase or log event(s) came after the last step, or with no step at "
                "all, and belong to no step: they were not recorded (wrap the work in telemetry.step())",
                self.ctx.rank,
                stray,
            )
        lost = (
            [f"buffer: {stats['events_dropped']} event(s) (the hot-path buffer was full)"]
            if stats["events_dropped"]
            else []
        )
        for name, s in stats["sinks"].items():
            if s.get("dropped") or s.get("records_dropped"):
                lost.append(f"{name}: " + (s.get("dropped_detail") or f"{s['dropped']} step record(s)"))
        if lost:
            log.warning(
                "telemetry: rank %d: not delivered: %s (see telemetry.shutdown()'s return value)",
                self.ctx.rank,
                "; ".join(lost),
            )
        runlog.detach(self.run_log)  # after shutdown's own warnings, which the rank's log keeps too
        self.run_log = None
        return stats

    def stats(self) -> dict[str, Any]:
        s = self.pipeline.stats()
        s["unattributed_events"] = self.pipeline.assembler.unattributed
        s["rank"] = self.ctx.rank
        s["closed"] = self.closed
        return s


def _known_rank(env_ctx: RankContext) -> RankContext | None:
    """This process's rank if it is known at init, else None (the session waits for the process group).
    Known: the launcher's variables, unless a process group exists and says otherwise (the group is
    trusted, and its local ranks come from the hosts: resolved at the first pipeline tick); or no
    launcher, no group, and none on its way: rank 0 of 1."""
    group = group_rank(sys.modules.get("torch.distributed"))
    if group is not None:
        agrees = env_ctx.launcher != "none" and (env_ctx.rank, env_ctx.world_size) == group
        return env_ctx if agrees else None
    if env_ctx.launcher == "none" and group_may_come():
        return None
    return env_ctx


class RankWait:
    """A pipeline listener while the rank is not known: at each tick, one cheap look for the default
    process group; when it is there, the ranks post their hosts to its store (local ranks: the order
    of the ranks on one host) and the session becomes its rank (:meth:`Session.resolve`)."""

    HOSTS_TIMEOUT_S = 10.0  # how long the hosts of the other ranks are waited for, once

    def __init__(self, session: "Session") -> None:
        self.session = session

    def on_records(self, records: Sequence[StepRecord]) -> bool:
        """True once the session has its rank (from the group, now or before)."""
        if not self.session.pending:
            return True
        dist = sys.modules.get("torch.distributed")
        group = group_rank(dist)
        if group is None or dist is None:  # (a group: dist is there)
            return False
        hosts: list[str | None] = [None] * group[1]
        try:
            store = dist.distributed_c10d._get_default_store()
            hosts = exchange_hosts(store, group[0], group[1], self.session.env_ctx.node, self.HOSTS_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - a private API; without hosts every rank is counted on its own host
            log.info("telemetry: the ranks' hosts could not be exchanged (%s); local ranks are guessed", exc)
            hosts[group[0]] = self.session.env_ctx.node
        self.session.resolve(group, hosts)
        return True

    def poll(self) -> list:
        return []

    def stats(self) -> dict[str, Any]:
        return {"rank_pending": self.session.pending}

    def stop(self) -> None:
        pass


def _check_against_rank(config: Config, ctx: RankContext) -> None:
    """Settings that are valid alone but not on this rank."""
    port = config.prometheus_port + ctx.local_rank
    if "prometheus" in config.sinks and port > 65535:
        raise ConfigError(
            f"prometheus_port={config.prometheus_port} + local rank {ctx.local_rank} = {port} is "
            f"above 65535; accepted: a port of at most {65535 - ctx.local_rank} on this rank "
            f"(each rank serves on prometheus_port + its local rank)"
        )


def _torch_device_name() -> str | None:
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            return torch.cuda.get_device_name()
    except Exception:  # noqa: BLE001 - a device name is optional; a broken CUDA set-up must not stop init
        pass
    return None


def _versions() -> dict[str, str]:
    out = {"telemetry": __version__, "python": platform.python_version(), "platform": platform.platform()}
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch"] = str(getattr(torch, "__version__", "?"))
        cuda = getattr(getattr(torch, "version", None), "cuda", None)
        if cuda:
            out["cuda"] = str(cuda)
            try:  # the library's own version: no CUDA context is made
                nccl = torch.cuda.nccl.version()
                out["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
            except Exception:  # noqa: BLE001 - a build without NCCL: no version, nothing else lost
                pass
    return out


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    # Flush what was accepted, then die of SIGTERM as the sender intended.
    try:
        shutdown(timeout_s=2.0)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def _after_fork_child() -> None:
    # A forked child (a DataLoader worker) must not record, flush the parent's buffers or serve.
    global _session
    _session = None
    current.set_active(NULL)


def _install_process_hooks() -> None:
    global _process_hooks_installed
    if _process_hooks_installed:
        return
    _process_hooks_installed = True
    atexit.register(_atexit)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_child)


def _atexit() -> None:
    try:
        shutdown()
    except Exception:  # noqa: BLE001 - never fail interpreter exit
        pass


def init(**kwargs: Any) -> Session:
    """Start telemetry for this process (rank); the keyword arguments are :class:`Config`'s settings.

    Calling it again with the same settings returns the running session; with different ones it
    raises ConfigError naming the fields that differ.
    """
    global _session
    with _lock:
        config = Config.resolve(kwargs)
        if _session is not None and not _session.closed:
            diff = config.differences(_session.config)
            if diff:
                old, new = _session.config, config
                detail = "; ".join(f"{k}: {getattr(old, k)!r} now {getattr(new, k)!r}" for k in diff)
                raise ConfigError(
                    f"telemetry.init() was already called with other settings ({detail}); "
                    "call telemetry.shutdown() first to change them"
                )
            return _session
        env_ctx = RankContext.from_env()
        session = Session(config, _known_rank(env_ctx), env_ctx)
        session.start()
        _session = session
        _install_process_hooks()
        return session


def shutdown(timeout_s: float | None = None) -> dict[str, Any] | None:
    """Flush every sink and stop, within ``timeout_s`` (default: the config's, 5 s).

    Returns the session's final counters (records written, events dropped, per-sink delivery), or
    None when telemetry was not running.
    """
    global _session
    with _lock:
        session = _session
        if session is None:
            return None
        _session = None
    return session.close(session.config.shutdown_timeout_s if timeout_s is None else timeout_s)


def session() -> Session | None:
    return _session


def stats() -> dict[str, Any]:
    """Live counters of the running session (empty dict when not running)."""
    s = _session
    return s.stats() if s is not None else {}


__all__ = ["ConfigError", "Session", "init", "session", "shutdown", "stats"]

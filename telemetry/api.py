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
from typing import Any

from .config import Config, ConfigError
from .devices.sampler import build_sampler
from .flops import peak_flops_for
from .hooks import collectives as _collectives
from .hooks.ddp import auto_instrument_ddp, undo_auto_instrument_ddp
from .pipeline.sinks import build_sinks
from .pipeline.thread import Pipeline
from .rank import RankContext
from .recorder import NULL, build_recorder, current
from .version import __version__

log = logging.getLogger("telemetry")
_lock = threading.RLock()
_session: "Session | None" = None
_process_hooks_installed = False


class Session:
    """One init..shutdown: the recorder, the pipeline thread and the sinks of this rank."""

    def __init__(self, config: Config, ctx: RankContext) -> None:
        self.config = config
        self.ctx = ctx
        self.closed = False
        self.start_time_s = time.time()
        self._anchor_wall_ns = time.time_ns()
        self._anchor_perf_ns = time.perf_counter_ns()
        self.recorder = build_recorder(
            config.buffer_events,
            config.device_timing,
            strict=config.strict,
            start_step=config.start_step,
            profiler_ranges=config.profiler_ranges,
        )
        self.sampler, device = build_sampler(self.recorder, config, ctx.local_rank)
        peak = (
            config.peak_flops or peak_flops_for(device.get("gpu_name") or _torch_device_name(), config.mfu_dtype) or 0.0
        )
        self.run_info = {
            "start_time_s": self.start_time_s,
            "session": f"{self._anchor_wall_ns}-{os.getpid()}",
            "versions": _versions(),
            "device": {
                **device,
                "peak_flops": peak or None,
                "mfu_dtype": config.mfu_dtype,
                "flops_per_token": config.flops_per_token or None,
            },
            "stats": lambda: self.stats(),  # for sinks that export telemetry's own health
        }
        self.sinks = build_sinks(config, ctx, self.run_info)
        pool = getattr(self.recorder, "pool", None)
        self.pipeline = Pipeline(
            self.recorder,
            self.sinks,
            ctx.rank,
            self.to_epoch_s,
            config.flush_interval_s,
            config.flops_per_token,
            peak,
            release_events=pool.release if pool is not None else None,
            backlog_records=config.sink_backlog_records,
        )
        self._instrumented = False
        self._ddp_auto = False
        self._prev_sigterm: Any = None

    def to_epoch_s(self, t_ns: int) -> float:
        return (self._anchor_wall_ns + (t_ns - self._anchor_perf_ns)) * 1e-9

    def start(self) -> None:
        if self.config.online and self.ctx.world_size > 1:
            from .online import OnlineDetector, OnlineStarter

            c, ctx = self.config, self.ctx
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
                        c.busy_bound,
                    )
                )
            )
        self.pipeline.start()
        current.set_active(self.recorder)
        if self.config.collectives:
            self._instrumented = _collectives.instrument_collectives()
            self._ddp_auto = auto_instrument_ddp()
        if self.config.handle_sigterm:
            self._install_sigterm()
        if self.config.announce:
            self._announce()

    def _announce(self) -> None:
        """One line per process: where its data goes. Through the ``telemetry`` logger when the
        application configured logging, else on stderr (a library's INFO would otherwise vanish)."""
        where = [d for d in (s.describe() for s in self.sinks) if d]
        ctx = self.ctx
        line = f"telemetry: rank {ctx.rank} of {ctx.world_size} ({ctx.node}): " + (
            "; ".join(where) if where else "no sink is running (see the warnings above)"
        )
        if log.hasHandlers():
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
        if self.sampler is not None:
            self.sampler.stop()
        current.set_active(NULL)
        if self._instrumented:
            _collectives.uninstrument_collectives()
        if self._ddp_auto:
            undo_auto_instrument_ddp()
        if self._prev_sigterm is not None and threading.current_thread() is threading.main_thread():
            try:
                if signal.getsignal(signal.SIGTERM) is _on_sigterm:
                    signal.signal(signal.SIGTERM, self._prev_sigterm)
            except (ValueError, OSError):
                pass
        self.pipeline.stop(timeout_s)
        for listener in self.pipeline.listeners:
            listener.stop()
        stats = self.stats()
        if stats["unattributed_events"]:
            log.warning(
                "telemetry: rank %d: %d phase/log/data event(s) came after the last step, or with no "
                "step at all, and belong to no step: they were not recorded (wrap the work in "
                "telemetry.step())",
                self.ctx.rank,
                stats["unattributed_events"],
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
        return stats

    def stats(self) -> dict[str, Any]:
        s = self.pipeline.stats()
        s["unattributed_events"] = self.pipeline.assembler.unattributed
        s["rank"] = self.ctx.rank
        s["closed"] = self.closed
        return s


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
    return out


def _on_sigterm(signum: int, frame: Any) -> None:
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
        ctx = RankContext.from_env()
        _check_against_rank(config, ctx)
        session = Session(config, ctx)
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

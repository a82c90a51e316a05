"""A profiler capture on the training thread (:class:`ProfilerCapture`): torch.profiler started at the
first planned step's begin and stopped at the begin of the step after the last, then written by a
thread of its own.

The profiler records the operations of the thread that starts it, so it is started from the
recorder's step begin (``Recorder._begin_step`` calls :meth:`~ProfilerCapture.on_step` while
``rec.capture`` is set, only while a capture is armed: otherwise the hot path pays one attribute test
per step); :meth:`~ProfilerCapture.arm` is called from the pipeline thread when the job plans a capture
naming this rank (:mod:`telemetry.online.capture`). The rule: it never raises into the training loop (a
failure is counted and said once, and the capture dropped).
"""

from __future__ import annotations

import gzip
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
from typing import IO, TYPE_CHECKING, Callable

from ..logonce import LogOnce

if TYPE_CHECKING:
    from typing import Protocol

    from torch.profiler import profile

    class CaptureHost(Protocol):
        """What a capture needs of its recorder (a :class:`~telemetry.recorder.wall.Recorder`): the attribute
        its step begin asks while set, which :meth:`ProfilerCapture.arm` sets and :meth:`ProfilerCapture._done`
        clears."""

        capture: ProfilerCapture | None


log = logging.getLogger("telemetry")


def _user_profiler_active() -> bool:
    try:
        import torch._C._autograd  # loaded with torch: names the submodule, imports nothing more

        return bool(torch._C._autograd._profiler_enabled())
    except Exception:  # noqa: BLE001 - no way to tell: assume none
        return False


# What the profiler itself prints when it starts and stops (Kineto's USDT lines, on the process's stderr)
_PROFILER_LINE = re.compile(rb"^USDT:.*\] profiler_st(art|op)\s*$")


def _without_profiler_lines(fn: Callable[[], None]) -> None:
    """Call ``fn`` (the profiler's start or stop) with the process's stdout and stderr (fds 1 and 2) sent to
    files, then write back to each what was written there meanwhile but the profiler's own start and stop
    lines: the user's console keeps everything else (another thread's output comes a few ms late). When the
    descriptors cannot be redirected (closed, or no temporary file), ``fn`` runs as it is."""
    saved: list[tuple[int, int, IO[bytes]]] = []
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        for fd in (1, 2):
            tmp = tempfile.TemporaryFile()
            saved.append((fd, os.dup(fd), tmp))
            os.dup2(tmp.fileno(), fd)
    except (OSError, ValueError):  # a closed or missing descriptor: nothing to keep from it
        _restore(saved)
        fn()
        return
    try:
        fn()
    finally:
        _restore(saved)


def _restore(saved: list[tuple[int, int, IO[bytes]]]) -> None:
    for fd, keep, tmp in saved:
        try:
            os.dup2(keep, fd)
            os.close(keep)
            tmp.seek(0)
            rest = b"".join(line for line in tmp.read().splitlines(keepends=True) if not _PROFILER_LINE.match(line))
            tmp.close()
            if rest:
                os.write(fd, rest)
        except OSError:
            pass  # the console went away meanwhile: nothing to give back to


PENDING = 4  # plans held at once (a baseline, a finding's and an asked capture, over disjoint steps)


class ProfilerCapture:
    """One rank's captures: the plans it holds, the one running, and what became of each (``stats``).

    - A step already past the plan's last when armed: ``missed``.
    - Several plans may be held at once (the job plans them over disjoint steps: a baseline, a
      finding's, one asked for): each runs in turn, by its first step.
    - The user's own profiler session active: ``skipped`` (said once): two sessions cannot run at once.
    - The trace is exported (``export_chrome_trace``) and gzipped to the plan's path by a daemon thread,
      never on the training thread; a trace over ``max_bytes`` is deleted and counted ``over_budget``."""

    def __init__(self, rec: CaptureHost, rank: int, max_bytes: int = 256 << 20) -> None:
        self.rec = rec
        self.rank = rank
        self.max_bytes = max_bytes
        # plans not yet done, by first step: (id, first step, last step, path of the trace); replaced whole
        # (a tuple) under _lock, which no user code runs inside
        self.plans: tuple[tuple[str, int, int, str], ...] = ()
        self.running: tuple[str, int, int, str] | None = None
        self.prof: profile | None = None  # running while set, with self.running its plan
        self.stats = {"taken": 0, "missed": 0, "skipped": 0, "failed": 0, "over_budget": 0, "bytes": 0}
        self._once = LogOnce()
        self._lock = threading.Lock()
        self._writers: list[threading.Thread] = []

    # ---- pipeline thread ----------------------------------------------------------------
    def arm(self, capture_id: str, first: int, last: int, path: str) -> None:
        """Plan a capture of steps ``first`` to ``last`` into ``path``, beside the plans already held
        (the job plans them over disjoint steps); one already held is not planned twice, and past
        :data:`PENDING` plans the latest-starting is dropped."""
        with self._lock:
            if any(p[0] == capture_id for p in self.plans) or (self.running and self.running[0] == capture_id):
                return
            plans = sorted(self.plans + ((capture_id, first, last, path),), key=lambda p: p[1])
            self.plans = tuple(plans[:PENDING])
            self.rec.capture = self

    # ---- training thread ----------------------------------------------------------------
    def on_step(self, index: int) -> None:
        """Called at each step's begin while armed."""
        plan = None
        try:
            if self.prof is not None:
                assert self.running is not None  # set with prof
                if index <= self.running[2]:
                    return
                self._stop()
            for plan in self.plans:
                _, first, last, _path = plan
                if index < first:
                    return
                if index > last:
                    self.stats["missed"] += 1
                    self._done(plan)
                    continue
                if _user_profiler_active():
                    self.stats["skipped"] += 1
                    self._once(
                        "user-profiler",
                        "telemetry: a profiler capture was skipped: your own profiler session is active "
                        "(further captures during one are skipped too, counted in stats)",
                    )
                    self._done(plan)
                    continue
                import torch

                activities = [torch.profiler.ProfilerActivity.CPU]
                if torch.cuda.is_available():
                    activities.append(torch.profiler.ProfilerActivity.CUDA)
                # shapes: the collectives' bytes on a CPU trace (gloo), and what an op was given
                prof = torch.profiler.profile(activities=activities, record_shapes=True)
                _without_profiler_lines(prof.start)  # its start line is not the user's console's
                self.prof, self.running = prof, plan
                return
            self._done(None)
        except Exception as exc:  # noqa: BLE001 - a capture must never break training
            self.stats["failed"] += 1
            self._once("failed", "telemetry: a profiler capture failed (%s); dropped, further failures counted", exc)
            self.prof = None
            self._done(self.running or plan)
            self.running = None

    def finish(self) -> None:
        """At shutdown: a capture still running is stopped and written (what it has); the rest are dropped."""
        if self.prof is not None:
            try:
                self._stop()
            except Exception as exc:  # noqa: BLE001 - shutdown goes on
                self.stats["failed"] += 1
                self._once("failed", "telemetry: a profiler capture failed at shutdown (%s)", exc)
        with self._lock:
            self.plans = ()
            self.rec.capture = None

    def join(self, timeout_s: float) -> None:
        for t in self._writers:
            t.join(timeout_s)

    def _stop(self) -> None:
        prof, self.prof = self.prof, None
        plan, self.running = self.running, None
        self._done(plan)
        assert prof is not None and plan is not None  # called while a capture runs
        _without_profiler_lines(prof.stop)
        t = threading.Thread(target=self._write, args=(prof, plan[3]), name="telemetry-capture", daemon=True)
        self._writers = [w for w in self._writers if w.is_alive()] + [t]
        t.start()

    def _done(self, plan: tuple[str, int, int, str] | None) -> None:
        """``plan`` is over (taken, missed or dropped); with none left the hot path is back to one test."""
        with self._lock:
            self.plans = tuple(p for p in self.plans if p is not plan)
            if not self.plans:
                self.rec.capture = None

    def _write(self, prof: profile, path: str) -> None:
        tmp = path[: -len(".gz")] + f".{os.getpid()}.tmp"
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            prof.export_chrome_trace(tmp)
            with open(tmp, "rb") as src, gzip.open(path + ".part", "wb", compresslevel=3) as dst:
                shutil.copyfileobj(src, dst)
            size = os.path.getsize(path + ".part")
            if size > self.max_bytes:
                os.remove(path + ".part")
                self.stats["over_budget"] += 1
                self._once("budget", "telemetry: a profiler capture of %d bytes was over its budget; deleted", size)
                return
            os.replace(path + ".part", path)
            self.stats["taken"] += 1
            self.stats["bytes"] += size
        except Exception as exc:  # noqa: BLE001 - a trace not written costs only itself
            self.stats["failed"] += 1
            self._once("write", "telemetry: a profiler capture was not written (%s); further failures counted", exc)
        finally:
            try:
                os.remove(tmp)
            except OSError:
                pass

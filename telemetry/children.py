"""Every process the package starts dies with the process that started it, however that one ends.

Two halves, because one is not enough: the parent cleans up (:func:`interrupt_on_signals` turns
SIGTERM, SIGINT and SIGHUP into an interrupt so that ``finally`` runs; :func:`signals_held` keeps a
second signal from cutting the clean-up short; :func:`stop_group` stops each child's own session with
SIGTERM, then SIGKILL), and the kernel does when the parent cannot (:func:`die_with_parent`:
``PR_SET_PDEATHSIG`` with SIGKILL, since a rank blocked in a collective runs no Python handler). A
signal the command was started with ignored stays ignored. Limits: Linux only for the kernel's half;
its signal comes when the *thread* that started the child ends, so children are started from the
command's main thread. The guarantee: docs/faults.md.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Iterator, Sequence

if TYPE_CHECKING:
    from signal import _HANDLER

PARENT_ENV = "TELEMETRY_PARENT_PID"  # the pid of the process that started this one
HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with this process named as the parent to die with."""
    return {**(os.environ if env is None else env), PARENT_ENV: str(os.getpid())}


def die_with_parent() -> bool:
    """In a child the package started (``PARENT_ENV`` set by :func:`child_env`): be killed when the
    parent dies. Exits at once when the parent is already gone. The variable is taken out of the
    environment, so that this process's own children do not take it for theirs. Returns False when
    not started by the package, or where the platform has no parent-death signal."""
    expected = os.environ.pop(PARENT_ENV, "")
    if not expected.isdigit() or not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != int(expected):
        os._exit(128 + int(signal.SIGKILL))  # the parent died before the prctl: nobody would stop us
    return True


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP, turned into an interrupt so that clean-up runs (SIGINT is Python's own)."""


def interrupt_on_signals() -> dict[signal.Signals, _HANDLER]:
    """Make SIGTERM and SIGHUP raise :class:`Interrupted` in the main thread; returns the previous
    handlers (for :func:`restore`). A signal the command was started with ignored stays ignored, as
    the shell's convention asks (``nohup``'s SIGHUP; SIGINT, which Python itself leaves ignored when
    it inherits it so: a background job of a script, or a parent that ignores Ctrl-C while it cleans
    up). Nothing is changed off the main thread."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}

    def interrupt(signum: int, _frame: object) -> None:
        raise Interrupted(signal.Signals(signum).name)

    return {
        s: signal.signal(s, interrupt)
        for s in (signal.SIGTERM, signal.SIGHUP)
        if signal.getsignal(s) is not signal.SIG_IGN
    }


def restore(previous: dict[signal.Signals, _HANDLER]) -> None:
    for s, handler in previous.items():
        signal.signal(s, handler)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP while the block runs (clean-up that must not be cut short): one
    that arrives meanwhile is noted, and delivered again when the block ends. (Handlers, not a signal
    mask: a mask is per thread, and Python runs its handlers in the main thread whichever thread the
    kernel chose.) Outside the main thread it holds nothing."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    previous = {s: signal.signal(s, lambda signum, _frame: arrived.append(signum)) for s in HELD}
    try:
        yield
    finally:
        restore(previous)
        for signum in dict.fromkeys(arrived):
            signal.raise_signal(signum)


def stop_group(procs: Sequence[subprocess.Popen], grace_s: float = 2.0) -> None:
    """SIGTERM to each child's process group, SIGKILL to those still alive after ``grace_s``; waits
    for all of them. Call it inside :func:`signals_held`."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()

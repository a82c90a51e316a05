"""Start the demo's ranks as real processes, follow them through the run store, stop them.

The launcher sets the torchrun variables for each rank (so ``telemetry.init`` reads them as it would
under torchrun), shows progress read from the run directory while the job runs, and ends the job
when every rank is done, when a rank fails, or when no rank has finished a step for longer than
the hang bound (then the ranks are killed, as a watchdog would).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Sequence, TextIO

from .. import children
from ..analysis.detectors.hang import detect_hang, hang_bound
from ..store import layout
from ..store.reader import TailFollower
from .faults import Fault


class DemoError(RuntimeError):
    pass


@dataclass
class DemoResult:
    run_dir: str
    outcome: str  # "completed", "hang", "failed"
    exit_codes: dict[int, int | None] = field(default_factory=dict)
    steps_done: dict[int, int] = field(default_factory=dict)
    wall_s: float = 0.0
    message: str = ""
    hang_bound_s: float | None = None


def _store_socket() -> socket.socket:
    """The socket of the process group's store (torch.distributed's TCPStore), bound to 127.0.0.1
    and listening, for rank 0 to serve on (``master_listen_fd``): a TCPStore that binds its own
    socket listens on every interface (``::``), whatever MASTER_ADDR says."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TCPStore's own: its closed connections'
    sock.bind(("127.0.0.1", 0))  # TIME_WAIT does not keep the port from the next server
    sock.listen(128)
    return sock


def prepare_run_dir(run_dir: str, overwrite: bool) -> None:
    if os.path.exists(run_dir) and os.listdir(run_dir):
        if not overwrite:
            raise DemoError(
                f"run directory {run_dir!r} exists and is not empty; pass --overwrite "
                "to replace it, or choose another --run-dir"
            )
        if not layout.is_run_dir(run_dir):
            raise DemoError(f"refusing to overwrite {run_dir!r}: it does not look like a run directory")
        shutil.rmtree(run_dir)
    try:
        os.makedirs(os.path.join(run_dir, "logs"), exist_ok=True)
    except OSError as exc:
        raise DemoError(f"cannot create run directory {run_dir!r}: {exc.strerror}") from None


def run_demo(
    ranks: int,
    steps: int,
    run_dir: str,
    faults: Sequence[Fault],
    *,
    overwrite: bool = False,
    out: TextIO = sys.stdout,
    hang_after_s: float | None = None,
    startup_timeout_s: float = 180.0,
    extra_args: dict | None = None,
) -> DemoResult:
    """Run the job to its end (or its hang) and return what happened."""
    prepare_run_dir(run_dir, overwrite)
    store_sock = _store_socket()
    port = store_sock.getsockname()[1]
    demo_args = {
        "steps": steps,
        "run_dir": run_dir,
        "job": os.path.basename(os.path.abspath(run_dir)),
        "faults": [f.as_dict() for f in faults],
        "launcher_store": True,
        **(extra_args or {}),
    }
    procs: list[subprocess.Popen] = []
    logs = []
    t_start = time.monotonic()
    # TELEMETRY_* settings pass through to the ranks; other launchers' variables do not.
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_"))}
    # SIGTERM and SIGHUP (kill PID, a CI timeout, a closed terminal) stop the ranks too, as Ctrl-C does:
    # each rank is in its own session, so nothing else would reach them; a SIGKILLed launcher's ranks
    # get the kernel's parent-death signal (telemetry.children).
    previous = children.interrupt_on_signals()
    try:
        for r in range(ranks):
            env = {
                **base_env,
                "RANK": str(r),
                "LOCAL_RANK": str(r),
                "WORLD_SIZE": str(ranks),
                "LOCAL_WORLD_SIZE": str(ranks),
                "GROUP_RANK": "0",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "TRAINING_TELEMETRY_DEMO": json.dumps(demo_args),
                "OMP_NUM_THREADS": "1",
                "PYTHONUNBUFFERED": "1",
                children.PARENT_ENV: str(os.getpid()),
            }
            if r == 0:  # rank 0 serves the process group's store on this socket: 127.0.0.1 only
                env["TRAINING_TELEMETRY_DEMO_STORE_FD"] = str(store_sock.fileno())  # worker.STORE_FD_ENV
            # appended to (a new file each run): on a full disk every write past the end fails alike
            log_file = open(os.path.join(run_dir, "logs", f"rank-{r}.log"), "a")
            logs.append(log_file)
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "telemetry.demo.worker"],
                    env=env,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    pass_fds=(store_sock.fileno(),) if r == 0 else (),
                )
            )
            if r == 0:
                store_sock.close()  # rank 0 holds it now; connections wait in its backlog until it serves
        return _follow(procs, ranks, steps, run_dir, out, t_start, hang_after_s, startup_timeout_s)
    finally:
        with children.signals_held():  # a second signal waits until every rank is stopped
            store_sock.close()
            children.stop_group(procs)
            for f in logs:
                f.close()
            children.restore(previous)


class _Watch:
    """What the ranks' step files say so far: steps done per rank, recent step times, the loss."""

    def __init__(self, run_dir: str, ranks: int) -> None:
        self.tails = {r: TailFollower(run_dir, r) for r in range(ranks)}
        self.done = {r: 0 for r in range(ranks)}
        self.durations: list[float] = []
        self.last_progress = time.monotonic()
        self.last_loss = None

    def read(self, now: float) -> None:
        for r, tail in self.tails.items():
            new = tail.read_new()
            if new:
                self.done[r] += len(new)
                self.last_progress = now
                self.durations.extend(x["duration_s"] for x in new[-20:])
                if r == 0:
                    self.last_loss = new[-1].get("scalars", {}).get("loss", self.last_loss)
        self.durations = self.durations[-200:]

    @property
    def started(self) -> bool:
        return any(self.done.values())

    def median_step_s(self) -> float | None:
        return statistics.median(self.durations) if self.durations else None

    def status(self, steps: int, elapsed_s: float) -> str:
        lo, hi = min(self.done.values()), max(self.done.values())
        if not self.started:
            return (
                f"  starting {len(self.done)} ranks: importing torch, joining the process group, "
                f"waiting for the first step  {elapsed_s:5.1f} s"
            )
        if lo >= steps:
            return f"  all {steps} steps done; the ranks are flushing telemetry and exiting  {elapsed_s:5.1f} s"
        loss = f"  loss {self.last_loss:.3f}" if isinstance(self.last_loss, (int, float)) else ""
        median = self.median_step_s()
        assert median is not None  # a step done: its duration read
        return (
            f"  step {lo:4d}/{steps}  (ranks at {lo}-{hi})  median step {median * 1e3:6.1f} ms"
            f"{loss}  {elapsed_s:5.1f} s"
        )


def _follow(
    procs: list[subprocess.Popen],
    ranks: int,
    steps: int,
    run_dir: str,
    out: TextIO,
    t_start: float,
    hang_after_s: float | None,
    startup_timeout_s: float,
) -> DemoResult:
    watch = _Watch(run_dir, ranks)
    last_print = 0.0
    tty = out.isatty()
    result = DemoResult(run_dir, "completed")
    while True:
        time.sleep(0.25)
        now = time.monotonic()
        watch.read(now)
        codes = {r: p.poll() for r, p in enumerate(procs)}
        if now - last_print >= 1.0 or all(c is not None for c in codes.values()):
            last_print = now
            line = watch.status(steps, now - t_start)
            tty = _show(out, ("\r" + line) if tty else line, "" if tty else "\n") and tty
        result.hang_bound_s = hang_bound(watch.median_step_s(), hang_after_s)
        if _ended(result, codes, watch, now, t_start, run_dir, ranks, startup_timeout_s):
            break
    if tty:
        _show(out, "")
    for r, tail in watch.tails.items():
        watch.done[r] += len(tail.read_new())
    result.exit_codes = {r: p.poll() for r, p in enumerate(procs)}
    result.steps_done = watch.done
    result.wall_s = time.monotonic() - t_start
    if result.outcome == "completed" and min(watch.done.values()) < steps:
        result.message = _short_store(run_dir, steps, watch.done)
    return result


def _show(out: TextIO, text: str, end: str = "\n") -> bool:
    """Print a progress line; False when the output cannot be written (a full disk, a closed
    pipe): the job goes on, only its progress is not shown."""
    try:
        print(text, end=end, file=out, flush=True)
        return True
    except (OSError, ValueError):
        return False


def _short_store(run_dir: str, steps: int, done: dict[int, int]) -> str:
    """Why a job whose ranks all finished left fewer steps in its run directory: what the disk says."""
    held = ", ".join(f"rank {r}: {n}" for r, n in sorted(done.items()) if n < steps)
    why = "the ranks could not write the rest (see their telemetry warnings in logs/)"
    try:
        st = os.statvfs(run_dir)
        free = st.f_bavail * st.f_frsize
        if st.f_flag & os.ST_RDONLY:
            why = "its file system is read-only"
        elif free < 1 << 20:
            why = f"its disk is full ({free // 1024} KiB free)"
    except OSError as exc:
        why = f"it cannot be read ({exc.strerror or exc})"
    return (
        f"every rank finished its {steps} steps, but the run directory holds fewer ({held}): {why}; "
        "the analysis below covers what was recorded"
    )


def _ended(
    result: DemoResult,
    codes: dict[int, int | None],
    watch: _Watch,
    now: float,
    t_start: float,
    run_dir: str,
    ranks: int,
    startup_timeout_s: float,
) -> bool:
    """Whether the job is over: every rank exited, one failed, it hung, or it never started.
    Sets ``result``'s outcome and message accordingly."""
    failed = {r: c for r, c in codes.items() if c not in (None, 0)}
    if failed:
        _record_exits(run_dir, failed)
        time.sleep(1.0)  # let the others notice and flush
        result.outcome = "failed"
        result.message = "rank(s) " + ", ".join(f"{r} ({_how(c)})" for r, c in sorted(failed.items())) + " failed"
        return True
    if all(c == 0 for c in codes.values()):
        return True
    bound = result.hang_bound_s
    assert bound is not None  # set by _follow before each call
    if watch.started and now - watch.last_progress > bound:
        # The same test the analysis applies, on the heartbeats the ranks keep writing.
        hangs = detect_hang(_read_progress(run_dir, ranks), None, ranks, bound)
        if hangs:
            result.outcome = "hang"
            result.message = f"{hangs[0].evidence}; ranks killed"
            return True
    if not watch.started and now - t_start > startup_timeout_s:
        result.outcome = "failed"
        result.message = f"no step completed within {startup_timeout_s:.0f} s of start"
        return True
    return False


def _signal_name(code: int) -> str | None:
    """``SIGKILL`` for an exit code of -9 (a process ended by a signal), else None."""
    if code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _how(code: int) -> str:
    """``exit 1``, or ``killed by SIGKILL (exit -9)``."""
    name = _signal_name(code)
    return f"killed by {name} (exit {code})" if name else f"exit {code}"


def _record_exits(run_dir: str, codes: dict[int, int]) -> None:
    """Write how each failed rank's process ended into the run directory (the store's
    ``rank-N.exit.json``), so the analysis can say why a rank was lost. Only the ranks that ended
    on their own: the ones this launcher stops afterwards are not lost."""
    from ..store import layout

    for r, code in codes.items():
        path = layout.exit_path(run_dir, r)
        if os.path.exists(path):
            continue
        doc = {"rank": r, "exit_code": code, "time_s": time.time(), "seen_by": "telemetry demo launcher"}
        if _signal_name(code):
            doc["signal"] = _signal_name(code)
        try:
            layout.write_json_atomic(path, doc)
        except OSError:
            pass  # a run directory that cannot be written: the analysis says less, the launcher goes on


def _read_progress(run_dir: str, ranks: int) -> dict[int, dict]:
    out = {}
    for r in range(ranks):
        try:
            with open(layout.progress_path(run_dir, r), encoding="utf-8") as f:
                out[r] = json.load(f)
        except (OSError, ValueError):
            continue
    return out


def log_tail(run_dir: str, rank: int, lines: int = 15) -> str:
    try:
        with open(os.path.join(run_dir, "logs", f"rank-{rank}.log"), errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""

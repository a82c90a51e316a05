"""The scheduler's account of a rank, read on the sampler thread at its interval: how long the
training thread waited for a CPU (:class:`ThreadSchedSource`, from its ``schedstat``), whether its
cgroup's CPU quota throttled it (:class:`CgroupCpuSource`, v1 or v2, :class:`CpuCgroup`), and the host's
CPU pressure (:class:`PressureSource`, PSI); :func:`build_sched_sources` builds those the platform has.

Ratios are seconds per second over the sampler's last interval, totals are counters since start. A
source the platform lacks is not built (said once) and records nothing: never a false 0. The cgroup is
looked up again at every reading; a quota set on an ancestor only is not seen. Each reading:
docs/instrumenting.md, "Devices and host".
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from ..recorder.readers import Reader

log = logging.getLogger("telemetry")
# A rate needs an interval this long: the sampler's first reading comes right after the sources are
# built, and a share of a few microseconds is noise, not a reading.
MIN_INTERVAL_S = 0.01


class Unavailable(Exception):
    """The platform lacks this reading; the message says what is missing."""


def _read(path: str) -> str:
    with open(path, "rb") as f:
        return f.read().decode("ascii", "replace")


class ThreadSchedSource:
    """The training thread's time on a CPU and its run-queue delay, from its schedstat."""

    def __init__(
        self, tid: int, pid: int | None = None, proc: str = "/proc", clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.path = f"{proc}/{pid if pid is not None else os.getpid()}/task/{tid}/schedstat"
        self.clock = clock
        self.gone = False
        try:
            run, wait, slices = self._fields()
        except (OSError, ValueError, IndexError) as exc:
            raise Unavailable(f"{self.path} cannot be read ({exc})") from exc
        if run > 0 and wait == 0 and slices == 0:  # a kernel that does not keep sched_info: zeros are not data
            raise Unavailable(f"{self.path} has no run-queue delay (the kernel keeps no sched_info)")
        self._last = (self.clock(), run, wait)

    def _fields(self) -> tuple[int, int, int]:
        f = _read(self.path).split()
        return int(f[0]), int(f[1]), int(f[2])

    def read(self) -> dict[str, float]:
        if self.gone:
            return {}
        try:
            run, wait, _ = self._fields()
        except FileNotFoundError:  # the training thread ended: nothing left to say about it
            self.gone = True
            log.info("telemetry: the thread that called telemetry.init ended: no more run-queue delay readings")
            return {}
        now = self.clock()
        t0, run0, wait0 = self._last
        self._last = (now, run, wait)
        out = {"cpu_runqueue_wait_seconds": wait * 1e-9}
        dt = now - t0
        if dt >= MIN_INTERVAL_S:
            out["cpu_running_ratio"] = (run - run0) * 1e-9 / dt
            out["cpu_runqueue_wait_ratio"] = (wait - wait0) * 1e-9 / dt
        return out


def _cgroup_lines(proc: str) -> tuple[str | None, str | None]:
    """This process's cgroup paths: (the v1 CPU controller's, the v2 unified one's)."""
    v1 = v2 = None
    for line in _read(f"{proc}/self/cgroup").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            v2 = path
        elif "cpu" in controllers.split(","):
            v1 = path
    return v1, v2


def _mounts(proc: str) -> list[tuple[str, str, str, set[str]]]:
    """cgroup mounts from mountinfo: (fs type, root within the hierarchy, mount point, super options)."""
    out = []
    for line in _read(f"{proc}/self/mountinfo").splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        f, r = left.split(), right.split()
        if len(f) < 5 or len(r) < 3 or r[0] not in ("cgroup", "cgroup2"):
            continue
        point = f[4].replace("\\040", " ")
        out.append((r[0], f[3], point, set(r[2].split(","))))
    return out


def _under(root: str, point: str, path: str) -> str:
    """The directory of cgroup ``path`` in a hierarchy mounted at ``point`` from ``root``."""
    if root != "/" and (path == root or path.startswith(root.rstrip("/") + "/")):
        path = path[len(root.rstrip("/")) :]
    return os.path.join(point, path.lstrip("/"))


class CpuCgroup:
    """Where this process's CPU controller files are: v1's CPU controller when it is mounted (a
    hybrid host keeps it there), else v2's unified hierarchy. The mounts are read once; the
    process's cgroup at every :meth:`dir` (it may be moved). ``fs`` prefixes the mount points
    (tests: a fake tree)."""

    def __init__(self, proc: str = "/proc", fs: str = "/") -> None:
        self.proc, self.fs = proc, fs
        try:
            v1, v2 = _cgroup_lines(proc)
            mounts = _mounts(proc)
        except OSError as exc:
            raise Unavailable(f"{proc}/self/cgroup or mountinfo cannot be read ({exc})") from exc
        pick = [
            (1, root, point) for t, root, point, opts in mounts if t == "cgroup" and "cpu" in opts and v1 is not None
        ]
        pick += [(2, root, point) for t, root, point, _ in mounts if t == "cgroup2" and v2 is not None]
        if not pick:
            raise Unavailable("no cgroup CPU controller is mounted for this process")
        self.version, self._root, self._point = pick[0]

    def dir(self) -> str:
        v1, v2 = _cgroup_lines(self.proc)
        path = v1 if self.version == 1 else v2
        if path is None:
            raise Unavailable(f"{self.proc}/self/cgroup no longer names a cgroup v{self.version} CPU controller")
        return os.path.join(self.fs, _under(self._root, self._point, path).lstrip("/"))


def _stat(path: str) -> dict[str, int]:
    out = {}
    for line in _read(path).splitlines():
        k, _, v = line.partition(" ")
        try:
            out[k] = int(v)
        except ValueError:
            continue
    return out


class CgroupCpuSource:
    """The CPU throttling of this process's cgroup (cgroup v1 or v2) and its quota in cores."""

    def __init__(self, proc: str = "/proc", fs: str = "/", clock: Callable[[], float] = time.monotonic) -> None:
        self.cgroup = CpuCgroup(proc, fs)
        self.version, self.dir, self.clock = self.cgroup.version, self.cgroup.dir(), clock
        try:
            first = self._counters()
        except OSError as exc:
            raise Unavailable(f"{self.dir}/cpu.stat cannot be read ({exc})") from exc
        if first is None:
            raise Unavailable(
                f"{self.dir}/cpu.stat has no throttling counters (the CPU controller is not enabled for this cgroup)"
            )
        self._last: tuple[str, float, tuple[int, int, float]] | None = (self.dir, self.clock(), first)

    def _counters(self) -> tuple[int, int, float] | None:
        """(nr_periods, nr_throttled, throttled seconds), or None when cpu.stat lacks them."""
        s = _stat(f"{self.dir}/cpu.stat")
        if "nr_throttled" not in s or "nr_periods" not in s:
            return None
        if self.version == 1 and "throttled_time" in s:
            return s["nr_periods"], s["nr_throttled"], s["throttled_time"] * 1e-9
        if self.version == 2 and "throttled_usec" in s:
            return s["nr_periods"], s["nr_throttled"], s["throttled_usec"] * 1e-6
        return None

    def _quota_cores(self) -> float | None:
        try:
            if self.version == 1:
                quota = int(_read(f"{self.dir}/cpu.cfs_quota_us").strip())
                period = int(_read(f"{self.dir}/cpu.cfs_period_us").strip())
            else:
                q, _, p = _read(f"{self.dir}/cpu.max").strip().partition(" ")
                if q == "max":
                    return None
                quota, period = int(q), int(p or 100000)
        except (OSError, ValueError):
            return None
        return quota / period if quota > 0 and period > 0 else None

    def read(self) -> dict[str, float]:
        self.dir = self.cgroup.dir()  # moved since the last reading?
        counters = self._counters()
        if counters is None:
            self._last = None
            return {}
        now = self.clock()
        periods, throttled, secs = counters
        out = {"cpu_throttled_seconds": secs, "cpu_throttled_periods": float(throttled)}
        last, self._last = self._last, (self.dir, now, counters)
        if last is not None and last[0] == self.dir and now - last[1] >= MIN_INTERVAL_S:
            dt = now - last[1]
            p0, n0, s0 = last[2]
            out["cpu_throttled_ratio"] = max(secs - s0, 0.0) / dt
            if periods > p0:
                out["cpu_throttled_periods_ratio"] = max(throttled - n0, 0) / (periods - p0)
        quota = self._quota_cores()
        if quota is not None:
            out["cpu_quota_cores"] = quota
        return out


class PressureSource:
    """The host's CPU pressure (PSI): the share of time some runnable task waited for a CPU."""

    def __init__(self, proc: str = "/proc", clock: Callable[[], float] = time.monotonic) -> None:
        self.path = f"{proc}/pressure/cpu"
        self.clock = clock
        try:
            total = self._total()
        except (OSError, ValueError) as exc:
            raise Unavailable(f"{self.path} cannot be read ({exc})") from exc
        self._last = (self.clock(), total)

    def _total(self) -> float:
        for line in _read(self.path).splitlines():
            if line.startswith("some "):
                for field in line.split()[1:]:
                    k, _, v = field.partition("=")
                    if k == "total":
                        return int(v) * 1e-6
        raise ValueError("no 'some ... total=' line")

    def read(self) -> dict[str, float]:
        total, now = self._total(), self.clock()
        t0, total0 = self._last
        self._last = (now, total)
        if now - t0 < MIN_INTERVAL_S:
            return {}
        return {"cpu_pressure_some_ratio": max(total - total0, 0.0) / (now - t0)}


def build_sched_sources(tid: int | None, say: Callable[[str], None]) -> list[Reader]:
    """The scheduler readings this platform has, for the training thread ``tid``; each missing one
    is said once through ``say``."""
    out: list[Reader] = []
    makers: list[tuple[str, Callable[[], Reader]]] = [
        ("cgroup CPU throttling", CgroupCpuSource),
        ("CPU pressure (PSI)", PressureSource),
    ]
    if tid is not None:
        makers.insert(0, ("run-queue delay", lambda: ThreadSchedSource(tid)))
    else:
        say("no run-queue delay readings: the training thread is not known")
    for what, make in makers:
        try:
            out.append(make())
        except Unavailable as exc:
            say(f"no {what} readings: {exc}")
    return out

"""The node's RDMA NICs (InfiniBand, RoCE), read from the kernel's port counters on the sampler thread
(:class:`NicSource`, :func:`build_network_sources`).

Readings ``nic_bytes_tx``, ``nic_bytes_rx`` (``port_xmit_data`` / ``port_rcv_data`` x 4: the kernel counts
4-byte words) and ``nic_errors_<counter>``: counters since telemetry started, summed over every device
and port of ``/sys/class/infiniband``, so node totals (every process on the node counts; every rank on
a node reads the same: take ``max by (node)``). The rule a reader must know: the totals only grow (a
counter that went back counts from 0 again), and a machine without RDMA devices records nothing, never
a false 0. Each reading, the rescans and the limits: docs/instrumenting.md, "Devices and host".
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Callable

from ..logonce import LogOnce
from .sched import Unavailable

if TYPE_CHECKING:
    from ..recorder.readers import Reader

log = logging.getLogger("telemetry")

# The counter files read, each with its reading's name and the factor to its unit.
DATA = {"port_xmit_data": "nic_bytes_tx", "port_rcv_data": "nic_bytes_rx"}
ERRORS = (
    "symbol_error",
    "link_downed",
    "port_rcv_errors",
    "link_error_recovery",
    "port_xmit_discards",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
)
COUNTERS = (*DATA, *ERRORS)
WORD_BYTES = 4  # port_xmit_data and port_rcv_data count 4-byte words
# The widths of the counters in the port's PortCounters attribute (IBA): a counter at its maximum
# stops there. The data counters are 32 bits there; a port with extended counters shows 64 bits.
_MAX = {
    "port_xmit_data": 2**32 - 1,
    "port_rcv_data": 2**32 - 1,
    "symbol_error": 2**16 - 1,
    "link_downed": 2**8 - 1,
    "port_rcv_errors": 2**16 - 1,
    "link_error_recovery": 2**8 - 1,
    "port_xmit_discards": 2**16 - 1,
    "local_link_integrity_errors": 2**4 - 1,
    "excessive_buffer_overrun_errors": 2**4 - 1,
}
# The ports are listed again every this many readings (a port that appears later; at the default
# 1 s interval, once a minute), and after any reading in which a file failed.
RESCAN_EVERY = 60


def reading(counter: str) -> str:
    """The reading a counter file adds to: ``nic_bytes_tx``, ``nic_errors_symbol_error``, ..."""
    return DATA.get(counter) or f"nic_errors_{counter}"


def _value(path: str) -> int:
    with open(path, "rb") as f:
        return int(f.read().strip())


class NicSource:
    """The node's RDMA port counters as node totals since this source started.

    Each file's last value is kept and its growth since then added; a file whose value went back
    counts from 0 again (its new value is its growth): a reset followed within one interval by more
    growth than the old value is not seen. A file seen for the first time counts from its first value;
    one that cannot be read is skipped for that reading (said once; its growth counts when it reads
    again), and a reading none of whose files could be read is left out. A counter stopped at its
    maximum is said once. The ports are listed again every :data:`RESCAN_EVERY` readings and after a
    failed read; a machine whose RDMA driver loads after ``telemetry.init`` is not seen."""

    def __init__(self, root: str = "/sys", rescan_every: int = RESCAN_EVERY) -> None:
        self.base = os.path.join(root, "class", "infiniband")
        self.rescan_every = max(int(rescan_every), 1)
        self.failures = 0  # counter files that could not be read or parsed, over all readings
        self._once = LogOnce(log, logging.INFO)
        self._reads = 0
        self._last: dict[str, int] = {}  # file -> its value at the last reading
        self._totals: dict[str, float] = {}  # reading -> its total since start
        try:
            devices = sorted(os.listdir(self.base))
        except OSError:
            devices = []
        if not devices:
            raise Unavailable(f"no RDMA NICs under {self.base}")
        self._files = self._scan()
        if not self._files:
            raise Unavailable(f"RDMA devices under {self.base} ({', '.join(devices)}) but no port counters")
        for path, counter in self._files.items():  # the start: growth counts from here
            try:
                self._last[path] = self._check(path, counter, _value(path))
            except (OSError, ValueError):
                pass  # said at the first reading that fails it
        if not self._last:
            raise Unavailable(f"no port counter under {self.base} can be read")
        for counter in self._files.values():
            self._totals.setdefault(reading(counter), 0.0)

    def _scan(self) -> dict[str, str]:
        """{counter file: counter name} of every port of every device, in a stable order."""
        out: dict[str, str] = {}
        try:
            devices = sorted(os.listdir(self.base))
        except OSError:
            return out
        for dev in devices:
            ports = os.path.join(self.base, dev, "ports")
            try:
                names = sorted(os.listdir(ports), key=lambda p: (len(p), p))
            except OSError:
                continue
            for port in names:
                d = os.path.join(ports, port, "counters")
                for counter in COUNTERS:
                    path = os.path.join(d, counter)
                    if os.path.isfile(path):
                        out[path] = counter
        return out

    def _rescan(self) -> None:
        self._files = self._scan()
        for path in [p for p in self._last if p not in self._files]:  # a port or device gone
            del self._last[path]

    def _check(self, path: str, counter: str, value: int) -> int:
        if value == _MAX[counter]:
            self._once(
                "saturated:" + path,
                "telemetry: %s is at its maximum (%d): the counter stops there until it is reset, so its "
                "growth is no longer counted",
                path,
                value,
            )
        return value

    def read(self) -> dict[str, float]:
        self._reads += 1
        if self._reads % self.rescan_every == 0:
            self._rescan()
        present: set[str] = set()
        failed = False
        for path, counter in self._files.items():
            try:
                value = self._check(path, counter, _value(path))
            except (OSError, ValueError) as exc:
                failed = True
                self.failures += 1
                self._once(
                    "unreadable:" + path,
                    "telemetry: RDMA counter %s cannot be read (%s): skipped while it cannot (further failures counted)",
                    path,
                    exc,
                )
                continue
            name = reading(counter)
            present.add(name)
            last = self._last.get(path)
            self._last[path] = value
            self._totals.setdefault(name, 0.0)
            if last is None:
                continue  # first seen (a port that appeared): it counts from here
            grown = value - last if value >= last else value  # went back: reset (or a new device), from 0
            self._totals[name] += grown * (WORD_BYTES if counter in DATA else 1)
        if failed:
            self._rescan()  # a port that went, or the file's device removed: list them again
        return {name: self._totals[name] for name in sorted(present)}


def build_network_sources(say: Callable[[str], None], root: str = "/sys") -> list[Reader]:
    """The node's RDMA NIC counters, or nothing (said once through ``say``) on a machine without them."""
    try:
        return [NicSource(root)]
    except Unavailable as exc:
        say(f"{exc}: network counters off")
        return []

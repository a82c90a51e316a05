"""The device sampler: a thread that reads the host, the scheduler's account of the training
thread (:mod:`.sched`: run-queue delay, cgroup CPU throttling, CPU pressure), the node's RDMA NIC
counters (:mod:`.network`), the GPU (NVML) and CUDA memory at an interval.

Each reading is one event in the recorder's buffer; the pipeline attaches the latest reading to
every step record (columns ``dev.<name>``) and to the progress heartbeat (so Prometheus shows the
GPU of a hung rank too). CUDA memory is read only once the training code has initialized CUDA
(the sampler never does), and the peak is reset after each reading, so ``cuda_memory_peak_bytes``
is the peak of the last interval.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import TYPE_CHECKING, TypedDict

from ..logonce import LogOnce
from ..recorder import events as ev
from ..recorder import readers
from .network import build_network_sources
from .sched import build_sched_sources
from .storage import StorageSource

if TYPE_CHECKING:
    from ..config import Config
    from ..recorder.readers import Reader
    from ..recorder.wall import Recorder

log = logging.getLogger("telemetry")


class DeviceInfo(TypedDict, total=False):
    """What the sampler found, for MFU and labels."""

    gpu_name: str
    gpu: str  # the GPU's label (its CUDA index, or UUID)
    storage_read: bool  # the storage read-bytes reading is on


class HostSource:
    """This process's CPU use (cores busy over the interval), resident memory, and what a cause of
    slowness needs from the host: the training thread's involuntary context switches (it was made
    to wait for a core), major page faults (memory paged in from disk), swap in use, and the
    host's CPU busy and steal shares (a VM's vCPU taken by its hypervisor). Rates are over the
    interval; a reading the platform lacks is left out."""

    def __init__(self) -> None:
        import psutil

        self.psutil = psutil
        self.proc = psutil.Process()
        self._last = self._counters()

    def _counters(self) -> dict[str, float]:
        t = self.proc.cpu_times()
        out = {
            "t": time.monotonic(),
            "cpu": t.user + t.system,
            "invol": float(self.proc.num_ctx_switches().involuntary),
        }
        host = self.psutil.cpu_times()
        out["host_total"] = float(sum(host))
        out["host_idle"] = float(host.idle + getattr(host, "iowait", 0.0))
        out["host_steal"] = float(getattr(host, "steal", 0.0))
        try:
            with open("/proc/self/stat", "rb") as f:  # Linux: majflt is the 10th field after the name
                out["majflt"] = float(f.read().rsplit(b")", 1)[1].split()[9])
        except (OSError, IndexError, ValueError):
            pass
        return out

    def read(self) -> dict[str, float]:
        now, then = self._counters(), self._last
        self._last = now
        out = {"process_cpu_seconds": now["cpu"], "process_resident_memory_bytes": float(self.proc.memory_info().rss)}
        dt = now["t"] - then["t"]
        if dt > 0:
            out["process_cpu_ratio"] = (now["cpu"] - then["cpu"]) / dt
            out["process_involuntary_switches_per_second"] = (now["invol"] - then["invol"]) / dt
            if "majflt" in now and "majflt" in then:
                out["process_major_faults_per_second"] = (now["majflt"] - then["majflt"]) / dt
        total = now["host_total"] - then["host_total"]
        if total > 0:
            out["host_cpu_busy_ratio"] = 1.0 - (now["host_idle"] - then["host_idle"]) / total
            out["host_cpu_steal_ratio"] = (now["host_steal"] - then["host_steal"]) / total
        try:
            out["host_swap_used_bytes"] = float(self.psutil.swap_memory().used)
        except (OSError, RuntimeError):
            pass
        return out


class CudaMemorySource:
    def __init__(self, device: int) -> None:
        self.device = device

    def read(self) -> dict[str, float]:
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_initialized():
            return {}
        s = torch.cuda.memory_stats(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        return {
            "cuda_memory_allocated_bytes": float(s.get("allocated_bytes.all.current", 0)),
            "cuda_memory_reserved_bytes": float(s.get("reserved_bytes.all.current", 0)),
            "cuda_memory_peak_bytes": float(s.get("allocated_bytes.all.peak", 0)),
            "cuda_alloc_retries": float(s.get("num_alloc_retries", 0)),
            "cuda_ooms": float(s.get("num_ooms", 0)),
        }


class Sampler:
    def __init__(self, recorder: Recorder, sources: list[Reader], interval_s: float) -> None:
        self.recorder = recorder
        self.sources = sources
        self.interval_s = interval_s
        self.failures = 0
        self._once = LogOnce()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="telemetry-sampler", daemon=True)

    def start(self) -> "Sampler":
        self.sample()
        self._thread.start()
        return self

    def sample(self) -> None:
        values: dict[str, float] = {}
        # its own sources, then the training side's readers added after init (a watched dataset)
        for src in [*self.sources, *readers.current()]:
            try:
                values.update(src.read())
            except Exception as exc:  # noqa: BLE001 - a failing reader must not stop the others
                self.failures += 1
                self._once(
                    type(src).__name__,
                    "telemetry: device sampler: %s failed: %s (further failures counted)",
                    type(src).__name__,
                    exc,
                )
        if values:
            self.recorder.emit((ev.DEVICE, self.recorder.now(), values))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2.0)
        for src in self.sources:
            close = getattr(src, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # noqa: BLE001 - closing a poller at shutdown: nothing left to do if it fails
                    pass


def build_sampler(
    recorder: Recorder, config: Config, local_rank: int, thread_id: int | None = None
) -> tuple[Sampler | None, DeviceInfo]:
    """The sampler for this rank and what it found (GPU name and label, for MFU and labels).
    ``thread_id``: the training thread's native id (the one that called init), whose run-queue
    delay is read; None: not read."""
    if config.device_interval_s <= 0:
        return None, {}
    sources: list[Reader] = []
    info: DeviceInfo = {}
    try:
        sources.append(HostSource())
    except Exception as exc:  # noqa: BLE001 - psutil missing or restricted
        log.info("telemetry: host sampling off (%s)", exc)
    sources += build_sched_sources(thread_id, lambda why: log.info("telemetry: %s", why))
    sources += build_network_sources(lambda why: log.info("telemetry: %s", why))  # the node's RDMA NICs
    try:
        sources.append(StorageSource())
        info["storage_read"] = True  # the exporter's read-bytes counter starts at 0 (see PrometheusSink)
    except Exception as exc:  # noqa: BLE001 - no /proc/<pid>/io (not Linux, or hidden): said once, no false 0
        log.info("telemetry: storage read bytes off (%s)", exc)
    if config.gpu:
        from .nvml import cuda_index, open_nvml

        gpu = open_nvml(local_rank)
        if gpu is not None:
            sources.append(gpu)
            info.update(gpu_name=gpu.name, gpu=gpu.label)
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            sources.append(CudaMemorySource(cuda_index(local_rank)))
    if not sources:
        return None, info
    return Sampler(recorder, sources, config.device_interval_s).start(), info

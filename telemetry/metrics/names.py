"""Every Prometheus metric the package exports: its name, type, help text and labels, in one place.

The Prometheus sink declares its metrics from these records, the Prometheus reader builds its PromQL
from them, the rules' and dashboards' tests check every name against :data:`ALL`, and the manual's
reference is generated from them. Each metric says the least ``metrics_level`` that exports it
(:data:`LEVELS`). Conventions (Prometheus'): base units in the name, counters with ``_total``,
:data:`BASE_LABELS` on every per-rank series, never a step number or a tensor shape as a label value.

>>> STEPS.series
('train_steps_total',)
>>> STEP_DURATION.sum, STEP_DURATION.count
('train_step_duration_seconds_sum', 'train_step_duration_seconds_count')
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "train_"
BASE_LABELS = ("job", "rank", "local_rank", "node")  # on every series a rank exports
KINDS = ("counter", "gauge", "histogram")
# The cardinality budget per rank (metrics_level), least detail first: a metric is exported at its own level
# and every level above it; a level drops whole families, never renames one or drops a label.
LEVELS = ("job", "phase", "full")


@dataclass(frozen=True)
class Metric:
    """One metric family. ``name`` is what ``prometheus_client`` is given (a counter without its
    ``_total``); ``labels`` are those beyond :data:`BASE_LABELS`; ``group`` says who exports it."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...] = ()
    group: str = "step"  # step | collective | progress | throughput | device | online | telemetry
    level: str = "job"  # the least metrics_level that exports it (LEVELS)

    def __post_init__(self) -> None:
        if not self.name.startswith(PREFIX) or self.kind not in KINDS:
            raise ValueError(f"metric {self.name!r} ({self.kind}): names start with {PREFIX!r}; kinds: {KINDS}")
        if self.level not in LEVELS:
            raise ValueError(f"metric {self.name!r}: level {self.level!r}; levels: {LEVELS}")
        if self.kind == "counter" and self.name.endswith("_total"):
            raise ValueError(f"counter {self.name!r}: give the name without _total (the client adds it)")

    @property
    def total(self) -> str:
        """A counter's sample name."""
        return f"{self.name}_total"

    @property
    def sum(self) -> str:
        return f"{self.name}_sum"

    @property
    def count(self) -> str:
        return f"{self.name}_count"

    @property
    def bucket(self) -> str:
        return f"{self.name}_bucket"

    @property
    def series(self) -> tuple[str, ...]:
        """The names its samples carry in the exposition (``_created`` samples left out)."""
        if self.kind == "counter":
            return (self.total,)
        if self.kind == "histogram":
            return (self.bucket, self.sum, self.count)
        return (self.name,)

    @property
    def all_labels(self) -> tuple[str, ...]:
        return BASE_LABELS + self.labels

    def exported_at(self, level: str) -> bool:
        """Whether a rank exports this metric at ``metrics_level`` ``level``: a rank at ``phase`` or
        ``job`` leaves the more detailed families out, the others under their own names and labels.

        >>> PHASE_DURATION.exported_at("phase"), PHASE_DURATION.exported_at("job")
        (True, False)
        >>> [m.name for m in ALL if not m.exported_at("phase")][:2]
        ['train_collective_duration_seconds', 'train_collective_bytes']
        """
        return LEVELS.index(level) >= LEVELS.index(self.level)


# ---- steps and phases ---------------------------------------------------------------------------
STEP_DURATION = Metric("train_step_duration_seconds", "histogram", "Wall time of one training step")
PHASE_DURATION = Metric(
    "train_phase_duration_seconds",
    "histogram",
    "Time in a phase per step (the data wait is train_dataloader_wait_seconds)",
    ("phase",),
    level="phase",
)
DATALOADER_WAIT = Metric(
    "train_dataloader_wait_seconds", "histogram", "Time blocked waiting for the next batch, per step"
)
STEPS = Metric("train_steps", "counter", "Completed steps")
STEP_FAILURES = Metric("train_step_failures", "counter", "Steps that raised")
LOG_VALUE = Metric("train_log_value", "gauge", "Last value given to telemetry.log", ("name",), level="phase")
BUILD_INFO = Metric(
    "train_build_info", "gauge", "Versions of this telemetry session", ("version", "python", "torch"), "telemetry"
)

# ---- collectives --------------------------------------------------------------------------------
COLLECTIVE_DURATION = Metric(
    "train_collective_duration_seconds", "histogram", "Duration of one collective call", ("op",), "collective", "full"
)
COLLECTIVE_BYTES = Metric(
    "train_collective_bytes", "counter", "Bytes moved by collectives (payload)", ("op",), "collective", "full"
)
COLLECTIVE_CALLS = Metric("train_collective_calls", "counter", "Collective calls", ("op",), "collective", "full")
# These two stay per op at every level (the bus bandwidth recorded per op and its alert read them)
COLLECTIVE_SECONDS = Metric(
    "train_collective_seconds", "counter", "Time in collective calls, issue to completion", ("op",), "collective"
)
COLLECTIVE_BUS_BYTES = Metric(
    "train_collective_bus_bytes",
    "counter",
    "Bytes x the op's bus factor (nccl-tests): rate(this) / rate(train_collective_seconds_total) is the bus bandwidth",
    ("op",),
    "collective",
)
COLLECTIVE_BUSBW = Metric(
    "train_collective_busbw_bytes_per_second",
    "gauge",
    "Bus bandwidth of the last step's calls of an op (nccl-tests factors)",
    ("op",),
    "collective",
    "full",
)
COLLECTIVE_ALGBW = Metric(
    "train_collective_algbw_bytes_per_second",
    "gauge",
    "Algorithm bandwidth (bytes / time) of the last step's calls of an op",
    ("op",),
    "collective",
    "full",
)
COLLECTIVE_BLOCKED = Metric(
    "train_collective_blocked_seconds",
    "counter",
    "Time the training loop was blocked in collectives",
    group="collective",
)
PHASE_BLOCKED = Metric(
    "train_phase_blocked_seconds",
    "counter",
    "Time blocked in collectives inside a phase (its compute: the phase's time less this)",
    ("phase",),
    "collective",
    "phase",
)
COMM_GROUP_BLOCKED = Metric(
    "train_comm_group_blocked_seconds",
    "counter",
    "Time blocked in collectives per process group, labelled by its parallel dimension (dp, tp, pp, ...; "
    "world; g<hash> for an unnamed group)",
    ("group",),
    "collective",
    "full",
)
COMM_GROUP_BYTES = Metric(
    "train_comm_group_bytes",
    "counter",
    "Bytes of collectives per process group, labelled by its parallel dimension",
    ("group",),
    "collective",
    "full",
)

# ---- checkpoints -------------------------------------------------------------------------------
CHECKPOINT_SECONDS = Metric(
    "train_checkpoint_seconds",
    "counter",
    "Time in checkpoint saves and loads (io.checkpoint_s, _async_s, _io_s): part=blocking, the training "
    "thread waited in the call; part=async, an async save's upload after the call returned; part=storage, "
    "this rank's own storage writes or reads within them (a step with both kinds: split by their time)",
    ("kind", "part"),
    "step",
)
CHECKPOINT_BYTES = Metric(
    "train_checkpoint_bytes",
    "counter",
    "Bytes of checkpoint saves and loads this rank wrote or read, as the storage layer reports them",
    ("kind",),
    "step",
)

# ---- input (from the steps' io.input_ready and io.read_bytes) -----------------------------------
INPUT_STEPS = Metric(
    "train_input_steps", "counter", "Steps that took a batch from a watched data loader (io.input_ready set)"
)
INPUT_READY_STEPS = Metric(
    "train_input_ready_steps",
    "counter",
    "Of train_input_steps, those whose every batch was already waiting (io.input_ready = 1): "
    "increase(this) / increase(train_input_steps_total) is the input readiness",
)
INPUT_READ_BYTES = Metric(
    "train_input_read_bytes",
    "counter",
    "Bytes the rank and its data-loader workers read from storage, counted in the steps (io.read_bytes; "
    "a page-cache hit is no storage read)",
)

# ---- throughput ---------------------------------------------------------------------------------
TOKENS = Metric("train_tokens", "counter", "Tokens processed (absent until a step carries tokens)", group="throughput")
SAMPLES = Metric(
    "train_samples", "counter", "Samples processed (absent until a step carries samples)", group="throughput"
)
TOKENS_PER_SECOND = Metric(
    "train_tokens_per_second", "gauge", "Tokens per second over the last step that carried tokens", group="throughput"
)
SAMPLES_PER_SECOND = Metric(
    "train_samples_per_second",
    "gauge",
    "Samples per second over the last step that carried samples",
    group="throughput",
)
MFU = Metric(
    "train_mfu_ratio",
    "gauge",
    "Model FLOPs utilization of the last step (absent without flops_per_token and a known peak)",
    group="throughput",
)

# ---- progress (what a hang looks like) ------------------------------------------------------------
LAST_STEP = Metric("train_last_step", "gauge", "Number of the last completed step", group="progress")
LAST_STEP_TIMESTAMP = Metric(
    "train_last_step_timestamp_seconds", "gauge", "When the last step ended (epoch seconds)", group="progress"
)
STEP_IN_PROGRESS = Metric(
    "train_step_in_progress_seconds",
    "gauge",
    "How long the current step has run (0 between steps); grows without bound in a hang",
    group="progress",
)
BLOCKED_IN_COLLECTIVE = Metric(
    "train_blocked_in_collective", "gauge", "1 while the training loop waits in a collective", group="progress"
)

# ---- online detection (rank 0) ------------------------------------------------------------------
STRAGGLER_SCORE = Metric(
    "train_straggler_score",
    "gauge",
    "Median excess of the scored rank's compute over its peers' (0.5 = 50% slower), from online detection on rank 0",
    ("scored_rank",),
    "online",
)
STRAGGLER_COST = Metric(
    "train_straggler_cost_ratio",
    "gauge",
    "What the scored rank costs the job: the share of the step time its straggler finding's healing would save "
    "(0: no straggler finding names it), from online detection on rank 0",
    ("scored_rank",),
    "online",
)
FINDINGS = Metric(
    "train_findings", "gauge", "Findings of online detection in the current window, by kind", ("kind",), "online"
)

# ---- telemetry's own health ---------------------------------------------------------------------
DROPPED = Metric(
    "train_telemetry_dropped",
    "counter",
    "What telemetry accepted but could not deliver, by sink: buffer: events (the hot-path buffer was full); "
    "otlp: spans; prometheus_labels: label values over the cap; pushgateway: pushes that failed; others: step records",
    ("sink",),
    "telemetry",
)
CAPTURES = Metric(
    "train_captures",
    "counter",
    "Profiler captures on findings, by outcome: planned (rank 0), taken, missed (heard of too late), skipped "
    "(the user's own profiler ran), failed, over_budget (a trace too large, or a finding past capture_max)",
    ("outcome",),
    "telemetry",
)


# ---- device and host readings (the sampler's, read at scrape time) --------------------------------
def _device(name: str, kind: str, help: str, labels: tuple[str, ...] = ()) -> Metric:
    return Metric(name, kind, help, labels, "device")


_G = ("gpu",)
# The sampler's reading name -> its metric. Readings of one GPU carry the label ``gpu``; the host's
# and the node's do not.
DEVICE: dict[str, Metric] = {
    "gpu_utilization_ratio": _device("train_gpu_utilization_ratio", "gauge", "GPU busy fraction (NVML)", _G),
    "gpu_memory_utilization_ratio": _device(
        "train_gpu_memory_utilization_ratio", "gauge", "GPU memory-controller busy fraction", _G
    ),
    "gpu_memory_used_bytes": _device("train_gpu_memory_used_bytes", "gauge", "GPU memory in use (all processes)", _G),
    "gpu_memory_total_bytes": _device("train_gpu_memory_total_bytes", "gauge", "GPU memory size", _G),
    "gpu_power_watts": _device("train_gpu_power_watts", "gauge", "GPU board power", _G),
    "gpu_energy_joules": _device("train_gpu_energy_joules", "counter", "GPU energy since the driver loaded", _G),
    "gpu_temperature_celsius": _device("train_gpu_temperature_celsius", "gauge", "GPU temperature", _G),
    "gpu_sm_clock_hertz": _device("train_gpu_sm_clock_hertz", "gauge", "SM clock", _G),
    "gpu_memory_clock_hertz": _device("train_gpu_memory_clock_hertz", "gauge", "Memory clock", _G),
    "gpu_pcie_replays": _device("train_gpu_pcie_replays", "counter", "PCIe replays", _G),
    "gpu_xid_errors": _device(
        "train_gpu_xid_errors", "counter", "XID (critical) errors NVML reported since telemetry started", _G
    ),
    "gpu_last_xid": _device(
        "train_gpu_last_xid", "gauge", "The code of the last XID error (e.g. 79: fell off the bus)", _G
    ),
    "gpu_sm_activity_ratio": _device("train_gpu_sm_activity_ratio", "gauge", "SM activity (GPM, Hopper and newer)", _G),
    "gpu_sm_occupancy_ratio": _device("train_gpu_sm_occupancy_ratio", "gauge", "SM occupancy (GPM)", _G),
    "process_cpu_seconds": _device("train_process_cpu_seconds", "counter", "CPU time of this rank's process"),
    "process_cpu_ratio": _device("train_process_cpu_ratio", "gauge", "Cores busy with this rank's process"),
    "process_resident_memory_bytes": _device(
        "train_process_resident_memory_bytes", "gauge", "Resident memory of this rank"
    ),
    # the scheduler's account (devices/sched.py): the training thread, its cgroup's CPU quota, host PSI
    "cpu_running_ratio": _device(
        "train_cpu_running_ratio", "gauge", "Seconds per second the training thread ran on a CPU (schedstat)"
    ),
    "cpu_runqueue_wait_ratio": _device(
        "train_cpu_runqueue_wait_ratio",
        "gauge",
        "Seconds per second the training thread was runnable but waited for a CPU (schedstat run-queue delay)",
    ),
    "cpu_runqueue_wait_seconds": _device(
        "train_cpu_runqueue_wait_seconds", "counter", "The training thread's time waiting for a CPU on a run queue"
    ),
    "cpu_throttled_ratio": _device(
        "train_cpu_throttled_ratio",
        "gauge",
        "Seconds per second the rank's cgroup was throttled by its CPU quota (summed over CPUs)",
    ),
    "cpu_throttled_seconds": _device(
        "train_cpu_throttled_seconds", "counter", "Time the rank's cgroup was throttled by its CPU quota"
    ),
    "cpu_throttled_periods_ratio": _device(
        "train_cpu_throttled_periods_ratio",
        "gauge",
        "Share of the CPU quota's periods in which the cgroup was throttled",
    ),
    "cpu_throttled_periods": _device(
        "train_cpu_throttled_periods", "counter", "CPU quota periods in which the rank's cgroup was throttled"
    ),
    "cpu_quota_cores": _device(
        "train_cpu_quota_cores", "gauge", "The rank's cgroup CPU quota, in cores (quota/period)"
    ),
    "cpu_pressure_some_ratio": _device(
        "train_cpu_pressure_some_ratio", "gauge", "Share of time some task on the host waited for a CPU (PSI)"
    ),
    # a watched dataset's fetches (hooks/dataset.py), summed over the rank and its data-loader workers
    "input_fetch_seconds": _device(
        "train_input_fetch_seconds",
        "counter",
        "Seconds the rank's data-loader workers spent fetching items of a watched dataset, summed over workers",
    ),
    "input_fetched_items": _device(
        "train_input_fetched_items", "counter", "Items the data-loader workers fetched from a watched dataset"
    ),
    "input_workers": _device(
        "train_input_workers", "gauge", "Data-loader workers seen fetching from a watched dataset (0: the rank itself)"
    ),
    "cuda_memory_allocated_bytes": _device(
        "train_cuda_memory_allocated_bytes", "gauge", "CUDA memory allocated by tensors"
    ),
    "cuda_memory_reserved_bytes": _device(
        "train_cuda_memory_reserved_bytes", "gauge", "CUDA memory held by the caching allocator"
    ),
    "cuda_memory_peak_bytes": _device(
        "train_cuda_memory_peak_bytes", "gauge", "Peak allocated over the last sampling interval"
    ),
    "cuda_alloc_retries": _device("train_cuda_alloc_retries", "counter", "Allocator retries after freeing its cache"),
    "cuda_ooms": _device("train_cuda_ooms", "counter", "CUDA out-of-memory errors"),
}
# Readings that come in families: the reading's name is the prefix + one label's value.
GPU_ECC_ERRORS = _device("train_gpu_ecc_errors", "counter", "Volatile ECC errors", ("gpu", "type"))
GPU_CLOCK_EVENT = _device(
    "train_gpu_clock_event_active",
    "gauge",
    "1 while a clock-event (throttle) reason holds the clocks down",
    ("gpu", "reason"),
)
GPU_NVLINK_BYTES = _device("train_gpu_nvlink_bytes", "counter", "NVLink data bytes, all links", ("gpu", "direction"))
GPU_NVLINK_ERRORS = _device(
    "train_gpu_nvlink_errors",
    "counter",
    "NVLink errors of the GPU, all links (NVML): type=crc_flit, crc_data, replay, recovery",
    ("gpu", "type"),
)
# The node's RDMA NICs (devices/network.py): node totals, so no gpu label; every rank on a node
# exports the same values (take max by node)
NIC_BYTES = _device(
    "train_nic_bytes",
    "counter",
    "Bytes through the node's RDMA NIC ports, all ports and every process on the node (sysfs port_xmit_data "
    "and port_rcv_data x 4), since telemetry started",
    ("direction",),
)
NIC_ERRORS = _device(
    "train_nic_errors",
    "counter",
    "Errors of the node's RDMA NIC ports, all ports, by sysfs counter file (symbol_error, link_downed, "
    "port_rcv_errors, link_error_recovery, port_xmit_discards, ...), since telemetry started",
    ("counter",),
)
# reading prefix (+ label value [+ suffix]) -> metric, label (``gpu`` only where listed); a reading belongs
# to the longest prefix it starts with, if it ends with its suffix (device_family).
DEVICE_FAMILIES: dict[str, tuple[Metric, str, str]] = {
    "gpu_ecc_errors_": (GPU_ECC_ERRORS, "type", ""),
    "gpu_clock_event_": (GPU_CLOCK_EVENT, "reason", ""),
    "gpu_nvlink_": (GPU_NVLINK_BYTES, "direction", "_bytes"),
    "gpu_nvlink_errors_": (GPU_NVLINK_ERRORS, "type", ""),
    "nic_bytes_": (NIC_BYTES, "direction", ""),
    "nic_errors_": (NIC_ERRORS, "counter", ""),
}
_FAMILY_ORDER = sorted(DEVICE_FAMILIES, key=len, reverse=True)


def device_family(reading: str) -> tuple[Metric, str, str] | None:
    """(metric, label name, label value) of a family reading (``nic_errors_symbol_error`` ->
    (NIC_ERRORS, "counter", "symbol_error")), or None when it is in no family.

    >>> device_family("gpu_nvlink_errors_replay")[1:]
    ('type', 'replay')
    >>> device_family("gpu_nvlink_tx_bytes")[1:]
    ('direction', 'tx')
    """
    if reading in DEVICE:
        return None
    prefix = next((p for p in _FAMILY_ORDER if reading.startswith(p)), None)
    if prefix is None:
        return None
    m, label, suffix = DEVICE_FAMILIES[prefix]
    if not reading.endswith(suffix) or len(reading) <= len(prefix) + len(suffix):
        return None  # the longest prefix decides: a reading is never caught by a shorter one's family
    return m, label, reading[len(prefix) : len(reading) - len(suffix)]


# Every metric, in the order of the reference page.
ALL: tuple[Metric, ...] = (
    STEP_DURATION,
    PHASE_DURATION,
    DATALOADER_WAIT,
    STEPS,
    STEP_FAILURES,
    LOG_VALUE,
    COLLECTIVE_DURATION,
    COLLECTIVE_BYTES,
    COLLECTIVE_CALLS,
    COLLECTIVE_SECONDS,
    COLLECTIVE_BUS_BYTES,
    COLLECTIVE_BUSBW,
    COLLECTIVE_ALGBW,
    COLLECTIVE_BLOCKED,
    PHASE_BLOCKED,
    COMM_GROUP_BLOCKED,
    COMM_GROUP_BYTES,
    CHECKPOINT_SECONDS,
    CHECKPOINT_BYTES,
    INPUT_STEPS,
    INPUT_READY_STEPS,
    INPUT_READ_BYTES,
    TOKENS,
    SAMPLES,
    TOKENS_PER_SECOND,
    SAMPLES_PER_SECOND,
    MFU,
    LAST_STEP,
    LAST_STEP_TIMESTAMP,
    STEP_IN_PROGRESS,
    BLOCKED_IN_COLLECTIVE,
    STRAGGLER_SCORE,
    STRAGGLER_COST,
    FINDINGS,
    DROPPED,
    CAPTURES,
    BUILD_INFO,
    *DEVICE.values(),
    GPU_ECC_ERRORS,
    GPU_CLOCK_EVENT,
    GPU_NVLINK_BYTES,
    GPU_NVLINK_ERRORS,
    NIC_BYTES,
    NIC_ERRORS,
)
_BY_SERIES = {s: m for m in ALL for s in m.series}
if len(_BY_SERIES) != sum(len(m.series) for m in ALL):  # pragma: no cover - a duplicate name is a bug here
    raise RuntimeError("telemetry.metrics.names: two metrics share a sample name")


def by_series(sample_name: str) -> Metric | None:
    """The metric a sample name (``train_steps_total``, ``train_step_duration_seconds_bucket``,
    ``train_gpu_power_watts``) belongs to, or None when it is none of ours.

    >>> by_series("train_gpu_power_watts") is DEVICE["gpu_power_watts"]
    True
    """
    return _BY_SERIES.get(sample_name)

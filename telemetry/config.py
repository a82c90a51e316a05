"""One validated, immutable configuration for the in-process library.

Precedence: keyword arguments to :func:`telemetry.init` over ``TELEMETRY_<FIELD>`` environment
variables over the defaults below. Every error names the field, the value and what is accepted,
and is raised at ``init``, never later in a thread.

>>> cfg = Config.resolve({"job": "exp1", "flush_interval_s": 0.25}, environ={})
>>> cfg.job, cfg.flush_interval_s
('exp1', 0.25)
"""

from __future__ import annotations

import dataclasses
import logging
import math
import numbers
import operator
import os
import re
import urllib.parse
from dataclasses import dataclass, fields
from typing import Any, Mapping

from . import plugins
from .analysis_options import BUSY_WARN_BOUND, AnalysisOptions
from .flops import DTYPES
from .metrics.names import LEVELS as METRICS_LEVELS

log = logging.getLogger("telemetry")

ENV_PREFIX = "TELEMETRY_"
_HOST_RE = re.compile(r"[A-Za-z0-9_.:\[\]%-]{1,253}")
# TELEMETRY_* variables that are no settings: read by provenance.py (the commit of a job run from a copy
# without .git) and by the dashboard's process; not "unknown"
READ_ELSEWHERE = ("TELEMETRY_GIT_COMMIT", "TELEMETRY_GIT_DIRTY", "TELEMETRY_DASHBOARD_")
_JOB_RE = re.compile(r"[A-Za-z0-9_.:-]{1,128}")  # fullmatch: no trailing newline
OTLP_PROTOCOLS = ("http/protobuf", "grpc")
OTLP_TRACES_EXPORTERS = ("otlp", "console", "none")  # as the OTel SDK's OTEL_TRACES_EXPORTER
# Log-spaced, 1 ms to 2 min: fit for step and phase times from tiny models to large ones.
STEP_BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 120.0)
# 20 us to 30 s: a small all-reduce on NVLink up to a stalled collective.
COLLECTIVE_BUCKETS_S = (
    2e-5,
    5e-5,
    1e-4,
    2e-4,
    5e-4,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    5.0,
    30.0,
)


class ConfigError(ValueError):
    """A setting is invalid; the message names the field, the value and what is accepted."""


# Each field says what it means in the comment on its line, and a comment on a line of its own starts a
# section: the manual's settings page is generated from them (scripts/mkdocs_reference.py).
@dataclass(frozen=True)
class Config:
    """Settings of one telemetry session (the manual: docs/configuration.md and the settings reference)."""

    job: str = "train"  # job name: 1-128 letters, digits and . _ : - (the Prometheus job label, the run's name)
    run_dir: str = ""  # run directory, shared by all ranks; "": runs/<job>
    tags: tuple[
        str, ...
    ] = ()  # the run's labels, key=value each (init(tags={"model": "7b"}) too): history groups by them
    sinks: tuple[str, ...] = ("store", "prometheus")  # sinks to start by name: store, prometheus, otlp, plug-ins
    flush_interval_s: float = 0.5  # pipeline period: records reach the sinks this often (0.01-60 s)
    buffer_events: int = 65536  # hot-path buffer bound; beyond it events are dropped and counted
    shutdown_timeout_s: float = 5.0  # shutdown() returns within this even when a backend is dead
    sink_backlog_records: int = 8192  # per sink: records waiting for a slow sink; beyond, dropped, counted
    strict: bool = False  # raise TelemetryUsageError on API misuse (and SinkStartError) instead of warning once
    collectives: bool = True  # wrap torch.distributed collectives and time DDP's all-reduce from init
    checkpoints: bool = True  # time torch.distributed.checkpoint's save, async_save and load from init
    start_step: int = 0  # number of the first step (after a restart from a checkpoint: its step)
    handle_sigterm: bool = True  # on SIGTERM flush, then die of the signal (only if no handler is set)
    announce: bool = True  # each process says at start where its data can be seen (one line: the logger, else stderr)
    profiler_ranges: bool = False  # every step and phase also opens a torch.profiler record_function range
    # Devices and throughput
    device_timing: str = "auto"  # cuda: CUDA events time phases and collectives; wall; auto: cuda if available
    device_interval_s: float = 1.0  # host / GPU / CUDA-memory sampling period; 0 turns it off
    gpu: bool = True  # sample this rank's GPU through NVML when there is one
    flops_per_token: float = 0.0  # model FLOPs per token (telemetry.flops helps); 0: no MFU
    peak_flops: float = 0.0  # device peak FLOP/s; 0: from the table by GPU name and mfu_dtype
    mfu_dtype: str = "bf16"  # the dtype whose dense peak the MFU is against: fp8, bf16, fp16, tf32, fp32
    # Online detection (rank 0 analyzes K-step summaries of every rank while the job runs)
    online: bool = True  # online detection, with a multi-rank process group
    online_every: int = 10  # steps per summary block
    online_window: int | str = (
        "auto"  # blocks kept for analysis; auto: 200, fewer beyond 2,500 ranks (500,000 // ranks, at least 20: rank 0's analysis of a block stays bounded)
    )
    online_wait_blocks: int = 3  # how many blocks late a rank may be before it is named missing
    capture: bool = True  # profile the ranks a new online finding names, and a healthy peer, for a few steps
    capture_steps: int = 3  # steps per capture
    capture_max: int = 3  # captures per run at most (the baseline counts)
    capture_baseline: bool = (
        True  # one baseline capture per run, after warm-up: what a job-wide finding is compared with
    )
    capture_min_interval_s: float = 600.0  # seconds between two captures at least
    capture_max_mb: float = 256.0  # a rank's trace of one capture at most (gzipped; a larger one is deleted)
    online_interval_s: float = 5.0  # rank 0 analyzes at most this often
    busy_bound: float = (
        AnalysisOptions.busy_bound
    )  # low_utilization: busy share of the job's time under which a stretch is a finding (info)
    busy_warn_bound: float = BUSY_WARN_BOUND  # low_utilization: busy share under which it is a warning, critical under half (<= busy_bound; 0.6 or busy_bound if lower)
    # Prometheus endpoint (one per rank on prometheus_port + local rank)
    prometheus_host: str = "127.0.0.1"  # address the /metrics endpoints bind (0.0.0.0: every interface)
    prometheus_port: int = 9464  # first port: a rank serves on this + its local rank (a taken one: the next own port)
    prometheus_certfile: str = ""  # TLS: serve https with this certificate (with prometheus_keyfile)
    prometheus_keyfile: str = ""  # TLS: the private key of prometheus_certfile
    prometheus_client_cafile: str = ""  # TLS: require client certificates signed by this CA
    prometheus_sd_dir: str = ""  # rank 0 writes <job>.json here; "": prometheus_targets/ beside run_dir; off
    step_buckets_s: tuple[float, ...] = STEP_BUCKETS_S  # histogram buckets of step, phase and data-wait times (s)
    collective_buckets_s: tuple[float, ...] = COLLECTIVE_BUCKETS_S  # histogram buckets of collective calls (s)
    max_label_values: int = 32  # distinct phases / logged names / ops exported per rank
    metrics_level: str = "full"  # series per rank: full (everything), phase (no per-op or per-group detail), job (no per-phase or per-name detail either); see Scale
    pushgateway_url: str = ""  # push to a Pushgateway every push_interval_s and at shutdown
    push_interval_s: float = 15.0  # Pushgateway push period, and the OTel metrics mirror's export period
    # OpenTelemetry (on when an endpoint is set here or in OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT)
    otlp_endpoint: str = ""  # collector URL; "": OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT
    otlp_protocol: str = ""  # http/protobuf (default) or grpc; else OTEL_EXPORTER_OTLP_PROTOCOL
    otlp_traces_exporter: str = ""  # otlp (default), console (stdout) or none; else OTEL_TRACES_EXPORTER
    otlp_sample_every: int = 1  # export every Nth step (anomalous steps always)
    otlp_metrics: bool = False  # also mirror the metrics through the OTel metrics SDK
    otlp_timeout_s: float = 10.0  # timeout of one export call to the collector
    trace_ui_url: str = ""  # a trace UI's URL of one trace, {trace_id} in it: the dashboard links findings' traces

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def resolve(cls, kwargs: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> "Config":
        """Merge keyword arguments over ``TELEMETRY_*`` variables over defaults, then validate."""
        environ = os.environ if environ is None else environ
        names = {f.name: f for f in fields(cls)}
        unknown = sorted(set(kwargs) - set(names))
        if unknown:
            raise ConfigError(f"unknown setting(s) {', '.join(unknown)}; accepted: {', '.join(sorted(names))}")
        values: dict[str, Any] = {}
        for key, value in environ.items():
            if not key.startswith(ENV_PREFIX):
                continue
            name = key[len(ENV_PREFIX) :].lower()
            if name not in names and not key.startswith(READ_ELSEWHERE):
                log.warning(
                    "telemetry: ignoring unknown environment variable %s (accepted: %s)",
                    key,
                    ", ".join(ENV_PREFIX + n.upper() for n in sorted(names)),
                )
                continue
            if name in names:
                values[name] = _parse_env(key, value, names[name])
        from_env = set(values)
        values.update({k: v for k, v in kwargs.items() if v is not None})
        from_env -= set(kwargs)
        sinks_given = "sinks" in values
        bound = values.get("busy_bound")
        if "busy_warn_bound" not in values and isinstance(bound, numbers.Real) and not isinstance(bound, bool):
            if bound < cls.busy_warn_bound:  # the default follows a lower bound (a bad one is named below)
                values["busy_warn_bound"] = bound
        cfg = cls(**values)
        try:
            cfg._validate()
        except ConfigError as exc:  # say where a bad value came from when it was the environment
            name = next((n for n in sorted(from_env) if re.search(rf"\b{n}\b", str(exc))), None)
            if name is None:
                raise
            raise ConfigError(f"{exc} (from the environment variable {ENV_PREFIX}{name.upper()})") from None
        if not cfg.run_dir:
            object.__setattr__(cfg, "run_dir", os.path.join("runs", cfg.job))
        if not cfg.otlp_endpoint:
            env_ep = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            if env_ep:
                object.__setattr__(cfg, "otlp_endpoint", env_ep)
        if not cfg.otlp_protocol:
            proto = (
                environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf"
            )
            if proto not in OTLP_PROTOCOLS:
                raise ConfigError(f"OTEL_EXPORTER_OTLP_PROTOCOL={proto!r}; accepted: {', '.join(OTLP_PROTOCOLS)}")
            object.__setattr__(cfg, "otlp_protocol", proto)
        if not cfg.otlp_traces_exporter:
            exp = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() or "otlp"
            if exp not in OTLP_TRACES_EXPORTERS:
                raise ConfigError(f"OTEL_TRACES_EXPORTER={exp!r}; accepted: {', '.join(OTLP_TRACES_EXPORTERS)}")
            object.__setattr__(cfg, "otlp_traces_exporter", exp)
        exporter = cfg.otlp_traces_exporter
        if (
            (exporter == "console" or (exporter == "otlp" and cfg.otlp_endpoint))
            and not sinks_given
            and "otlp" not in cfg.sinks
        ):
            object.__setattr__(cfg, "sinks", cfg.sinks + ("otlp",))
        return cfg

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for k, v in d.items():
            if isinstance(v, tuple):
                d[k] = list(v)
        return d

    def differences(self, other: "Config") -> list[str]:
        """Names of the fields whose values differ (used to refuse a conflicting second init)."""
        return [f.name for f in fields(self) if f.compare and getattr(self, f.name) != getattr(other, f.name)]

    # ---- validation ---------------------------------------------------------------------
    def _set(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)

    def _validate(self) -> None:
        if not isinstance(self.job, str) or not _JOB_RE.fullmatch(self.job):
            raise ConfigError(f"job={self.job!r} is invalid; accepted: 1-128 characters of letters, digits and . _ : -")
        object.__setattr__(self, "run_dir", _check_path("run_dir", self.run_dir))
        object.__setattr__(self, "tags", check_tags(self.tags))
        sinks = self.sinks
        if isinstance(sinks, str):
            sinks = tuple(s for s in (p.strip() for p in sinks.split(",")) if s)
        known = plugins.names(plugins.SINKS)
        if not isinstance(sinks, (list, tuple)):
            raise ConfigError(
                f"sinks={sinks!r}; accepted: a list of sink names from {', '.join(known) or 'none'}, "
                "or one comma-separated string"
            )
        for s in sinks:
            if not isinstance(s, str) or s not in known:
                raise ConfigError(
                    f"sinks contains {s!r}; accepted: {', '.join(known) or 'none'}"
                    + plugins.missing_hint(plugins.SINKS)
                )
        object.__setattr__(self, "sinks", tuple(dict.fromkeys(sinks)))
        self._set("flush_interval_s", _check_number("flush_interval_s", self.flush_interval_s, 0.01, 60.0))
        self._set("shutdown_timeout_s", _check_number("shutdown_timeout_s", self.shutdown_timeout_s, 0.1, 600.0))
        self._set("buffer_events", _check_int("buffer_events", self.buffer_events, 1024, 1 << 26))
        self._set("sink_backlog_records", _check_int("sink_backlog_records", self.sink_backlog_records, 16, 1 << 24))
        self._set("start_step", _check_int("start_step", self.start_step, 0, 1 << 62))
        self._set("prometheus_port", _check_int("prometheus_port", self.prometheus_port, 1, 65535))
        self._set("online_every", _check_int("online_every", self.online_every, 1, 100000))
        self._set("online_window", _check_window(self.online_window))
        self._set("online_wait_blocks", _check_int("online_wait_blocks", self.online_wait_blocks, 1, 1000))
        self._set("capture_steps", _check_int("capture_steps", self.capture_steps, 1, 50))
        self._set("capture_max", _check_int("capture_max", self.capture_max, 0, 1000))
        self._set(
            "capture_min_interval_s", _check_number("capture_min_interval_s", self.capture_min_interval_s, 0.0, 1e7)
        )
        self._set("capture_max_mb", _check_number("capture_max_mb", self.capture_max_mb, 1.0, 1e6))
        self._set("online_interval_s", _check_number("online_interval_s", self.online_interval_s, 0.05, 3600.0))
        self._set("busy_bound", _check_number("busy_bound", self.busy_bound, 0.01, 1.0))
        self._set("busy_warn_bound", _check_number("busy_warn_bound", self.busy_warn_bound, 0.01, 1.0))
        if self.busy_warn_bound > self.busy_bound:
            raise ConfigError(
                f"busy_warn_bound={self.busy_warn_bound} is above busy_bound={self.busy_bound}; accepted: "
                "busy_warn_bound <= busy_bound (a busy share under busy_warn_bound is a warning, under busy_bound info)"
            )
        for name in (
            "strict",
            "collectives",
            "checkpoints",
            "handle_sigterm",
            "online",
            "announce",
            "profiler_ranges",
            "capture",
            "capture_baseline",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name}={getattr(self, name)!r} must be True or False")
        if not isinstance(self.prometheus_host, str) or not _HOST_RE.fullmatch(self.prometheus_host):
            raise ConfigError(
                f"prometheus_host={self.prometheus_host!r} must be a host name or address "
                "(letters, digits and . - _ : [ ] %)"
            )
        interval = _check_number("device_interval_s", self.device_interval_s, 0.0, 3600.0)
        if 0 < interval < 0.05:
            raise ConfigError(
                f"device_interval_s={self.device_interval_s!r}; accepted: 0 (off) or a number from 0.05 to 3600"
            )
        self._set("device_interval_s", interval)
        if self.device_timing not in ("auto", "cuda", "wall"):
            raise ConfigError(f"device_timing={self.device_timing!r}; accepted: auto, cuda, wall")
        if not isinstance(self.gpu, bool):
            raise ConfigError(f"gpu={self.gpu!r} must be True or False")
        self._set("flops_per_token", _check_number("flops_per_token", self.flops_per_token, 0.0, 1e18))
        self._set("peak_flops", _check_number("peak_flops", self.peak_flops, 0.0, 1e20))
        if self.mfu_dtype not in DTYPES:
            raise ConfigError(f"mfu_dtype={self.mfu_dtype!r}; accepted: {', '.join(DTYPES)}")
        for name in ("step_buckets_s", "collective_buckets_s"):
            _check_buckets(self, name)
        self._set("max_label_values", _check_int("max_label_values", self.max_label_values, 1, 1024))
        if not isinstance(self.metrics_level, str) or self.metrics_level not in METRICS_LEVELS:
            raise ConfigError(
                f"metrics_level={_show(self.metrics_level)}; accepted: full (every series, the default), phase "
                "(no per-op or per-group series), job (no per-phase or per-name series either)"
            )
        self._set("push_interval_s", _check_number("push_interval_s", self.push_interval_s, 0.5, 3600.0))
        self._set("otlp_sample_every", _check_int("otlp_sample_every", self.otlp_sample_every, 1, 1 << 20))
        self._set("otlp_timeout_s", _check_number("otlp_timeout_s", self.otlp_timeout_s, 0.1, 300.0))
        if self.otlp_traces_exporter and self.otlp_traces_exporter not in OTLP_TRACES_EXPORTERS:
            raise ConfigError(
                f"otlp_traces_exporter={self.otlp_traces_exporter!r}; accepted: {', '.join(OTLP_TRACES_EXPORTERS)}"
            )
        self._set("prometheus_sd_dir", _check_path("prometheus_sd_dir", self.prometheus_sd_dir))
        if self.otlp_protocol and self.otlp_protocol not in OTLP_PROTOCOLS:
            raise ConfigError(f"otlp_protocol={self.otlp_protocol!r}; accepted: {', '.join(OTLP_PROTOCOLS)}")
        for name in ("pushgateway_url", "otlp_endpoint"):
            url = getattr(self, name)
            if not isinstance(url, str) or (url and not _is_url(url)):
                raise ConfigError(f"{name}={url!r}; accepted: an http:// or https:// URL with a host, or empty")
        check_trace_ui_url("trace_ui_url", self.trace_ui_url)
        for name in ("prometheus_certfile", "prometheus_keyfile", "prometheus_client_cafile"):
            self._set(name, _check_path(name, getattr(self, name)))
        if bool(self.prometheus_certfile) != bool(self.prometheus_keyfile):
            raise ConfigError(
                "prometheus_certfile and prometheus_keyfile go together; "
                f"got certfile={self.prometheus_certfile!r}, keyfile={self.prometheus_keyfile!r}"
            )
        if self.prometheus_client_cafile and not self.prometheus_certfile:
            raise ConfigError("prometheus_client_cafile needs TLS: set prometheus_certfile and prometheus_keyfile too")
        for name in ("prometheus_certfile", "prometheus_keyfile", "prometheus_client_cafile"):
            path = getattr(self, name)
            if path and not os.path.isfile(path):
                raise ConfigError(f"{name}={path!r}: no such file")


def _check_buckets(cfg: Config, name: str) -> None:
    raw = getattr(cfg, name)
    try:
        if isinstance(raw, (str, bytes)) or any(isinstance(b, (bool, str, bytes)) for b in raw):
            raise TypeError
        buckets = tuple(float(b) for b in raw)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{name}={raw!r}; accepted: increasing positive numbers (seconds)") from None
    if (
        not buckets
        or any(not math.isfinite(b) or b <= 0 for b in buckets)
        or any(a >= b for a, b in zip(buckets, buckets[1:]))
    ):
        raise ConfigError(f"{name}={raw!r}; accepted: increasing positive finite numbers (seconds)")
    object.__setattr__(cfg, name, buckets)


def _check_number(name: str, value: object, lo: float, hi: float) -> float:
    """A real number in [lo, hi] (NumPy's too), as a float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(f"{name}={_show(value)} is not a number; accepted: a number from {lo} to {hi}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or not lo <= number <= hi:
        raise ConfigError(f"{name}={_show(value)} is out of range; accepted: a number from {lo} to {hi}")
    return number


def _check_int(name: str, value: object, lo: int, hi: int) -> int:
    """An integer in [lo, hi] (NumPy's too), as an int."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(f"{name}={_show(value)} is not an integer; accepted: an integer from {lo} to {hi}")
    number = operator.index(value)
    if not lo <= number <= hi:
        raise ConfigError(f"{name}={_show(value)} is out of range; accepted: an integer from {lo} to {hi}")
    return number


def _check_window(value: object) -> int | str:
    """``online_window``: "auto" (the world size decides, :func:`telemetry.online.detector.online_window`)
    or a number of blocks from 8 to 100000 (an integer, or its digits from the environment)."""
    accepted = (
        "auto (the default: 200 blocks, 500,000 // ranks beyond 2,500 ranks, at least 20) "
        "or an integer from 8 to 100000"
    )
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "auto":
            return "auto"
        try:
            value = int(text)
        except ValueError:
            raise ConfigError(f"online_window={_show(value)} cannot be read; accepted: {accepted}") from None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(f"online_window={_show(value)} is not an integer; accepted: {accepted}")
    if not 8 <= operator.index(value) <= 100000:
        raise ConfigError(f"online_window={_show(value)} is out of range; accepted: {accepted}")
    return operator.index(value)


def _show(value: Any) -> str:
    """A value for an error message: its repr, cut at 80 characters (an int too long to print
    says how many bits it has)."""
    try:
        text = repr(value)
    except ValueError:
        return f"<an integer of {value.bit_length()} bits>"
    return text if len(text) <= 80 else text[:77] + "..."


def _check_path(name: str, value: object) -> str:
    """A path as a str that the OS can take: no NUL byte, encodable, no name over 255 bytes."""
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigError(f"{name}={value!r} must be a path string")
    path = os.fspath(value)
    if not isinstance(path, str):
        raise ConfigError(f"{name}={value!r} must be a path string, not bytes")
    try:
        raw = os.fsencode(path)
    except UnicodeError:
        raise ConfigError(f"{name}={path!r} cannot be encoded as a file name on this system") from None
    if b"\0" in raw:
        raise ConfigError(f"{name}={path!r} contains a NUL character; accepted: a path")
    if any(len(part) > 255 for part in raw.split(b"/")):
        raise ConfigError(f"{name}={path!r} has a name over 255 bytes; accepted: a path")
    return path


def check_trace_ui_url(name: str, url: object) -> str:
    """``url`` when it is empty or an http(s) URL holding ``{trace_id}``; else a ConfigError naming ``name``."""
    if isinstance(url, str) and (not url or (_is_url(url.replace("{trace_id}", "0")) and "{trace_id}" in url)):
        return url
    raise ConfigError(
        f"{name}={url!r}; accepted: an http:// or https:// URL with {{trace_id}} where the trace id goes "
        "(Jaeger: http://127.0.0.1:16686/trace/{trace_id}; Grafana with Tempo: its explore URL), or empty"
    )


def _is_url(url: str) -> bool:
    if not url.startswith(("http://", "https://")) or any(c.isspace() or not c.isprintable() for c in url):
        return False
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not one
    except ValueError:
        return False
    return bool(parts.hostname)


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


_TAG_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")


def check_tags(tags: object) -> tuple[str, ...]:
    """``tags`` (a mapping, or ``key=value`` strings, or one such string comma-separated) -> sorted
    ``key=value`` strings, one per key."""
    if isinstance(tags, str):
        tags = [t for t in (p.strip() for p in tags.split(",")) if t]
    if isinstance(tags, Mapping):
        items = [(k, v) for k, v in tags.items()]
    elif isinstance(tags, (list, tuple)):
        items = []
        for t in tags:
            if not isinstance(t, str) or "=" not in t:
                raise ConfigError(f"tags contains {t!r}; accepted: key=value strings, or a dict of tags")
            k, v = t.split("=", 1)
            items.append((k.strip(), v.strip()))
    else:
        raise ConfigError(f"tags={tags!r}; accepted: a dict of str to str, or key=value strings")
    out: dict[str, str] = {}
    for k, v in items:
        if not isinstance(k, str) or not _TAG_KEY.fullmatch(k):
            raise ConfigError(f"tags has the key {k!r}; accepted: 1-64 letters, digits and _ . - (not first: digit)")
        if not isinstance(v, (str, int, float, bool)) or len(str(v)) > 256:
            raise ConfigError(f"tags[{k!r}]={v!r}; accepted: a string (or number) of at most 256 characters")
        out[k] = str(v)
    return tuple(f"{k}={out[k]}" for k in sorted(out))


def tag_dict(tags: tuple[str, ...]) -> dict[str, str]:
    """``("model=7b", ...)`` -> ``{"model": "7b", ...}``."""
    return dict(t.split("=", 1) for t in tags)


def _parse_env(key: str, raw: str, f: dataclasses.Field) -> Any:
    kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    text = raw.strip()
    try:
        if kind == "bool":
            low = text.lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise ValueError
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
        if kind.startswith("tuple"):
            return tuple(s.strip() for s in text.split(",") if s.strip())
        return text
    except ValueError:
        accepted = {"bool": "one of 1/0/true/false/yes/no/on/off", "int": "an integer", "float": "a number"}.get(
            kind, kind
        )
        raise ConfigError(f"{key}={raw!r} cannot be read; accepted: {accepted}") from None

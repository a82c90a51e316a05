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
import os
import re
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

log = logging.getLogger("telemetry")

ENV_PREFIX = "TELEMETRY_"
_JOB_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
KNOWN_SINKS = ("store", "prometheus", "otlp")


class ConfigError(ValueError):
    """A setting is invalid; the message names the field, the value and what is accepted."""


@dataclass(frozen=True)
class Config:
    """Settings of one telemetry session (see README, "Configuration")."""

    job: str = "train"
    run_dir: str = ""  # "" means runs/<job>
    sinks: tuple[str, ...] = ("store", "prometheus")
    flush_interval_s: float = 0.5
    buffer_events: int = 65536
    shutdown_timeout_s: float = 5.0
    strict: bool = False
    collectives: bool = True
    start_step: int = 0
    prometheus_host: str = "127.0.0.1"
    prometheus_port: int = 9464
    handle_sigterm: bool = True
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def resolve(cls, kwargs: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> "Config":
        """Merge keyword arguments over ``TELEMETRY_*`` variables over defaults, then validate."""
        environ = os.environ if environ is None else environ
        names = {f.name: f for f in fields(cls) if f.name != "extra"}
        unknown = sorted(set(kwargs) - set(names))
        if unknown:
            raise ConfigError(
                f"unknown setting(s) {', '.join(unknown)}; accepted: {', '.join(sorted(names))}"
            )
        values: dict[str, Any] = {}
        for key, value in environ.items():
            if not key.startswith(ENV_PREFIX):
                continue
            name = key[len(ENV_PREFIX):].lower()
            if name not in names:
                log.warning("telemetry: ignoring unknown environment variable %s (accepted: %s)",
                            key, ", ".join(ENV_PREFIX + n.upper() for n in sorted(names)))
                continue
            values[name] = _parse_env(key, value, names[name])
        values.update({k: v for k, v in kwargs.items() if v is not None})
        cfg = cls(**values)
        cfg._validate()
        if not cfg.run_dir:
            object.__setattr__(cfg, "run_dir", os.path.join("runs", cfg.job))
        return cfg

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("extra", None)
        d["sinks"] = list(self.sinks)
        return d

    def differences(self, other: "Config") -> list[str]:
        """Names of the fields whose values differ (used to refuse a conflicting second init)."""
        return [f.name for f in fields(self)
                if f.compare and getattr(self, f.name) != getattr(other, f.name)]

    # ---- validation ---------------------------------------------------------------------
    def _validate(self) -> None:
        if not isinstance(self.job, str) or not _JOB_RE.match(self.job):
            raise ConfigError(f"job={self.job!r} is invalid; accepted: 1-128 characters of "
                              "letters, digits and . _ : -")
        if not isinstance(self.run_dir, (str, os.PathLike)):
            raise ConfigError(f"run_dir={self.run_dir!r} must be a path string")
        object.__setattr__(self, "run_dir", os.fspath(self.run_dir))
        sinks = self.sinks
        if isinstance(sinks, str):
            sinks = tuple(s for s in (p.strip() for p in sinks.split(",")) if s)
        sinks = tuple(sinks)
        for s in sinks:
            if s not in KNOWN_SINKS:
                raise ConfigError(f"sinks contains {s!r}; accepted: {', '.join(KNOWN_SINKS)}")
        object.__setattr__(self, "sinks", tuple(dict.fromkeys(sinks)))
        _check_number("flush_interval_s", self.flush_interval_s, 0.01, 60.0)
        _check_number("shutdown_timeout_s", self.shutdown_timeout_s, 0.1, 600.0)
        _check_int("buffer_events", self.buffer_events, 1024, 1 << 26)
        _check_int("start_step", self.start_step, 0, 1 << 62)
        _check_int("prometheus_port", self.prometheus_port, 1, 65535)
        for name in ("strict", "collectives", "handle_sigterm"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name}={getattr(self, name)!r} must be True or False")
        if not isinstance(self.prometheus_host, str) or not self.prometheus_host:
            raise ConfigError(f"prometheus_host={self.prometheus_host!r} must be a host name or address")


def _check_number(name: str, value: Any, lo: float, hi: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not lo <= value <= hi:
        raise ConfigError(f"{name}={value!r} is out of range; accepted: a number from {lo} to {hi}")


def _check_int(name: str, value: Any, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(f"{name}={value!r} is out of range; accepted: an integer from {lo} to {hi}")


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


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
        accepted = {"bool": "one of 1/0/true/false/yes/no/on/off", "int": "an integer",
                    "float": "a number"}.get(kind, kind)
        raise ConfigError(f"{key}={raw!r} cannot be read; accepted: {accepted}") from None

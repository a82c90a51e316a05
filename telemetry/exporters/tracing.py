"""Deterministic trace identity: every rank's spans for step N of a job share one trace id.

The id is derived from (job, step), so ranks agree without talking to each other, and a
Prometheus exemplar on the step histogram points at the same trace the OTLP sink exports.

>>> trace_id_hex("exp1", 7) == trace_id_hex("exp1", 7)
True
"""

from __future__ import annotations

import hashlib


def _digest(*parts: object, size: int) -> int:
    h = hashlib.blake2b("\0".join(map(str, parts)).encode(), digest_size=size)
    value = int.from_bytes(h.digest(), "big")
    return value or 1  # 0 is the invalid id in OpenTelemetry


def trace_id(job: str, step: int) -> int:
    """128-bit trace id of one training step of one job."""
    return _digest("trace", job, step, size=16)


def step_root_span_id(job: str, step: int) -> int:
    """64-bit id of the step's root span (emitted by rank 0); every rank's step span is its child."""
    return _digest("root", job, step, size=8)


def trace_id_hex(job: str, step: int) -> str:
    return f"{trace_id(job, step):032x}"

"""Deterministic trace identity: every rank's spans for step N of a job share one trace id; and
which steps are traced (:class:`StepSampler`).

The id is derived from (job, step), so ranks agree without talking to each other, a Prometheus
exemplar on the step histogram points at the same trace the OTLP sink exports, and the analysis of
a run can name the traces of a finding's steps (``trace_ids``) from the steps table alone.

>>> trace_id_hex("exp1", 7) == trace_id_hex("exp1", 7)
True
"""

from __future__ import annotations

import collections
import hashlib
from typing import Protocol


class TracedStep(Protocol):
    """What the sampler reads of a step: a StepRecord has it."""

    @property
    def step(self) -> int: ...

    @property
    def duration_s(self) -> float: ...

    @property
    def ok(self) -> bool: ...


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


class StepSampler:
    """Which of a rank's steps are exported as traces: every ``every``-th step, and always a step
    that failed or took more than twice the median of the rank's last 50 steps (once it has 10).

    The answer is a function of ``every`` and the rank's sequence of step records only, and every
    sink receives the same records in the same order, so two samplers agree without talking: the
    OTLP sink keeps one to choose the steps it exports, and publishes a factory of them in
    ``run_info["trace_sampler"]`` once it has started; the Prometheus sink builds its own from it
    and puts a ``trace_id`` exemplar only on the steps whose trace this rank exports. No OTLP sink
    (not configured, ``OTEL_TRACES_EXPORTER=none``, or it failed to start): no exemplars. A trace
    the collector never received (counted in the OTLP sink's ``dropped``) is the one case of an
    exemplar without its trace.
    """

    def __init__(self, every: int) -> None:
        self.every = every
        self._recent: collections.deque[float] = collections.deque(maxlen=50)

    def __call__(self, r: TracedStep) -> bool:
        """Whether step record ``r`` (a StepRecord, or anything with ``step``, ``duration_s``, ``ok``) is traced."""
        anomalous = not r.ok
        if len(self._recent) >= 10:  # a median of fewer steps is too noisy to call a step slow
            med = sorted(self._recent)[len(self._recent) // 2]
            anomalous = anomalous or r.duration_s > 2.0 * med
        self._recent.append(r.duration_s)
        return anomalous or r.step % self.every == 0

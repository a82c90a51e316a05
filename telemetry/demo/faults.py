"""Injected faults: the one :class:`Fault` record, ``--inject`` specs for ``telemetry demo``
(:func:`parse_inject`, :func:`check_against_job`), and what each does to a rank (:class:`FaultPlan`).

A :class:`Fault` is the ground truth a detector should find, for the demo job and for the simulator
(:mod:`.simulate`, which knows more kinds). In the demo every fault is real work or real delay inside
the job, on the named rank and phase (never a sleep where compute is meant: on fewer cores than ranks
a sleep only hands the CPU to the other ranks), so the detectors see what a real job would show. Each
spec and what it does: docs/demo.md, "Faults it can inject".

>>> parse_inject("straggler:rank=2,phase=forward,factor=1.5")
Fault(kind='straggler', ranks=(2,), phase='forward', factor=1.5, start=0, end=None, probability=1.0, delay_s=0.0, stage=None, cause=None, op=None)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable

DEMO_PHASES = ("forward", "backward", "optimizer")

# kind -> (required keys, optional keys)
KINDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "straggler": (("rank", "phase", "factor"), ("start",)),
    "data_stall": (("rank", "delay_ms"), ("start",)),
    "regression": (("factor", "start"), ("phase",)),
    "slow_comm": (("factor",), ("start",)),
    "hang": (("rank", "step"), ()),
    "kill": (("rank", "step"), ()),
    "cpu_hog": (("rank",), ("start",)),
    "host_gap": (("delay_ms",), ("start",)),
    "slow_op": (("rank", "op", "factor"), ("start",)),
    "slow_checkpoint": (("rank", "factor"), ("start",)),
    "slow_input": (("rank", "factor"), ("start",)),
}
SLOW_OPS = ("exp", "softmax", "sort", "cumsum")  # slow_op's ops (demo/worker.py runs them)
_TYPES = {"rank": int, "step": int, "start": int, "factor": float, "delay_ms": float, "phase": str, "op": str}
SIMULATED = ("straggler", "data_stall", "regression", "slow_comm", "host_gap")  # the kinds `telemetry simulate` models
_PLACEHOLDERS = {"rank": "R", "phase": "P", "factor": "F", "start": "S", "step": "S", "delay_ms": "D", "op": "NAME"}


def spec_help(kinds: Iterable[str] = KINDS) -> str:
    """The ``--inject`` syntax of ``kinds``, from :data:`KINDS` (the help never lists fewer than the parser takes).

    >>> spec_help(["straggler", "hang"])
    'straggler:rank=R,phase=P,factor=F[,start=S] | hang:rank=R,step=S'
    """
    out = []
    for kind in kinds:
        required, optional = KINDS[kind]
        spec = f"{kind}:" + ",".join(f"{k}={_PLACEHOLDERS[k]}" for k in required)
        out.append(spec + "".join(f"[,{k}={_PLACEHOLDERS[k]}]" for k in optional))
    return " | ".join(out)


class InjectError(ValueError):
    """An --inject spec is invalid; the message names the problem and what is accepted."""


@dataclass(frozen=True)
class Fault:
    kind: str  # straggler, data_stall, slow_comm, regression, hang, kill, cpu_hog, host_gap; simulated also: imbalance, stage_imbalance, memory_growth, host_overhead
    ranks: tuple[int, ...] = ()  # the culprit ranks; empty: every rank (job-wide kinds)
    phase: str | None = None  # None: the kind's default phases
    factor: float = 1.5  # how many times slower (straggler, regression, slow_comm, stage_imbalance)
    start: int = 0  # first step affected (hang: the step the rank hangs in)
    end: int | None = None  # last step (inclusive); None: to the end
    probability: float = 1.0  # < 1: intermittent, slow on that fraction of steps
    delay_s: float = 0.0  # data_stall: extra wait per step; host_overhead, host_gap: extra host work per step
    stage: int | None = None  # stage_imbalance: the slow stage
    cause: str | None = None  # simulated: the signals behind it (simulate.CAUSE_SIGNALS), for cause finding
    op: str | None = None  # slow_op: the torch op run over and over (SLOW_OPS)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ranks", tuple(self.ranks))  # from JSON: a list

    @property
    def rank(self) -> int | None:
        """The one culprit rank of a single-rank fault."""
        return self.ranks[0] if self.ranks else None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_inject(spec: str) -> Fault:
    kind, sep, rest = spec.strip().partition(":")
    if kind not in KINDS:
        raise InjectError(
            f"--inject {spec!r}: unknown kind {kind!r}; accepted kinds: "
            f"{', '.join(KINDS)} (e.g. straggler:rank=2,phase=forward,factor=1.5)"
        )
    required, optional = KINDS[kind]
    values: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))) if sep else ():
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq:
            raise InjectError(f"--inject {spec!r}: {item!r} is not key=value")
        if key not in required + optional:
            raise InjectError(
                f"--inject {spec!r}: unknown key {key!r} for {kind}; accepted: "
                f"{', '.join(required)} (required), {', '.join(optional) or 'none'} (optional)"
            )
        if key in values:
            raise InjectError(f"--inject {spec!r}: {key} given twice")
        typ = _TYPES[key]
        try:
            values[key] = typ(raw.strip())
        except ValueError:
            raise InjectError(
                f"--inject {spec!r}: {key}={raw!r} is not {'an integer' if typ is int else 'a number'}"
            ) from None
    missing = [k for k in required if k not in values]
    if missing:
        raise InjectError(
            f"--inject {spec!r}: {kind} needs {', '.join(missing)}; "
            f"form: {kind}:{','.join(k + '=...' for k in required)}" + "".join(f"[,{k}=...]" for k in optional)
        )
    _check_values(spec, kind, values)
    if "rank" in values:
        values["ranks"] = (values.pop("rank"),)
    if "delay_ms" in values:
        values["delay_s"] = values.pop("delay_ms") / 1000.0
    if "step" in values:  # hang, kill: the step it happens in
        values["start"] = values.pop("step")
    return Fault(kind=kind, **values)


def _check_values(spec: str, kind: str, values: dict[str, Any]) -> None:
    phase = values.get("phase")
    if phase is not None and phase not in DEMO_PHASES:
        raise InjectError(f"--inject {spec!r}: phase={phase!r}; accepted: {', '.join(DEMO_PHASES)}")
    op = values.get("op")
    if op is not None and op not in SLOW_OPS:
        raise InjectError(f"--inject {spec!r}: op={op!r}; accepted: {', '.join(SLOW_OPS)}")
    factor = values.get("factor")
    if factor is not None and not 1.0 < factor <= 100.0:
        raise InjectError(
            f"--inject {spec!r}: factor={factor}; accepted: a number above 1 and at most 100 (1.5 means 50% slower)"
        )
    delay = values.get("delay_ms")
    if delay is not None and not 0.0 < delay <= 60000.0:
        raise InjectError(f"--inject {spec!r}: delay_ms={delay}; accepted: above 0, at most 60000")
    for name in ("rank", "start", "step"):
        v = values.get(name)
        if v is not None and v < 0:
            raise InjectError(f"--inject {spec!r}: {name}={v}; accepted: an integer >= 0")


def check_against_job(faults: Iterable[Fault], ranks: int, steps: int) -> None:
    """Reject faults that name a rank or step the job will not have."""
    for f in faults:
        if f.rank is not None and f.rank >= ranks:
            raise InjectError(
                f"--inject {f.kind}: rank={f.rank} but the job has --ranks {ranks} (accepted: 0..{ranks - 1})"
            )
        last = f.start
        if last >= steps:
            raise InjectError(
                f"--inject {f.kind}: {'step' if f.kind in ('hang', 'kill') else 'start'}={last} "
                f"but the job runs --steps {steps} (accepted: 0..{steps - 1})"
            )


class FaultPlan:
    """What the faults do to one rank, asked by the training loop at each point."""

    def __init__(self, faults: Iterable[Fault], rank: int) -> None:
        self.rank = rank
        self.faults = tuple(faults)

    def phase_factor(self, step: int, phase: str) -> float:
        """How many times its own wall time this rank's phase should take at this step (stragglers)."""
        factor = 1.0
        for f in self.faults:
            if step >= f.start and f.kind == "straggler" and self.rank in f.ranks and f.phase == phase:
                factor *= f.factor
        return factor

    def slow_op(self, step: int) -> tuple[str, float] | None:
        """The op this rank's forward runs over and over at this step, and the forward's factor (slow_op)."""
        for f in self.faults:
            if f.kind == "slow_op" and step >= f.start and self.rank in f.ranks and f.op:
                return f.op, f.factor
        return None

    def checkpoint_factor(self, step: int) -> float:
        """How many times their own time this rank's checkpoint writes should take at this step."""
        factor = 1.0
        for f in self.faults:
            if f.kind == "slow_checkpoint" and step >= f.start and self.rank in f.ranks:
                factor *= f.factor
        return factor

    def input_factor(self, step: int) -> float:
        """How many times their own time this rank's input reads should take at this step."""
        factor = 1.0
        for f in self.faults:
            if f.kind == "slow_input" and step >= f.start and self.rank in f.ranks:
                factor *= f.factor
        return factor

    def work_factor(self, step: int, phase: str) -> float:
        """How many times its own compute this rank's phase should do at this step (regressions)."""
        factor = 1.0
        for f in self.faults:
            if step >= f.start and f.kind == "regression" and (f.phase is None or f.phase == phase):
                factor *= f.factor
        return factor

    def data_delay_s(self, step: int) -> float:
        return sum(
            f.delay_s for f in self.faults if f.kind == "data_stall" and self.rank in f.ranks and step >= f.start
        )

    def comm_factor(self, step: int) -> float:
        factor = 1.0
        for f in self.faults:
            if f.kind == "slow_comm" and step >= f.start:
                factor *= f.factor
        return factor

    def host_gap_s(self, step: int) -> float:
        """Seconds of host work after this step, outside it (every rank)."""
        return sum(f.delay_s for f in self.faults if f.kind == "host_gap" and step >= f.start)

    def hangs_at(self, step: int) -> bool:
        return any(f.kind == "hang" and self.rank in f.ranks and f.start == step for f in self.faults)

    def hog_starts_at(self, step: int) -> bool:
        return any(f.kind == "cpu_hog" and self.rank in f.ranks and f.start == step for f in self.faults)

    def killed_at(self, step: int) -> bool:
        return any(f.kind == "kill" and self.rank in f.ranks and f.start == step for f in self.faults)

    @property
    def has_slow_comm(self) -> bool:
        return any(f.kind == "slow_comm" for f in self.faults)

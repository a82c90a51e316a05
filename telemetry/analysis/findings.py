"""A finding, as DESIGN.md's findings JSON defines it, and the severity rule shared by detectors."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SEVERITIES = ("info", "warning", "critical")


@dataclass(frozen=True)
class Finding:
    kind: str  # straggler, data_stall, slow_comm, regression, hang, memory_growth, ...
    ranks: list[int]  # empty for job-wide
    phase: str | None
    first_step: int | None
    last_step: int | None
    severity: str
    slowdown: float  # what-if: 1 - ideal_time / actual_time over the steps covered
    evidence: str
    # ranked {"kind", "evidence"}: the culprit's device and host signals that explain it (detectors/causes.py)
    causes: list[dict[str, str]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    # the traces of its worst traced steps, worst first (hex; analysis/tracelinks.py), when the run exported traces
    trace_ids: list[str] = field(default_factory=list)
    # a profiler capture it adopts, and the flagged rank's trace against the peer's (analysis/captures.py)
    capture: dict[str, Any] | None = None
    trace_diff: list[dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["slowdown"] = round(float(self.slowdown), 6)
        for key in ("capture", "trace_diff"):  # only a finding with a capture has them
            if d[key] is None:
                del d[key]
        return d


def tally(findings: list[Finding]) -> dict[str, Any]:
    """The summary's count of ``findings``: how many, how many of each kind, the highest severity (None
    when none)."""
    return {
        "findings": len(findings),
        "by_kind": {k: sum(f.kind == k for f in findings) for k in sorted({f.kind for f in findings})},
        "severity": max((f.severity for f in findings), key=SEVERITIES.index, default=None),
    }


def severity_for(slowdown: float, critical_at: float = 0.05) -> str:
    """Under 1% of the covered steps' time is at most info; from ``critical_at`` it is critical."""
    if slowdown >= critical_at:
        return "critical"
    if slowdown >= 0.01:
        return "warning"
    return "info"


def compare_online(offline: list[Finding], online: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Online detection's findings, each with ``confirmed_offline`` (the analysis of every step found
    the same kind on the same ranks and phase) and, when not, why the two can differ."""
    seen = {(f.kind, tuple(f.ranks), f.phase) for f in offline}
    out = []
    for d in online:
        key = (d.get("kind"), tuple(d.get("ranks") or ()), d.get("phase"))
        row = {
            k: d.get(k)
            for k in (
                "kind",
                "ranks",
                "phase",
                "first_step",
                "last_step",
                "severity",
                "slowdown",
                "evidence",
                "block_steps",
                "time_s",
            )
        }
        row["confirmed_offline"] = key in seen
        if not row["confirmed_offline"]:
            row["why_not_offline"] = (
                "online detection saw medians of blocks of steps in a moving window while the job ran; "
                "the offline analysis of every step of the whole run did not find it, so it did not "
                "hold over the run (a passing episode, or block noise)"
            )
        out.append(row)
    return out

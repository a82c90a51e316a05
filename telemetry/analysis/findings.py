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
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["slowdown"] = round(float(self.slowdown), 6)
        return d


def severity_for(slowdown: float, critical_at: float = 0.05) -> str:
    """Under 1% of the covered steps' time is at most info; from ``critical_at`` it is critical."""
    if slowdown >= critical_at:
        return "critical"
    if slowdown >= 0.01:
        return "warning"
    return "info"

"""Detectors: pure functions from the steps table (and, for hangs, progress heartbeats) to findings.

>>> from telemetry.detectors import analyze
>>> result = analyze(table)                   # doctest: +SKIP
>>> result.to_json()["findings"][0]["kind"]   # doctest: +SKIP
'straggler'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import pandas as pd

from .findings import Finding, severity_for
from .hang import detect_hang
from .matrix import StepMatrix, from_table, nanmedian
from .straggler import StragglerParams, detect_stragglers
from .whatif import slowdown


@dataclass
class Analysis:
    findings: list[Finding]
    summary: dict[str, Any]
    matrix: StepMatrix | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"findings": [f.to_dict() for f in self.findings], "summary": self.summary}


def analyze(table: pd.DataFrame, progress: Mapping[int, Mapping[str, Any]] | None = None,
            world_size: int | None = None, hang_bound_s: float | None = None,
            straggler: StragglerParams | None = None) -> Analysis:
    m = from_table(table) if len(table) else None
    findings: list[Finding] = []
    shift = None
    if m is not None:
        s_findings, shift = detect_stragglers(m, straggler)
        findings.extend(s_findings)
    if progress:
        findings.extend(detect_hang(progress, m, world_size, hang_bound_s))
    findings.sort(key=lambda f: (-["info", "warning", "critical"].index(f.severity), -f.slowdown))
    return Analysis(findings, _summary(m, findings, shift), m)


def _summary(m: StepMatrix | None, findings: list[Finding], shift: np.ndarray | None) -> dict[str, Any]:
    if m is None:
        return {"ranks": 0, "steps": 0, "findings": 0, "slowdown": 0.0, "severity": None}
    t = m.step_time()
    total = slowdown(m, shift) if shift is not None else 0.0
    out: dict[str, Any] = {
        "ranks": m.n_ranks, "steps": m.n_steps,
        "first_step": int(m.steps[0]), "last_step": int(m.steps[-1]),
        "step_time_s": float(nanmedian(t)),
        "slowdown": round(total, 6),
        "findings": len(findings),
        "by_kind": {k: sum(f.kind == k for f in findings) for k in sorted({f.kind for f in findings})},
        "severity": max((f.severity for f in findings), key=["info", "warning", "critical"].index, default=None),
    }
    if m.tokens is not None:
        per_step = np.nansum(m.tokens, axis=0)
        secs = np.nansum(t)
        if secs > 0 and np.nansum(per_step) > 0:
            out["tokens_per_s"] = float(np.nansum(per_step) / secs)
    if any(f.kind == "hang" for f in findings):
        out["slowdown"] = 1.0
    return out


__all__ = ["Analysis", "Finding", "StepMatrix", "StragglerParams", "analyze", "detect_hang",
           "detect_stragglers", "from_table", "severity_for"]

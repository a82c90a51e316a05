"""Analysis: any input, read into a steps table, through the detectors, to findings.

The front door is :func:`analyze_run` with an :class:`AnalysisOptions`; every caller (the CLI, the
dashboard, ``telemetry history``, the benches) goes through it. The stages are folders: ``inputs/`` (the
loader and its formats), ``detectors/``, ``longrun/`` (windows, blocks, what ``telemetry compact``
keeps), ``traces/`` (profiler traces: breakdown, diff, captures, trace ids), ``history/`` (many runs).
The names below are imported when first used, so that importing one stage (the findings record, say)
does not import them all.

>>> from telemetry.analysis import AnalysisOptions, analyze_run
>>> analyze_run("runs/exp1", AnalysisOptions(steps=(100, 200))).to_json()   # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..analysis_options import AnalysisOptions
    from .detectors import Analysis
    from .findings import Finding
    from .inputs.load import RunInput, open_input
    from .run import PrometheusSource, analyze_run

_WHERE = {
    "AnalysisOptions": "telemetry.analysis_options",
    "Analysis": "telemetry.analysis.detectors",
    "Finding": "telemetry.analysis.findings",
    "RunInput": "telemetry.analysis.inputs.load",
    "open_input": "telemetry.analysis.inputs.load",
    "PrometheusSource": "telemetry.analysis.run",
    "analyze_run": "telemetry.analysis.run",
}
__all__ = ["Analysis", "AnalysisOptions", "Finding", "PrometheusSource", "RunInput", "analyze_run", "open_input"]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'telemetry.analysis' has no attribute {name!r}")

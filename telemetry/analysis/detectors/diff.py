"""Comparing two runs: did the change make training slower, and where? (:func:`diff`, ``telemetry diff``)

Each job-level series (step time; each phase's compute; the collectives' own time; the data wait) of
both runs is cut into blocks of steps and the block medians compared with a Mann-Whitney U test; the
bar for significance grows with the size of the change, and a series too short to ever pass it is
said undecided (the rules: :func:`diff`; the command: docs/detectors.md, "Comparing runs").

>>> result = diff(base_table, new_table)   # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ...steptable.matrix import COMM, DATA, StepMatrix, from_table, job_components, nanmedian
from ..findings import Finding, severity_for
from .ranktest import mann_whitney_p
from .stretch import StragglerParams


@dataclass(frozen=True)
class DiffParams:
    min_effect: float = 0.05
    alpha: float = 1e-3
    max_alpha: float = 0.01
    block: int = 10

    def bound(self, effect: float) -> float:
        """The p-value a change of this size must be under."""
        return min(self.max_alpha, max(self.alpha, self.alpha * abs(effect) / self.min_effect))


def _series(m: StepMatrix) -> dict[str, np.ndarray]:
    live = slice(StragglerParams().warmup(m.n_steps), None)
    out = {"step": m.step_time()[live]}
    for name, v in job_components(m).items():
        out[{COMM: "comm", DATA: "data"}.get(name, name)] = v[live]
    return out


def _blocks(x: np.ndarray, b: int) -> np.ndarray:
    x = x[np.isfinite(x)]
    n = len(x) // b
    if n == 0:
        return np.array([np.median(x)]) if len(x) else np.array([])
    return nanmedian(x[: n * b].reshape(n, b), axis=1)


def diff(base: pd.DataFrame, new: pd.DataFrame, params: DiffParams | None = None) -> dict[str, Any]:
    """The new run against the base. Per job-level series (step time; each phase's compute, median
    over ranks; the collectives' own time, the minimum over ranks; the data wait), both runs' steps
    after warm-up are cut into blocks of ``block`` steps (consecutive steps are not independent: a
    per-step test would call noise significant) and the block medians compared with a Mann-Whitney U
    test. A change is reported when it is at least ``min_effect`` of the base run's level and its
    two-sided p is below ``alpha x change / min_effect`` (``alpha`` at ``min_effect``, at most
    ``max_alpha``): a large, consistent change needs less evidence than a small one. ``regression``
    when the new run is slower, ``improvement`` when faster. A series whose blocks are too few for the
    test's smallest possible p to reach the bound is listed as undecided rather than silently passed.
    A phase's ``slowdown`` is its change as a fraction of the new step time."""
    p = params or DiffParams()
    mb, mn = from_table(base), from_table(new)
    sb, sn = _series(mb), _series(mn)
    step_new = float(nanmedian(sn["step"]))
    step_base = float(nanmedian(sb["step"]))
    findings: list[Finding] = []
    changes = {}
    undecided: dict[str, str] = {}
    for name in [k for k in sb if k in sn]:  # a fixed order (step, phases, comm, data): a set's varies by run
        xb, xn = _blocks(sb[name], p.block), _blocks(sn[name], p.block)
        lb, ln = float(nanmedian(sb[name])), float(nanmedian(sn[name]))
        if not (np.isfinite(lb) and np.isfinite(ln)) or lb <= 0:
            continue
        pval = mann_whitney_p(xb, xn)
        effect = ln / lb - 1.0
        bound = p.bound(effect)
        changes[name] = {"base_s": lb, "new_s": ln, "change": effect, "p": pval, "p_bound": bound}
        if abs(effect) < p.min_effect:
            continue
        if pval >= bound:
            best = mann_whitney_p(np.zeros(len(xb)), np.ones(len(xn)))  # every block on one side
            if best >= bound:
                undecided[name] = (
                    f"{len(xb)} vs {len(xn)} blocks of {p.block} steps cannot reach "
                    f"p < {bound:.0e} (at best p = {best:.1e}): run more steps to decide "
                    f"a {effect:+.0%} change"
                )
            continue
        kind = "regression" if effect > 0 else "improvement"
        cost = (ln - lb) / step_new if step_new > 0 else 0.0
        label = (
            "the step"
            if name == "step"
            else (
                "the collectives' own time"
                if name == "comm"
                else "the data wait"
                if name == "data"
                else f"phase {name}"
            )
        )
        findings.append(
            Finding(
                kind=kind,
                ranks=[],
                phase=None if name in ("step", "comm") else name,
                first_step=int(mn.steps[0]),
                last_step=int(mn.steps[-1]),
                severity=severity_for(max(cost, 0.0)) if kind == "regression" else "info",
                slowdown=max(cost, 0.0),
                evidence=(
                    f"{label}: {lb * 1e3:.2f} ms -> {ln * 1e3:.2f} ms per step ({effect:+.1%}; Mann-Whitney on "
                    f"{len(xb)} vs {len(xn)} blocks of {p.block} steps, p = {pval:.1e})"
                    + (f"; {abs(cost):.1%} of the new step time" if name != "step" else "")
                ),
                details={"series": name, "base_s": lb, "new_s": ln, "change": effect, "p": pval},
            )
        )
    findings.sort(key=lambda f: (f.kind != "regression", -f.slowdown))
    summary = {
        "base_step_s": step_base,
        "new_step_s": step_new,
        "step_change": step_new / step_base - 1.0 if step_base > 0 else None,
        "base_steps": mb.n_steps,
        "new_steps": mn.n_steps,
        "base_ranks": mb.n_ranks,
        "new_ranks": mn.n_ranks,
        "series": changes,
        "min_effect": p.min_effect,
        "alpha": p.alpha,
        "max_alpha": p.max_alpha,
        "undecided": undecided,
    }
    if mb.tokens is not None and mn.tokens is not None:
        tb = mb.tokens.sum() / max(float(np.nansum(mb.step_time())), 1e-12)
        tn = mn.tokens.sum() / max(float(np.nansum(mn.step_time())), 1e-12)
        if tb > 0:
            summary["tokens_per_s"] = {"base": float(tb), "new": float(tn), "change": float(tn / tb - 1.0)}
    return {"findings": [f.to_dict() for f in findings], "summary": summary}

"""Why a change across runs happened: the runs either side of it compared, step by step and by their
profiler captures.

``telemetry history`` finds the run after which a series changed from the runs' summaries alone
(:mod:`.runs`). For each change (at most ``MAX_EXPLAINED``, the regressions first; the rest said) this
opens the two runs either side and adds to its ``diff``: ``steps``, the pair compared as ``telemetry
diff`` compares them (:mod:`..detectors.diff`), and ``trace_diff``, a rank captured in both (its baseline
capture first, then a peer's, then a flagged rank's) in the slower run against the faster one
(:mod:`..traces.diff`). The slower run is the one after a regression and the one before an improvement:
the rows always say what the slower side spends more time in. More: docs/history.md.
"""

from __future__ import annotations

import os
from typing import Any, cast

from ..traces.breakdown import breakdown
from ..traces.captures import read_manifests, trace_path
from ..traces.diff import TraceProfile, trace_diff

MAX_EXPLAINED = 10  # changes whose runs either side are opened, regressions first
ROLE_RANK = {"baseline": 0, "peer": 1, "flagged": 2}  # which capture of a rank to compare, best first


def _traces(run_dir: str) -> dict[int, tuple[int, dict[str, Any]]]:
    """Each rank with a capture trace in ``run_dir`` -> (its role's rank, the manifest): the best
    capture of each rank, the earliest among equals."""
    out: dict[int, tuple[int, dict[str, Any]]] = {}
    for m in read_manifests(run_dir):
        for r in m["ranks"]:
            if not os.path.isfile(trace_path(run_dir, m["id"], r)):
                continue
            role = ROLE_RANK.get(m["roles"].get(r, ""), 3)
            if r not in out or role < out[r][0]:
                out[r] = (role, m)
    return out


def capture_pair(before: str, after: str) -> tuple[int, dict[str, Any], dict[str, Any]] | None:
    """The rank both runs captured, and each run's capture of it (the best roles, then the lowest rank);
    None when no rank was captured in both."""
    a, b = _traces(before), _traces(after)
    common = sorted(set(a) & set(b), key=lambda r: (a[r][0] + b[r][0], r))
    if not common:
        return None
    r = common[0]
    return r, a[r][1], b[r][1]


def _capture_doc(run_dir: str, m: dict[str, Any], rank: int) -> dict[str, Any]:
    return {
        "run": run_dir,
        "id": m["id"],
        "rank": rank,
        "role": m["roles"].get(rank),
        "steps": m["steps"],
        "trace": trace_path(run_dir, m["id"], rank),
    }


def explain(before: str, after: str, slower_after: bool = True, min_effect: float = 0.05) -> dict[str, Any]:
    """The runs ``before`` and ``after`` (directories) compared: ``steps`` (``min_effect``: the smallest
    change the steps' comparison reports), ``trace_diff``, ``captures``, ``notes`` (what could not be
    compared, and why)."""
    from ..detectors.diff import DiffParams, diff
    from ..inputs.load import open_input

    out: dict[str, Any] = {"steps": None, "trace_diff": [], "captures": None, "notes": []}
    try:
        base, new = open_input(before).table, open_input(after).table
        if len(base) and len(new):
            d = diff(base, new, DiffParams(min_effect=min_effect))
            out["steps"] = {
                "series": {k: {"change": v["change"], "p": v["p"]} for k, v in d["summary"]["series"].items()},
                "findings": [{k: f[k] for k in ("kind", "phase", "severity", "evidence")} for f in d["findings"]],
            }
        else:
            out["notes"].append("a run has no steps: its steps are not compared")
    except Exception as exc:  # noqa: BLE001 - a run that does not read costs its comparison only (said)
        out["notes"].append(f"the runs' steps do not read ({type(exc).__name__}: {exc}): not compared")
    pair = capture_pair(before, after)
    if pair is None:
        out["notes"].append(
            "no rank has a profiler capture in both runs (captures are on by default: init(capture=True)); "
            "the ops and collectives are not compared"
        )
        return out
    rank, mb, ma = pair
    cb, ca = _capture_doc(before, mb, rank), _capture_doc(after, ma, rank)
    slow, fast = (ca, cb) if slower_after else (cb, ca)
    out["captures"] = {"before": cb, "after": ca, "slower": "after" if slower_after else "before"}
    try:
        ps = breakdown(slow["trace"], steps_hint=slow["steps"][1] - slow["steps"][0] + 1).profile
        pf = breakdown(fast["trace"], steps_hint=fast["steps"][1] - fast["steps"][0] + 1).profile
        out["trace_diff"] = trace_diff(cast(TraceProfile, ps), cast(TraceProfile, pf))  # breakdown() sets each
    except Exception as exc:  # noqa: BLE001 - a trace that does not read costs only its diff (said)
        out["notes"].append(f"rank {rank}'s traces do not read ({type(exc).__name__}: {exc}): not compared")
    return out


def slower_and_faster(captures: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two captures :func:`explain` compared (its ``captures``), the slower run's first."""
    after, before = captures["after"], captures["before"]
    return (after, before) if captures["slower"] == "after" else (before, after)


def explain_changes(doc: dict[str, Any], limit: int = MAX_EXPLAINED) -> None:
    """Add :func:`explain` of the runs either side to each change of the history document ``doc`` (at
    most ``limit``, regressions first, then by run; the others said in ``doc["notes"]``)."""
    order = sorted(doc["changes"], key=lambda c: (not c["regression"], c["n"], c["p"]))
    done: dict[tuple[str, str, bool], dict[str, Any]] = {}  # several series change at one run: opened once
    skipped = 0
    for c in order:
        before, after = c.get("paths") or (None, None)
        if not (before and after):
            continue
        key = (before, after, bool(c["regression"]))
        if key not in done and len(done) >= limit:
            skipped += 1
            continue
        if key not in done:
            done[key] = explain(before, after, c["regression"], doc["params"]["min_change"])
        c["diff"].update(done[key])
    if skipped:
        doc["notes"].append(
            f"{skipped} change(s) beyond the first {limit} pairs of runs not compared step by step or by "
            "captures: run `telemetry diff` on the runs either side"
        )

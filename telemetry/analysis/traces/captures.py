"""Profiler captures in a run directory, and the findings that adopt them (:func:`with_captures`).

A capture (``RUN_DIR/captures/<id>/``) holds ``manifest.json`` (``id``, ``ranks``: the flagged ranks then
the peer, ``roles``, ``steps``: ``[first, last]``, ``finding``, ``block_steps``) and one gzipped Kineto
trace per rank, ``rank-N.json.gz`` (:func:`read_manifests`). A finding adopts a capture by its ranks and
steps (:func:`adopts`) and gains ``capture`` and ``trace_diff``: the first flagged rank's trace against
the peer's, or for a job-wide finding against that rank's trace in the run's baseline capture
(:func:`_baseline_diff`, :func:`_baseline_before`). A capture without both traces is adopted with
``trace_diff`` empty and ``capture.missing`` naming the ranks. The diff's causes: :func:`diff_causes`.
The rules: docs/captures.md, "Captures on findings".
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, cast

from ..findings import Finding
from .breakdown import breakdown
from .diff import TraceProfile, trace_diff
from .waits import summarize

CAPTURES = "captures"
# the job-wide kinds a job-wide capture is taken for and adopted by (online/capture.py's JOB_WIDE)
JOB_WIDE = ("regression", "utilization_regression", "slow_comm", "data_stall")
MANIFEST = "manifest.json"


def trace_path(run_dir: str, capture_id: str, rank: int) -> str:
    return os.path.join(run_dir, CAPTURES, capture_id, f"rank-{rank}.json.gz")


def read_manifests(run_dir: str, warnings: list[str] | None = None) -> list[dict[str, Any]]:
    """The captures of ``run_dir`` whose manifest reads, oldest first; a bad one said in ``warnings``."""
    root = os.path.join(run_dir, CAPTURES)
    out = []
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    for name in names:
        path = os.path.join(root, name, MANIFEST)
        if not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                m = json.load(f)
            m["ranks"] = [int(r) for r in m["ranks"]]
            m["steps"] = [int(m["steps"][0]), int(m["steps"][1])]
            m["roles"] = {int(k): str(v) for k, v in m["roles"].items()}
            m["id"] = str(m.get("id") or name)
        except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            if warnings is not None:
                warnings.append(f"{path}: not a capture manifest ({exc}); skipped")
            continue
        out.append(m)
    return out


def adopts(f: Finding, m: dict[str, Any]) -> bool:
    """Whether finding ``f`` adopts capture ``m``: its flagged ranks among the finding's (a job-wide
    capture: the finding job-wide too, of a kind in :data:`JOB_WIDE`), and its steps within the
    finding's, or within one online block of them. A job-wide capture is also adopted by a job-wide
    finding of the kind that planned it whose steps meet the stretch from that finding's first step to
    the capture's last (the whole run's analysis may date the change, or its end, a little apart from
    the online window's)."""
    flagged = [r for r in m["ranks"] if m["roles"].get(r) == "flagged"]
    if not flagged:
        return False
    if m.get("job_wide"):
        if f.ranks or f.kind not in JOB_WIDE:
            return False
    elif not set(flagged) <= set(f.ranks):
        return False
    if f.first_step is None or f.last_step is None:
        return True
    k = int(m.get("block_steps") or 0)
    if f.first_step - k <= m["steps"][0] and m["steps"][1] <= f.last_step + k:
        return True
    planned_by = m.get("finding") or {}
    if m.get("job_wide") and planned_by.get("kind") == f.kind and planned_by.get("first_step") is not None:
        return f.first_step <= m["steps"][1] and f.last_step >= int(planned_by["first_step"])
    return False


def with_captures(
    findings: list[Finding], run_dir: str, warnings: list[str] | None = None, last_step: int | None = None
) -> list[Finding]:
    """``findings``, each that adopts a capture of ``run_dir`` with its ``capture`` and ``trace_diff``
    (the latest capture it adopts). A capture planned from a step after ``last_step`` (the run's last:
    the job ended first) is not adopted, and said."""
    manifests = read_manifests(run_dir, warnings)
    if last_step is not None:
        late = [m for m in manifests if m["steps"][0] > last_step]
        for m in late:
            if warnings is not None:
                warnings.append(
                    f"capture {m['id']} was planned for steps {m['steps'][0]}-{m['steps'][1]}, after the run's "
                    f"last step {last_step}: the job ended first, nothing was captured"
                )
        manifests = [m for m in manifests if m not in late]
    if not manifests or not findings:
        return findings
    by_id = {m["id"]: m for m in manifests}
    diffs: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    out = []
    for f in findings:
        chosen = [m for m in manifests if adopts(f, m)]
        if not chosen:
            out.append(f)
            continue
        m = chosen[-1]
        base = None
        if m.get("job_wide"):
            base = by_id.get(m["baseline"]) if m.get("baseline") else _baseline_before(manifests, f.first_step)
        if base is not None and f.first_step is not None and base["steps"][1] >= f.first_step:
            if warnings is not None:
                warnings.append(
                    f"capture {m['id']}: its baseline {base['id']} (steps {base['steps'][0]}-{base['steps'][1]}) "
                    f"was taken after the change began at step {f.first_step}; no diff against it"
                )
            base = None
        key = f"{m['id']} {base['id'] if base else ''}"
        if key not in diffs:
            diffs[key] = (
                _baseline_diff(run_dir, m, base, warnings) if m.get("job_wide") else _diff(run_dir, m, warnings)
            )
        capture, rows = diffs[key]
        causes = diff_causes(rows, capture) + [c for c in f.causes]
        out.append(dataclasses.replace(f, capture=capture, trace_diff=rows, causes=causes))
    return out


def _baseline_before(manifests: list[dict[str, Any]], first_step: int | None) -> dict[str, Any] | None:
    """The run's baseline capture (the latest, should there be more) when its steps ended before
    ``first_step``: for a job-wide capture that names none because online detection dated the change
    before the baseline ended, where the whole run's analysis dates it after."""
    if first_step is None:
        return None
    ended = [m for m in manifests if m.get("reason") == "baseline" and m["steps"][1] < first_step]
    return ended[-1] if ended else None


def diff_causes(rows: list[dict[str, Any]], capture: dict[str, Any]) -> list[dict[str, str]]:
    """What a capture's diff says of the cause, first in the finding's causes:

    - at least five names slower by about the same factor (each within 25% of their median ratio,
      which is 1.2 or more, and at least 60% of the names both ranks ran): ``uniform_slowdown``, the
      device or the host as a whole, not one op;
    - one op, kernel or collective holding at least half the flagged rank's extra time per step, once
      that uniform factor is taken out of every name (the peer's time times the factor is what the
      flagged rank would take were nothing else wrong): ``slow_op`` / ``slow_kernel`` /
      ``slow_collective``, naming it (look at its inputs, or the device it runs on; for a collective,
      the link or the peers it waits for); beside a uniform factor it must also hold a fifth of all
      the extra time. Also the largest name the other side never ran, once it holds a fifth of the
      extra time beyond the factor (no factor explains a name one side alone runs); the larger first.

    Both can hold (a rank on a busy host that also runs one op more): the named ones come first.

    With GPU traces, a third: the flagged rank's GPU idles waiting for launches (HTA's host wait: a
    kernel launched after the previous one ended) for at least half of the span it has beyond the
    peer's: ``host_bound``, first (the host side, not a kernel, is what to make faster).
    """
    host = _host_bound(capture)
    if not rows or sum(max(0.0, r["flagged_ms_per_step"] - r["peer_ms_per_step"]) for r in rows) <= 0:
        return host
    us, them, other = _sides(capture)
    steps = capture.get("steps") or ["?", "?"]
    where_seen = f"in the profiler capture (steps {steps[0]}-{steps[1]})"
    causes: list[dict[str, str]] = []
    factor = 1.0
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None and r["peer_ms_per_step"] > 0]
    if len(ratios) >= 5:
        med = float(sorted(ratios)[len(ratios) // 2])
        alike = [x for x in ratios if abs(x - med) <= 0.25 * med]
        if med >= 1.2 and len(alike) >= 5 and len(alike) >= 0.6 * len(ratios):
            factor = med
            causes.append(
                {
                    "kind": "uniform_slowdown",
                    "evidence": (
                        f"{where_seen}, {len(alike)} ops and kernels are each about {med:.2f}x slower on "
                        f"{us} than on {them}: the device or the host as a whole (clocks, contention), not one op"
                    ),
                }
            )
    raw = sum(max(0.0, r["flagged_ms_per_step"] - r["peer_ms_per_step"]) for r in rows)
    beyond = [(r, r["flagged_ms_per_step"] - factor * r["peer_ms_per_step"]) for r in rows]
    total = sum(max(0.0, e) for _, e in beyond)
    if total > 0:
        named: list[tuple[dict[str, Any], float]] = []
        top, top_extra = max(beyond, key=lambda t: t[1])
        # beside a uniform factor, the one op must also be a fifth of all the extra time: the
        # scatter of the alike ratios around their median is not a cause
        if top_extra >= 0.5 * total and top_extra >= 0.2 * raw:
            named.append((top, top_extra))
        # a name the other side never ran is no host's or device's factor: the strongest clue there
        # is (another code path, a data-dependent op), named too once it is a fifth of the extra time
        # beyond the factor
        only = [(r, e) for r, e in beyond if r["peer_ms_per_step"] == 0 and r["flagged_ms_per_step"] > 0]
        if only:
            alone, alone_extra = max(only, key=lambda t: t[1])
            if all(alone is not r for r, _ in named) and alone_extra >= 0.2 * total:
                named.append((alone, alone_extra))
        named.sort(key=lambda t: -t[1])
        causes[:0] = [_one_name_cause(r, e, total, factor, where_seen, us, them, other) for r, e in named]
    return host + causes


def _one_name_cause(
    row: dict[str, Any], extra: float, total: float, factor: float, where_seen: str, us: str, them: str, other: str
) -> dict[str, str]:
    """The cause naming one op, kernel or collective of a diff: ``slow_op`` / ``slow_kernel`` /
    ``slow_collective``, with its times on both sides and its share of the extra time."""
    kind = {"op": "slow_op", "kernel": "slow_kernel", "collective": "slow_collective"}.get(row["kind"], "slow_op")
    than = f"{row['ratio']:.2f}x {other}'s" if row["ratio"] is not None else f"{other} never ran it"
    where = (
        "the link, or the peers it waits for"
        if row["kind"] == "collective"
        else "its inputs on this rank, or the device it runs on"
    )
    share = f"{extra / total:.0%} of the extra time there"
    if factor > 1.0:
        share += f" beyond the {factor:.2f}x every op shows"
    return {
        "kind": kind,
        "evidence": (
            f"{where_seen}, {row['name']} takes {row['flagged_ms_per_step']:.2f} ms per step on "
            f"{us} against {row['peer_ms_per_step']:.2f} on {them} ({than}): {share}; look at {where}"
        ),
    }


def _sides(capture: dict[str, Any]) -> tuple[str, str, str]:
    """How the causes name the two sides of a diff: (the flagged side, the other, the other in short)."""
    base = capture.get("baseline")
    if base:
        steps = base.get("steps") or ["?", "?"]
        return f"rank {base.get('rank')} now", f"its baseline capture (steps {steps[0]}-{steps[1]})", "the baseline"
    roles = capture.get("roles") or {}
    flagged = next((r for r in capture.get("ranks", []) if roles.get(str(r)) == "flagged"), "?")
    peer = next((r for r in capture.get("ranks", []) if roles.get(str(r)) == "peer"), "?")
    return f"rank {flagged}", f"rank {peer}", "its peer"


def _host_bound(capture: dict[str, Any]) -> list[dict[str, str]]:
    parts = (capture.get("breakdown") or {}).get("ranks") or {}
    base = capture.get("baseline") or {}
    if base:
        who = str(base.get("rank"))
        flagged, peer = parts.get(who), base.get("breakdown")
    else:
        roles = capture.get("roles") or {}
        who = next((r for r in parts if roles.get(r) == "flagged"), None)
        flagged = parts.get(who) if who is not None else None
        peer = next((parts[r] for r in parts if roles.get(r) == "peer"), None)
    _, them, _ = _sides(capture)
    if not flagged or not peer or flagged.get("device") != "gpu" or peer.get("device") != "gpu":
        return []
    n_f, n_p = max(len(flagged["steps"]), 1), max(len(peer["steps"]), 1)
    extra_span = flagged["temporal"]["span_us"] / n_f - peer["temporal"]["span_us"] / n_p
    extra_wait = flagged["idle"].get("host_wait_us", 0.0) / n_f - peer["idle"].get("host_wait_us", 0.0) / n_p
    if extra_span <= 0 or extra_wait < 0.5 * extra_span:
        return []
    la = flagged.get("launch") or {}
    launches = (
        f"; its launch calls take {la['call_us_mean']:.1f} µs on average and {la['shorter_than_call']} of "
        f"{la['count']} kernels run shorter than their launch"
        if la.get("count")
        else ""
    )
    return [
        {
            "kind": "host_bound",
            "evidence": (
                f"in the profiler capture, rank {who}'s GPU waits {extra_wait / 1e3:.2f} ms per step "
                f"more than on {them} for the host to launch kernels ({extra_wait / extra_span:.0%} of its "
                f"{extra_span / 1e3:.2f} ms longer step){launches}: the host is the bottleneck (CPU contention, "
                "Python overhead, small kernels), not the device"
            ),
        }
    ]


def _capture(m: dict[str, Any]) -> dict[str, Any]:
    """A finding's ``capture`` from the manifest ``m``."""
    return {
        "id": m["id"],
        "ranks": m["ranks"],
        "roles": {str(r): role for r, role in m["roles"].items()},
        "steps": m["steps"],
        "dir": os.path.join(CAPTURES, m["id"]),
    }


def _diff(run_dir: str, m: dict[str, Any], warnings: list[str] | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    capture = _capture(m)
    flagged = [r for r in m["ranks"] if m["roles"].get(r) == "flagged"]
    peers = [r for r in m["ranks"] if m["roles"].get(r) == "peer"]
    missing = [r for r in m["ranks"] if not os.path.isfile(trace_path(run_dir, m["id"], r))]
    if missing:
        capture["missing"] = missing
    if not flagged or not peers or flagged[0] in missing or peers[0] in missing:
        return capture, []
    n = m["steps"][1] - m["steps"][0] + 1
    try:
        parts = {r: breakdown(trace_path(run_dir, m["id"], r), steps_hint=n) for r in m["ranks"] if r not in missing}
        # breakdown() sets each one's profile
        rows = trace_diff(cast(TraceProfile, parts[flagged[0]].profile), cast(TraceProfile, parts[peers[0]].profile))
    except Exception as exc:  # noqa: BLE001 - a trace that does not read costs only its diff (said)
        if warnings is not None:
            warnings.append(f"capture {m['id']}: its traces do not read ({exc}); no trace_diff")
        return capture, []
    capture["breakdown"] = summarize(parts)
    return capture, rows


def _baseline_diff(
    run_dir: str, m: dict[str, Any], base: dict[str, Any] | None, warnings: list[str] | None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A job-wide finding's capture against the run's baseline capture: the first rank with a trace in
    both, its steps now against its steps then."""
    capture = _capture(m)
    have = [r for r in m["ranks"] if os.path.isfile(trace_path(run_dir, m["id"], r))]
    if len(have) < len(m["ranks"]):
        capture["missing"] = [r for r in m["ranks"] if r not in have]
    if not have:
        return capture, []
    n = m["steps"][1] - m["steps"][0] + 1
    try:
        parts = {r: breakdown(trace_path(run_dir, m["id"], r), steps_hint=n) for r in have}
    except Exception as exc:  # noqa: BLE001 - a trace that does not read costs only its diff (said)
        if warnings is not None:
            warnings.append(f"capture {m['id']}: its traces do not read ({exc}); no trace_diff")
        return capture, []
    capture["breakdown"] = summarize(parts)
    rank = next((r for r in have if base and os.path.isfile(trace_path(run_dir, base["id"], r))), None)
    if base is None or rank is None:
        if warnings is not None and base is not None:
            warnings.append(f"capture {m['id']}: its baseline {base['id']} has no trace of its ranks; no diff")
        return capture, []
    nb = base["steps"][1] - base["steps"][0] + 1
    try:
        then = breakdown(trace_path(run_dir, base["id"], rank), steps_hint=nb)
    except Exception as exc:  # noqa: BLE001 - a baseline that does not read costs only the diff (said)
        if warnings is not None:
            warnings.append(f"capture {base['id']}: its trace of rank {rank} does not read ({exc}); no trace_diff")
        return capture, []
    capture["baseline"] = {
        "id": base["id"],
        "steps": base["steps"],
        "rank": rank,
        "dir": os.path.join(CAPTURES, base["id"]),
        "breakdown": summarize({rank: then})["ranks"][str(rank)],
    }
    return capture, trace_diff(
        cast(TraceProfile, parts[rank].profile), cast(TraceProfile, then.profile)
    )  # breakdown()'s

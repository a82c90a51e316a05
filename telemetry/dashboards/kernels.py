"""The Kernels view's tables: profiler traces broken down per rank (telemetry/analysis/traces/breakdown.py),
from the run's captures or from a directory of Kineto traces. No Streamlit here.

A source is one capture (``captures/<id>/``, its manifest naming the ranks and their roles) or, when
the dashboard was opened on a directory of Kineto traces, that directory. Its breakdown is
``{"ranks": {rank: breakdown}, "waits": ...}`` as ``summary.trace_breakdown`` and a finding's
``capture.breakdown`` hold it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pandas as pd

from telemetry.analysis.inputs.load import KINETO_TRACES, RunInput
from telemetry.analysis.traces.breakdown import breakdown
from telemetry.analysis.traces.captures import read_manifests, trace_path
from telemetry.analysis.traces.waits import summarize
from telemetry.steptable.table import TableError

PERFETTO = "https://ui.perfetto.dev"


@dataclass(frozen=True)
class Source:
    key: str  # capture id, or "" for the run's own traces
    label: str
    files: dict[int, str]  # rank -> trace file
    roles: dict[int, str]
    steps: tuple[int, int] | None


def sources(run: RunInput) -> list[Source]:
    """What the view can break down: the run's captures, newest first, or its own Kineto traces."""
    if run.kind == KINETO_TRACES:
        files = {r: os.path.join(run.source, i["trace"]) for r, i in sorted(run.ranks.items()) if i.get("trace")}
        return [Source("", f"the traces in {os.path.basename(os.path.normpath(run.source))}", files, {}, None)]
    if not os.path.isdir(run.source):
        return []
    out = []
    for m in reversed(read_manifests(run.source)):
        files = {r: trace_path(run.source, m["id"], r) for r in m["ranks"]}
        files = {r: p for r, p in files.items() if os.path.isfile(p)}
        who = ", ".join(f"rank {r} ({m['roles'].get(r, '?')})" for r in m["ranks"])
        label = f"{m['id']}: {who}, steps {m['steps'][0]}-{m['steps'][1]}" + (
            "" if len(files) == len(m["ranks"]) else f" ({len(m['ranks']) - len(files)} traces missing)"
        )
        out.append(Source(m["id"], label, files, dict(m["roles"]), (m["steps"][0], m["steps"][1])))
    return out


def source_breakdown(src: Source) -> tuple[dict[str, Any], list[str]]:
    """The breakdown of every trace of ``src`` and what could not be read."""
    parts, problems = {}, []
    n = src.steps[1] - src.steps[0] + 1 if src.steps else None
    for r, path in src.files.items():
        try:
            parts[r] = breakdown(path, steps_hint=n)
        except (TableError, OSError) as exc:
            problems.append(f"rank {r}: {exc}")
    return summarize(parts), problems


def temporal_table(bd: dict[str, Any], roles: dict[int, str]) -> pd.DataFrame:
    """One row per rank: where its traced time goes (ms and share)."""
    rows = []
    for r, b in bd.get("ranks", {}).items():
        t = b.get("temporal") or {}
        if not t:
            continue
        rows.append(
            {
                "rank": int(r),
                "role": roles.get(int(r), ""),
                "on": b["device"],
                "span ms": t["span_us"] / 1e3,
                "compute ms": t.get("compute_us", 0.0) / 1e3,
                "communication ms": t.get("communication_us", 0.0) / 1e3,
                "memory ms": t.get("memory_us", 0.0) / 1e3,
                "idle ms": t["idle_us"] / 1e3,
                "compute %": t["compute_pct"],
                "idle %": t["idle_pct"],
                "comm hidden %": b.get("overlap_pct"),
            }
        )
    return pd.DataFrame(rows)


def idle_table(bd: dict[str, Any]) -> pd.DataFrame:
    """One row per rank with GPU activity: its idle time split by cause (ms)."""
    rows = []
    for r, b in bd.get("ranks", {}).items():
        i = b.get("idle") or {}
        if i:
            rows.append(
                {
                    "rank": int(r),
                    "host wait ms": i["host_wait_us"] / 1e3,
                    "kernel wait ms": i["kernel_wait_us"] / 1e3,
                    "other ms": i["other_us"] / 1e3,
                    "host wait %": i["host_wait_pct"],
                }
            )
    return pd.DataFrame(rows)


def launch_table(bd: dict[str, Any]) -> pd.DataFrame:
    rows = [
        {"rank": int(r), **{k: v for k, v in (b.get("launch") or {}).items()}}
        for r, b in bd.get("ranks", {}).items()
        if (b.get("launch") or {}).get("count")
    ]
    return pd.DataFrame(rows)


def top_table(bd: dict[str, Any], rank: int, what: str) -> pd.DataFrame:
    """The top kernels (``what="kernels"``) or ops (``"ops"``) of one rank."""
    b = bd.get("ranks", {}).get(str(rank)) or {}
    return pd.DataFrame(b.get(what) or [])


def collectives_table(bd: dict[str, Any]) -> pd.DataFrame:
    """Each rank's collectives, with the wait for the latest captured rank apart from the transfer."""
    waits = (bd.get("waits") or {}).get("ranks") or {}
    rows = []
    for r, b in bd.get("ranks", {}).items():
        for c in b.get("collectives") or []:
            w = (waits.get(r) or {}).get(c["name"]) or {}
            rows.append(
                {
                    "rank": int(r),
                    "collective": c["name"],
                    "count": c["count"],
                    "ms": c["time_us"] / 1e3,
                    "bytes": c["bytes"],
                    "bus GB/s": c.get("busbw_GBps"),
                    "waiting ms": w["wait_us"] / 1e3 if w else None,
                    "transfer ms": w["transfer_us"] / 1e3 if w else None,
                }
            )
    return pd.DataFrame(rows)


def diff_of(cards: list[dict[str, Any]], capture_id: str) -> tuple[list[dict[str, Any]], str, str]:
    """The trace diff of the finding that adopted ``capture_id`` ([] when none did), its title and what
    it compares."""
    for f in cards:
        capture = f.get("capture") or {}
        if capture.get("id") != capture_id:
            continue
        base = capture.get("baseline")
        if base:
            return (
                f.get("trace_diff") or [],
                "Now against the run's baseline",
                f"where rank {base.get('rank')} now spends more per step than in the baseline capture {base.get('id')} "
                f"(steps {base['steps'][0]}-{base['steps'][1]}), by self time (the finding's trace_diff; "
                "peer_ms_per_step is the baseline's)",
            )
        return (
            f.get("trace_diff") or [],
            "Slow rank against peer",
            "where the flagged rank spends more per step than the peer, by self time (the finding's trace_diff)",
        )
    return [], "", ""

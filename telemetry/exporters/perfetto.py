"""Perfetto / Chrome trace-event JSON from a run directory: one process per rank, one track each
for steps, phases, collectives and data waits. Load the file in https://ui.perfetto.dev.

>>> doc = chrome_trace(open_input("runs/exp1").records, first_step=100, last_step=120)  # doctest: +SKIP
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Iterable

from telemetry.analysis.exports import Export

if TYPE_CHECKING:
    from telemetry.analysis.inputs.load import RunInput

TRACKS = {"step": 1, "phase": 2, "collective": 3, "data": 4}


def chrome_trace(
    steps: Iterable[dict[str, Any]],
    hosts: dict[str, str] | None = None,
    first_step: int | None = None,
    last_step: int | None = None,
) -> dict[str, Any]:
    events: list[dict[str, Any]] = []
    ranks: set[int] = set()
    t_origin = None
    chosen = [
        s
        for s in steps
        if (first_step is None or s["step"] >= first_step) and (last_step is None or s["step"] <= last_step)
    ]
    for s in chosen:
        t_origin = s["start_s"] if t_origin is None else min(t_origin, s["start_s"])
        for span in s.get("spans") or ():
            t_origin = min(t_origin, span[2])
    t_origin = t_origin or 0.0

    def us(t: float) -> float:
        return round((t - t_origin) * 1e6, 3)

    for s in chosen:
        rank = s["rank"]
        ranks.add(rank)
        args = {"step": s["step"], "comm_ms": round(s.get("comm_s", 0) * 1e3, 3)}
        if s.get("tokens") is not None:
            args["tokens"] = s["tokens"]
        if not s.get("ok", True):
            args["failed"] = True
        events.append(
            {
                "name": f"step {s['step']}",
                "cat": "step",
                "ph": "X",
                "pid": rank,
                "tid": TRACKS["step"],
                "ts": us(s["start_s"]),
                "dur": round(s["duration_s"] * 1e6, 3),
                "args": args,
            }
        )
        for kind, name, t0, t1, ok, nbytes in (_span(x) for x in s.get("spans") or ()):
            ev = {
                "name": name,
                "cat": kind,
                "ph": "X",
                "pid": rank,
                "tid": TRACKS.get(kind, 5),
                "ts": us(t0),
                "dur": round((t1 - t0) * 1e6, 3),
                "args": {"step": s["step"]},
            }
            if nbytes:
                ev["args"]["bytes"] = nbytes
            if not ok:
                ev["args"]["failed"] = True
            events.append(ev)
    meta = []
    for rank in sorted(ranks):
        host = (hosts or {}).get(str(rank))
        meta.append(
            {
                "name": "process_name",
                "ph": "M",
                "pid": rank,
                "args": {"name": f"rank {rank}" + (f" ({host})" if host else "")},
            }
        )
        meta.append({"name": "process_sort_index", "ph": "M", "pid": rank, "args": {"sort_index": rank}})
        for track, tid in TRACKS.items():
            meta.append(
                {
                    "name": "thread_name",
                    "ph": "M",
                    "pid": rank,
                    "tid": tid,
                    "args": {
                        "name": {"step": "steps", "phase": "phases", "collective": "collectives", "data": "data wait"}[
                            track
                        ]
                    },
                }
            )
    return {
        "traceEvents": meta + events,
        "displayTimeUnit": "ms",
        "otherData": {"origin_epoch_s": t_origin, "ranks": len(ranks), "steps": len(chosen)},
    }


def _span(x: list) -> tuple:
    kind, name, t0, t1 = x[:4]
    ok = x[4] if len(x) > 4 else True
    nbytes = x[5] if len(x) > 5 else 0
    return kind, name, t0, t1, ok, nbytes


def write_chrome_trace(doc: dict[str, Any], path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, separators=(",", ":"))


class PerfettoExport(Export):
    """``telemetry export RUN_DIR --to FILE.json``: the run's timeline for ui.perfetto.dev."""

    suffixes = (".json",)
    needs_records = True

    def write(self, run: RunInput, path: str, first_step: int | None = None, last_step: int | None = None) -> str:
        doc = chrome_trace(run.records, run.hosts, first_step, last_step)
        write_chrome_trace(doc, path)
        return (
            f"wrote {len(doc['traceEvents'])} trace events ({doc['otherData']['ranks']} ranks, "
            f"{doc['otherData']['steps']} rank-steps) to {path}; open it in https://ui.perfetto.dev"
        )

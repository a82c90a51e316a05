"""A large Kineto trace for the memory comparison with HTA (``bench/hta_compare.py``): a source trace
repeated end to end until the file reaches ``--mb`` megabytes (uncompressed JSON), written as it goes.

    python bench/big_trace.py [--source tests/data/hta/nccl_data.json.gz] [--mb 1100] [--out bench/out/big.json]

Copy ``k`` of the source's events is shifted by ``k`` periods (the source's span rounded up to whole
µs, plus 1 ms), so the copies follow one another on one timeline; its ``ProfilerStep#N`` become
``ProfilerStep#(N + k * steps)`` (steps: the source's number of step ranges); its ``correlation``,
``External id``, ``Record function id``, ``Ev Idx`` and flow ids (``ac2g`` flows carry the
correlation; the others, ``fwdbwd``, their own sequence) are offset by ``k`` times (the source's
largest + 1), so that no two copies share one. Metadata events (``ph: M``) are written once, and the
profiler's ``Trace`` span once (last), stretched over all copies. Only the source (a few MB) is held in
memory; the output is written event by event.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import pathlib
import re
import sys
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
STEP = re.compile(r"^ProfilerStep#(\d+)$")
IDS = ("External id", "Record function id", "Ev Idx")
CORR_ARGS = ("correlation", "wait_on_cuda_event_record_corr_id")


def _load(path: str) -> dict[str, Any]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def _max_int(events: list[dict[str, Any]], get: Any) -> int:
    best = 0
    for e in events:
        v = get(e)
        if isinstance(v, int) and not isinstance(v, bool):
            best = max(best, v)
    return best


def write(source: str, out: str, mb: float) -> dict[str, Any]:
    """Write the repeated trace; return what was written (copies, bytes, events, steps)."""
    doc = _load(source)
    events = [e for e in doc.get("traceEvents", []) if isinstance(e, dict)]
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    timed = [e for e in events if e.get("ph") != "M" and isinstance(e.get("ts"), (int, float))]
    t0 = min(float(e["ts"]) for e in timed)
    t1 = max(float(e["ts"]) + float(e.get("dur") or 0) for e in timed)
    period = math.ceil(t1 - t0) + 1000  # whole µs: the fractional (ns) part of every ts is kept
    steps = sorted({int(m.group(1)) for e in events if (m := STEP.match(str(e.get("name", ""))))})
    nsteps = max(len(steps), 1)
    corr_off = 1 + max(_max_int(events, lambda e, k=k: _args(e).get(k)) for k in CORR_ARGS)
    corr_off = max(corr_off, 1 + _max_int([e for e in events if e.get("cat") == "ac2g"], lambda e: e.get("id")))
    id_off = {k: 1 + _max_int(events, lambda e, k=k: _args(e).get(k)) for k in IDS}
    flow_off = 1 + _max_int([e for e in events if "id" in e and e.get("cat") != "ac2g"], lambda e: e.get("id"))
    target = int(mb * 1e6)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    written = copies = n = 0
    with open(out, "w") as f:
        text = json.dumps(head)[:-1] + (', "traceEvents": [\n' if head else '"traceEvents": [\n')
        f.write(text)
        written += len(text)
        first = True
        while written < target:
            k = copies
            for e in events:
                if e.get("cat") == "Trace" or (k > 0 and e.get("ph") == "M"):
                    continue
                line = ("" if first else ",\n") + json.dumps(_shift(e, k, period, nsteps, corr_off, id_off, flow_off))
                first = False
                f.write(line)
                written += len(line)
                n += 1
            copies += 1
        for e in events:  # the profiler's span, once, over all the copies
            if e.get("cat") == "Trace":
                f.write(",\n" + json.dumps({**e, "dur": (copies - 1) * period + e.get("dur", 0)}))
                n += 1
        f.write("\n]}\n")
    return {
        "source": source,
        "out": out,
        "copies": copies,
        "bytes": os.path.getsize(out),
        "events": n,
        "steps": [s + k * nsteps for k in range(copies) for s in steps],
        "period_us": period,
    }


def _args(e: dict[str, Any]) -> dict[str, Any]:
    a = e.get("args")
    return a if isinstance(a, dict) else {}


def _shift(
    e: dict[str, Any], k: int, period: int, nsteps: int, corr_off: int, id_off: dict[str, int], flow_off: int
) -> dict[str, Any]:
    if k == 0:
        return dict(e)
    e2 = dict(e)
    ts = e.get("ts")
    if isinstance(ts, (int, float)) and not isinstance(ts, bool):
        e2["ts"] = ts + k * period
    name = e.get("name")
    if isinstance(name, str):
        m = STEP.match(name)
        if m:
            e2["name"] = f"ProfilerStep#{int(m.group(1)) + k * nsteps}"
    if "id" in e and isinstance(e["id"], int):
        e2["id"] = e["id"] + k * (corr_off if e.get("cat") == "ac2g" else flow_off)
    a = e.get("args")
    if isinstance(a, dict):
        a2 = dict(a)
        for key in CORR_ARGS:
            v = a.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                a2[key] = v + k * corr_off
        for key, off in id_off.items():
            v = a.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                a2[key] = v + k * off
        e2["args"] = a2
    return e2


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", default=str(ROOT / "tests" / "data" / "hta" / "nccl_data.json.gz"))
    ap.add_argument("--mb", type=float, default=1100.0, help="size to reach, in MB (1e6 bytes) of JSON")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "big_trace.json"))
    args = ap.parse_args()
    info = write(args.source, args.out, args.mb)
    info["steps"] = f"{info['steps'][0]}..{info['steps'][-1]}" if info["steps"] else "none"
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())

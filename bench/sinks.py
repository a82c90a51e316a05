"""What a thread per sink costs the pipeline thread, and what a blocked sink costs the others.

The pipeline hands each batch to every sink's worker (telemetry/pipeline/workers.py) instead of
calling the sinks itself. Measured side by side in one process, interleaved in rounds (the median):

- ``direct``: the old way, the pipeline thread calls each of three sinks' ``write`` in turn (through
  GuardedSink), on batches of ``--batch`` records;
- ``workers``: the same three sinks, each behind its SinkWorker; the time is the pipeline thread's
  (``write`` to each worker) plus, apart, the time until all three have delivered (settle);
- ``one blocked``: the same, with a fourth sink whose ``write`` never returns: the pipeline thread's
  time and the three others' delivery, which must not change.

The sinks do a realistic amount of work per record (a dict update and a small JSON encode, about the
run store's encoding). ``--out`` writes the section of bench/RESULTS.md.

    python bench/sinks.py [--records 20000] [--batch 50] [--rounds 5] [--out bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from results import update_section  # noqa: E402 - after the sys.path set-up above

from telemetry.pipeline.records import StepRecord  # noqa: E402 - after the sys.path set-up above
from telemetry.pipeline.sinks import GuardedSink, Sink  # noqa: E402 - after the sys.path set-up above
from telemetry.pipeline.workers import SinkWorker  # noqa: E402 - after the sys.path set-up above


class Encoding(Sink):
    """About the run store's work per record: a JSON line."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.count = 0
        self.bytes = 0

    def write(self, records):
        for r in records:
            self.bytes += len(json.dumps([r.step, r.start_s, r.duration_s, r.phases]))
            self.count += 1


class Blocked(Sink):
    name = "blocked"

    def __init__(self) -> None:
        self.release = threading.Event()

    def write(self, records):
        self.release.wait()


def records(n: int) -> list[StepRecord]:
    phases = {"forward": 0.01, "backward": 0.02, "optimizer": 0.003}
    return [StepRecord(0, i, 1.7e9 + i, 0.04, True, phases, {}, 0.0, {}, None, None, {}, ()) for i in range(n)]


def direct(batches: list, sinks: list[GuardedSink]) -> float:
    t0 = time.perf_counter()
    for b in batches:
        for s in sinks:
            s.write(b)
    return time.perf_counter() - t0


def through_workers(batches: list, workers: list[SinkWorker], delivered: list[SinkWorker]) -> tuple[float, float]:
    t0 = time.perf_counter()
    for b in batches:
        for w in workers:
            w.write(b)
    handed = time.perf_counter() - t0
    for w in delivered:
        w.settle(time.monotonic() + 120)
    return handed, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    recs = records(args.records)
    batches = [recs[i : i + args.batch] for i in range(0, len(recs), args.batch)]
    big = args.records + 1  # backlog: room for everything, so the comparison is of the hand-off only
    res: dict[str, list[float]] = {"direct": [], "workers": [], "workers_done": [], "blocked": [], "blocked_done": []}
    blocked = Blocked()
    for _ in range(args.rounds):
        res["direct"].append(direct(batches, [GuardedSink(Encoding(f"s{i}")) for i in range(3)]))
        ws = [SinkWorker(GuardedSink(Encoding(f"s{i}")), big, 0.5) for i in range(3)]
        handed, done = through_workers(batches, ws, ws)
        res["workers"].append(handed)
        res["workers_done"].append(done)
        ws = [SinkWorker(GuardedSink(Encoding(f"s{i}")), big, 0.5) for i in range(3)]
        stuck = SinkWorker(GuardedSink(blocked), 1000, 0.5)
        handed, done = through_workers(batches, ws + [stuck], ws)
        res["blocked"].append(handed)
        res["blocked_done"].append(done)
        for w in ws:
            w.close(time.monotonic() + 5)
    blocked.release.set()
    us = {k: statistics.median(v) / args.records * 1e6 for k, v in res.items()}
    lines = [
        f"{args.records:,} step records in batches of {args.batch}, three sinks that JSON-encode each record, "
        f"median of {args.rounds} interleaved rounds; microseconds per record. Python {platform.python_version()}, "
        f"{os.cpu_count()} cores (`python bench/sinks.py`).",
        "",
        "| how the pipeline thread hands records to the sinks | pipeline thread, us/record | until all delivered, us/record |",
        "|---|---:|---:|",
        f"| calls each sink itself (before) | {us['direct']:.2f} | {us['direct']:.2f} |",
        f"| a worker thread per sink (now) | {us['workers']:.2f} | {us['workers_done']:.2f} |",
        f"| a worker per sink, a fourth sink blocked forever | {us['blocked']:.2f} | {us['blocked_done']:.2f} |",
        "",
        "The pipeline thread's own cost falls (it hands a batch over instead of encoding it three times); "
        "delivery costs the same work on other threads (one GIL: two cores do not make it faster). A sink "
        "blocked forever changes neither figure: its backlog fills to its bound and the rest is dropped "
        "and counted. No figure is on the training thread: the hot path does not change (bench/overhead.py).",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        update_section(args.out, "Sinks on threads of their own (bench/sinks.py)", text)


if __name__ == "__main__":
    main()

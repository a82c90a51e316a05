"""A one-rank training job with one sink blocked for real, for tests/integration/test_blocking_sinks.py.

    python -m tests.helpers.sink_job --run-dir DIR --port P --steps N --block store|plugin [--plugin-dir D]

``--block store``: after init, the rank's run-store tail is replaced by a FIFO that nobody reads, so
the store's next ``open()`` of it blocks in the kernel, for good. ``--block plugin``: a third-party
sink installed through the ``training_telemetry.sinks`` entry point (a distribution under
``--plugin-dir``, on PYTHONPATH) sends each batch to a loopback server that accepts and never
answers, and waits for a reply that never comes. The job prints ``done`` after its last step and
waits for a line on stdin; then it shuts down and prints one JSON line: the shutdown's duration and
``telemetry.shutdown()``'s counters.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time

import telemetry


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--block", choices=("store", "plugin"), required=True)
    ap.add_argument("--shutdown-timeout", type=float, default=2.0)
    args = ap.parse_args()
    sinks = ["store", "prometheus"] + (["blocking"] if args.block == "plugin" else [])
    telemetry.init(
        run_dir=args.run_dir,
        job="blocked",
        sinks=sinks,
        prometheus_port=args.port,
        flush_interval_s=0.1,
        shutdown_timeout_s=args.shutdown_timeout,
        online=False,
        announce=False,
        device_interval_s=0,
    )
    if args.block == "store":
        [tail] = glob.glob(os.path.join(args.run_dir, "ranks", "rank-00000.tail-*.jsonl"))
        os.unlink(tail)
        os.mkfifo(tail)  # no reader: the writer's next open() of it blocks in the kernel
    for _ in range(args.steps):
        with telemetry.step(samples=1):
            with telemetry.phase("forward"):
                time.sleep(0.005)
    print("done", flush=True)
    sys.stdin.readline()
    t0 = time.monotonic()
    stats = telemetry.shutdown()
    print(json.dumps({"shutdown_s": time.monotonic() - t0, "stats": stats}, default=str), flush=True)
    os._exit(0)  # the blocked sink's thread is a daemon; nothing else is left to wait for


if __name__ == "__main__":
    main()

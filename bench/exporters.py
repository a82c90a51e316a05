"""Exporter costs (run by `make bench`).

1. /metrics render time for one rank with the default series after realistic steps (3 phases,
   data wait, one all_reduce per step, a logged loss); series count per rank. Target <= 5 ms.
2. Pipeline-thread cost per step of the OTLP sink (spans built, queued; export off-thread).
3. The same ~15 ms training loop with the OTLP endpoint healthy and blackholed (accepts
   connections, never answers), interleaved rounds: step times must be equal.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from results import update_section  # noqa: E402 - after the sys.path set-up above

import telemetry  # noqa: E402 - after the sys.path set-up above
from telemetry.config import Config  # noqa: E402 - after the sys.path set-up above
from telemetry.pipeline.records import SPAN_COLLECTIVE, SPAN_DATA, SPAN_PHASE, OpStats, Span, StepRecord  # noqa: E402 - after the sys.path set-up above
from telemetry.rank import RankContext  # noqa: E402 - after the sys.path set-up above
from tests.helpers.otlp_receiver import Blackhole, Receiver  # noqa: E402 - after the sys.path set-up above


def record(step: int) -> StepRecord:
    t = 1.8e9 + step * 0.015
    spans = (
        Span(SPAN_DATA, "data", t - 0.001, t),
        Span(SPAN_PHASE, "forward", t, t + 0.004),
        Span(SPAN_PHASE, "backward", t + 0.004, t + 0.012),
        Span(SPAN_COLLECTIVE, "all_reduce", t + 0.009, t + 0.012, True, 4 << 20),
        Span(SPAN_PHASE, "optimizer", t + 0.012, t + 0.015),
    )
    return StepRecord(
        rank=0,
        step=step,
        start_s=t,
        duration_s=0.015,
        ok=True,
        phases={"data": 0.001, "forward": 0.004, "backward": 0.008, "optimizer": 0.003},
        phase_comm={"backward": 0.003},
        comm_s=0.003,
        ops={"all_reduce": OpStats(1, 0.003, 0.003, 4 << 20, 1.5 * (4 << 20))},
        tokens=4096,
        samples=8,
        scalars={"loss": 2.5, "lr": 1e-3},
        spans=spans,
    )


def prometheus_render(tmp: str) -> dict[str, float]:
    from prometheus_client import generate_latest
    from prometheus_client.openmetrics.exposition import generate_latest as generate_om

    from telemetry.exporters.prometheus import PrometheusSink
    from tests.helpers.servers import free_port

    cfg = Config.resolve(
        {"run_dir": tmp, "job": "bench", "prometheus_port": free_port(), "prometheus_sd_dir": "off"}, environ={}
    )
    # every step traced, so that the OpenMetrics page carries an exemplar on each bucket it fills
    sink = PrometheusSink(cfg, RankContext.from_env({}), {"stats": dict, "trace_sampler": lambda: lambda r: True})
    try:
        for i in range(200):
            sink.write([record(i)])
        text = generate_latest(sink.registry).decode()
        n_series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        times, om_times = [], []
        for _ in range(200):
            t0 = time.perf_counter()
            generate_latest(sink.registry)
            times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            generate_om(sink.registry)
            om_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for i in range(200, 1200):
            sink.write([record(i)])
        write_us = (time.perf_counter() - t0) / 1000 * 1e6
    finally:
        sink.close(1.0)
    return {
        "series": n_series,
        "render_ms": statistics.median(times) * 1e3,
        "render_om_ms": statistics.median(om_times) * 1e3,
        "write_us": write_us,
    }


def otlp_cost() -> dict[str, float]:
    from opentelemetry.sdk.trace.export import SpanExportResult

    from telemetry.exporters.otlp import OtlpSink

    class Null:
        def export(self, batch):
            return SpanExportResult.SUCCESS

        def shutdown(self):
            pass

    cfg = Config.resolve({"job": "bench", "otlp_endpoint": "http://127.0.0.1:1"}, environ={})
    sink = OtlpSink(cfg, RankContext.from_env({}), {}, exporter=Null())
    for i in range(50):
        sink.write([record(i)])
    t0 = time.perf_counter()
    n = 1000
    for i in range(50, 50 + n):
        sink.write([record(i)])
    per_step = (time.perf_counter() - t0) / n
    sink.close(2.0)
    return {"per_step_us": per_step * 1e6, "spans_per_step": 6}


def loop_with_endpoint(url: str, steps: int, tmp: str, tag: str) -> float:
    sys.path.insert(0, HERE)
    from overhead import build_loop

    _, instrumented = build_loop()
    telemetry.init(
        run_dir=os.path.join(tmp, tag),
        job=f"bench-{tag}",
        sinks=["store", "otlp"],
        otlp_endpoint=url,
        shutdown_timeout_s=1.0,
        flush_interval_s=0.1,
    )
    instrumented(5)
    t0 = time.perf_counter()
    instrumented(steps)
    per_step = (time.perf_counter() - t0) / steps
    telemetry.shutdown()
    return per_step


def blackhole_vs_healthy(tmp: str, rounds: int, steps: int) -> dict[str, float]:
    healthy, dead = [], []
    with Receiver() as ok, Blackhole() as hole:
        for r in range(rounds):
            order = [("ok", ok.url), ("dead", hole.url)]
            if r % 2:
                order.reverse()
            for tag, url in order:
                t = loop_with_endpoint(url, steps, tmp, f"{tag}{r}")
                (healthy if tag == "ok" else dead).append(t)
    return {
        "healthy_ms": statistics.median(healthy) * 1e3,
        "blackhole_ms": statistics.median(dead) * 1e3,
        "ratio": statistics.median(dead) / statistics.median(healthy),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        prom = prometheus_render(tmp)
        otlp = otlp_cost()
        bh = blackhole_vs_healthy(tmp, args.rounds, args.steps)
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()} (`python bench/exporters.py`).",
        "",
        "| figure | value | target |",
        "|---|---|---|",
        f"| series per rank (defaults: 4 phases, 1 collective op, 2 logged names; `_created` included) | {prom['series']} | bounded |",
        f"| /metrics render, text format (median of 200) | {prom['render_ms']:.2f} ms | <= 5 ms |",
        f"| /metrics render, OpenMetrics with exemplars | {prom['render_om_ms']:.2f} ms | <= 5 ms |",
        f"| Prometheus sink, pipeline-thread cost per step record | {prom['write_us']:.0f} us | |",
        f"| OTLP sink, pipeline-thread cost per step ({otlp['spans_per_step']} spans, export off-thread) | {otlp['per_step_us']:.0f} us | |",
        f"| step time, OTLP endpoint healthy ({args.rounds} rounds x {args.steps} steps) | {bh['healthy_ms']:.2f} ms | |",
        f"| step time, OTLP endpoint blackholed | {bh['blackhole_ms']:.2f} ms | equal |",
        f"| ratio blackholed / healthy | {bh['ratio']:.4f} | 1.00 +- noise |",
        "",
        "Label values are capped at `max_label_values` (default 32) per label and rank: at most 32 phases, 32 ops",
        "and 32 logged names; each phase adds 19 series (15 buckets, +Inf, sum, count, created), each op 27.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        update_section(args.out, "Exporters (bench/exporters.py)", text)


if __name__ == "__main__":
    main()

"""Prometheus series per rank, measured on a real demo rank's /metrics (4 gloo ranks, CPU): the
number that sizes a Prometheus for 1,000 or 10,000 ranks (docs/scale.md). Counted at each
``metrics_level`` (full, phase, job: TELEMETRY_METRICS_LEVEL in the ranks' environment), and at full
with prometheus-client's `_created` series turned off (PROMETHEUS_DISABLE_CREATED_SERIES=True).
In process, the same exporter at the label caps and fed demo-like steps (:class:`RankExporter`, which
bench/scrape_load.py serves as each simulated rank's exposition).

    python bench/series.py [--out bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)  # first: the exporters package, not bench/exporters.py

from results import update_section  # noqa: E402 - after the sys.path set-up above

from tests.helpers.servers import free_port, free_port_range  # noqa: E402 - after the sys.path set-up above

LEVELS = ("full", "phase", "job")  # as telemetry.metrics.names.LEVELS, most detail first

# The host readings a CPU demo rank exports (devices/sampler.py, sched.py; a watched dataset's fetches).
DEMO_DEVICE = {
    "process_cpu_seconds": 10.0,
    "process_cpu_ratio": 0.9,
    "process_resident_memory_bytes": 4e8,
    "cpu_running_ratio": 0.8,
    "cpu_runqueue_wait_ratio": 0.1,
    "cpu_runqueue_wait_seconds": 1.0,
    "cpu_throttled_ratio": 0.0,
    "cpu_throttled_seconds": 0.0,
    "cpu_throttled_periods": 0.0,
    "cpu_pressure_some_ratio": 0.2,
    "input_fetch_seconds": 1.0,
    "input_fetched_items": 100.0,
    "input_workers": 1.0,
}
# A GPU's readings, for the rank at the label caps.
GPU_DEVICE = {
    "gpu_utilization_ratio": 0.9,
    "gpu_memory_used_bytes": 6e10,
    "gpu_memory_total_bytes": 8e10,
    "gpu_temperature_celsius": 70.0,
    "gpu_power_watts": 500.0,
    "gpu_sm_clock_hertz": 1.9e9,
    "gpu_sm_activity_ratio": 0.8,
    "gpu_ecc_errors_corrected": 0.0,
    "gpu_pcie_replays": 0.0,
    "gpu_xid_errors": 0.0,
    "process_cpu_ratio": 1.0,
    "process_resident_memory_bytes": 4e9,
}


def scrape(url: str) -> list[str]:
    with urllib.request.urlopen(url, timeout=5) as r:
        return [line for line in r.read().decode().splitlines() if line and not line.startswith("#")]


def count(lines: list[str]) -> dict:
    names = Counter(line.split("{")[0].split(" ")[0] for line in lines)
    return {
        "series": len(lines),
        "created": sum(n for k, n in names.items() if k.endswith("_created")),
        "buckets": sum(n for k, n in names.items() if k.endswith("_bucket")),
        "families": len(names),
    }


def measure(extra_env: dict[str, str], ranks: tuple[int, ...] = (0, 1)) -> dict[int, dict]:
    """Series of ranks of a real 4-rank demo (rank 0 also exports online detection's scores and
    findings), each scraped after its first steps."""
    import pathlib

    from tests.helpers.runs import stop_demo

    base = free_port_range(4)
    out: dict[int, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = pathlib.Path(tmp) / "run"
        env = {**os.environ, "TELEMETRY_PROMETHEUS_PORT": str(base), **extra_env}
        demo = subprocess.Popen(
            [sys.executable, "-m", "telemetry", "demo", "--steps", "100000", "--run-dir", str(run_dir)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and len(out) < len(ranks):
                for rank in ranks:
                    try:
                        lines = scrape(f"http://127.0.0.1:{base + rank}/metrics")
                    except OSError:
                        continue
                    stepped = any(line.startswith("train_steps_total") and not line.endswith(" 0.0") for line in lines)
                    # rank 0: once online detection has analyzed (its findings and scores are exported)
                    analyzed = rank != 0 or any(line.startswith("train_findings{") for line in lines)
                    if rank not in out and stepped and analyzed:
                        out[rank] = {}
                time.sleep(0.5)
            time.sleep(3)  # some steps, collectives, a device reading and an online analysis on each
            for rank in ranks:
                out[rank] = count(scrape(f"http://127.0.0.1:{base + rank}/metrics"))
        finally:
            stop_demo(demo, run_dir)
    return out


def demo_like_record(step: int, rank: int = 1, phases: int = 0, ops: int = 0, names: int = 0, device=None):
    """One step record shaped like a demo rank's (phases forward, backward, optimizer and the data wait;
    one all_reduce in the world group; a logged loss; tokens, samples, a watched batch, host readings),
    or with ``phases`` / ``ops`` / ``names`` of each instead (the label caps)."""
    from telemetry.pipeline.records import SPAN_COLLECTIVE, OpStats, Span, StepRecord

    t = 1.8e9 + step * 0.5
    phase_names = [f"phase{i}" for i in range(phases)] if phases else ["forward", "backward", "optimizer"]
    op_names = [f"op{i}" for i in range(ops)] if ops else ["all_reduce"]
    return StepRecord(
        rank=rank,
        step=step,
        start_s=t,
        duration_s=0.05 + 0.001 * (step % 7),
        ok=True,
        phases={"data": 0.002, **{p: 0.01 + 0.0001 * (step % 5) for p in phase_names}},
        phase_comm={phase_names[1 % len(phase_names)]: 0.004},
        comm_s=0.004,
        ops={op: OpStats(1, 0.004, 0.004, 1 << 20, 1.5 * (1 << 20)) for op in op_names},
        tokens=4096,
        samples=8,
        scalars={f"metric{i}": 1.0 for i in range(names)} if names else {"loss": 2.0 - step * 1e-4},
        spans=tuple(Span(SPAN_COLLECTIVE, op, t + 0.03, t + 0.034, group="world") for op in op_names),
        device={**(device or DEMO_DEVICE), "process_cpu_seconds": 10.0 + step * 0.05},
        comm_groups={"world": (0.004, 1 << 20)},
        io={"input_ready": 1.0, "read_bytes": 65536.0},
    )


class RankExporter:
    """One rank's Prometheus sink, in this process (its own port, closed by :meth:`close`), fed records;
    :meth:`render` is its /metrics body as a scrape gets it."""

    def __init__(self, level: str = "full", rank: int = 1, job: str = "scale", caps: int = 32) -> None:
        from telemetry.config import Config
        from telemetry.exporters.prometheus import PrometheusSink
        from telemetry.rank import RankContext

        self._tmp = tempfile.TemporaryDirectory()
        cfg = Config.resolve(
            {
                "run_dir": self._tmp.name,
                "job": job,
                "prometheus_port": free_port(),
                "prometheus_sd_dir": "off",
                "max_label_values": caps,
                "metrics_level": level,
            },
            environ={},
        )
        ctx = RankContext.from_env({"RANK": str(rank), "LOCAL_RANK": "0", "WORLD_SIZE": str(rank + 1)})
        # a demo rank's session counters: two sinks' drops, the captures by outcome
        stats = {"events_dropped": 0, "sinks": {"store": {"dropped": 0}, "prometheus": {"dropped": 0}}}
        stats.update({f"captures_{k}": 0 for k in ("planned", "taken", "missed", "skipped", "failed")})
        self.sink = PrometheusSink(cfg, ctx, {"stats": lambda: stats})
        self.step = 0

    def feed(self, steps: int, **shape) -> None:
        rank = self.sink.ctx.rank
        self.sink.write([demo_like_record(self.step + i, rank, **shape) for i in range(steps)])
        self.step += steps

    def render(self) -> str:
        from prometheus_client import generate_latest

        return generate_latest(self.sink.registry).decode()

    def close(self) -> None:
        self.sink.close(1.0)
        self._tmp.cleanup()


def in_process(level: str, caps: int = 0) -> dict:
    """Series of the in-process exporter fed 50 demo-like steps (or at the label caps, with a GPU), the
    median time to render /metrics and its size."""
    exp = RankExporter(level, caps=max(caps, 32))
    try:
        shape = {"phases": caps, "ops": caps, "names": caps, "device": GPU_DEVICE} if caps else {}
        exp.feed(50, **shape)
        text = exp.render()
        times = []
        for _ in range(50):
            t0 = time.perf_counter()
            exp.render()
            times.append(time.perf_counter() - t0)
    finally:
        exp.close()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    return {**count(lines), "render_ms": statistics.median(times) * 1e3, "bytes": len(text)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    both = {level: measure({"TELEMETRY_METRICS_LEVEL": level}) for level in LEVELS}
    demo = {level: both[level][0] for level in LEVELS}
    demo1 = {level: both[level][1] for level in LEVELS}
    no_created = measure({"PROMETHEUS_DISABLE_CREATED_SERIES": "True"}, ranks=(0,))[0]
    like = {level: in_process(level) for level in LEVELS}
    caps = {level: in_process(level, caps=32) for level in LEVELS}
    full = demo["full"]["series"]
    rows = [
        f"| {level} | {demo[level]['series']} | {demo1[level]['series']} | {demo[level]['buckets']} | "
        f"{demo[level]['created']} | {like[level]['series']} | {caps[level]['series']:,} | "
        f"{caps[level]['render_ms']:.1f} ms, {caps[level]['bytes'] / 1024:.0f} KiB | "
        f"{demo1[level]['series'] * 1000:,} | {demo1[level]['series'] * 10000:,} |"
        for level in LEVELS
    ]
    body = "\n".join(
        [
            f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()}, Python {platform.python_version()} "
            "(`python bench/series.py`): ranks 0 and 1 of a 4-rank CPU demo (phases forward, backward, optimizer; "
            "one collective op, all_reduce, in the world group; host readings, no GPU; rank 0 also exports "
            "online detection's scores and findings), scraped after their first steps, at each `metrics_level` "
            "(`TELEMETRY_METRICS_LEVEL`); in process, the same exporter fed 50 demo-like steps, and at the label "
            "caps (32 phases, 32 collective ops, 32 logged names, a GPU's readings).",
            "",
            "| metrics_level | demo rank 0 | demo rank 1 | of rank 0: buckets | of rank 0: `_created` | "
            "in process, demo-like | at the caps | render and size at the caps | 1,000 ranks (rank 1's) | "
            "10,000 ranks |",
            "|---|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"With PROMETHEUS_DISABLE_CREATED_SERIES=True (full): rank 0 {no_created['series']} series "
            f"({no_created['created']} `_created`, against {demo['full']['created']}). `phase` leaves out the per-op "
            f"and per-group families (keeping the two per-op counters the bus-bandwidth record reads), `job` also "
            f"the per-phase families and the logged values: at the demo's shape {full} -> {demo['phase']['series']} "
            f"-> {demo['job']['series']} series on rank 0.",
            "",
            "Counted from the exporter's definitions (default buckets: 15 for steps and phases, 17 for collectives; "
            "`_created` included): at full each further phase adds 21 series (its histogram, and the time blocked in "
            "collectives inside it with its `_created`), each further collective op 31 (a 21-series histogram, four "
            "counters with their `_created`, two gauges; at phase and job 4: two counters with their `_created`), "
            "and a GPU rank up to 25 per GPU (12 gauges and counters, 2 ECC types, 9 clock-event reasons, 2 NVLink "
            "directions) where NVML supports them all, at every level. The label caps (`max_label_values`, 32 "
            "values per label) bound phases and ops. A Prometheus scraping every 15 s takes series / 15 samples/s: "
            f"at rank 1's full {demo1['full']['series']}, 10,000 ranks are "
            f"{demo1['full']['series'] * 10000 / 15:,.0f} samples/s; at job {demo1['job']['series'] * 10000 / 15:,.0f}. "
            "Each rank spends about the render time per scrape on its own exporter thread (never the training "
            "thread).",
        ]
    )
    print(body)
    if args.out:
        update_section(args.out, "Prometheus series per rank (bench/series.py)", body)


if __name__ == "__main__":
    main()

"""Prometheus series per rank, measured on a real demo rank's /metrics (4 gloo ranks, CPU): the
number that sizes a Prometheus for 1,000 or 10,000 ranks (README, "At scale"). Counted twice: as
shipped, and with prometheus-client's `_created` series turned off
(PROMETHEUS_DISABLE_CREATED_SERIES=True in the ranks' environment).

    python bench/series.py [--out bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
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

from tests.helpers.servers import free_port_range  # noqa: E402 - after the sys.path set-up above


def scrape(url: str) -> list[str]:
    with urllib.request.urlopen(url, timeout=5) as r:
        return [line for line in r.read().decode().splitlines() if line and not line.startswith("#")]


def measure(extra_env: dict[str, str]) -> dict:
    base = free_port_range(4)
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TELEMETRY_PROMETHEUS_PORT": str(base), **extra_env}
        demo = subprocess.Popen(
            [sys.executable, "-m", "telemetry", "demo", "--steps", "100000", "--run-dir", os.path.join(tmp, "run")],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 120
            lines: list[str] = []
            while time.monotonic() < deadline:
                try:
                    lines = scrape(f"http://127.0.0.1:{base}/metrics")
                    if any(line.startswith("train_steps_total") and not line.endswith(" 0.0") for line in lines):
                        time.sleep(3)  # some steps, collectives and a device reading
                        lines = scrape(f"http://127.0.0.1:{base}/metrics")
                        break
                except OSError:
                    pass
                time.sleep(0.5)
        finally:
            demo.send_signal(signal.SIGTERM)
            demo.wait(60)
    names = Counter(line.split("{")[0].split(" ")[0] for line in lines)
    return {
        "series": len(lines),
        "created": sum(n for k, n in names.items() if k.endswith("_created")),
        "buckets": sum(n for k, n in names.items() if k.endswith("_bucket")),
        "families": len(names),
    }


def at_caps(caps: int = 32) -> dict:
    """In process: one rank's exporter fed steps with ``caps`` phases, collective ops and logged names
    (the label caps), and a GPU's readings: its series and the median time to render /metrics."""
    import statistics

    from prometheus_client import generate_latest

    from telemetry.config import Config
    from telemetry.exporters.prometheus import PrometheusSink
    from telemetry.pipeline.records import OpStats, StepRecord
    from telemetry.rank import RankContext
    from tests.helpers.servers import free_port

    gpu = {
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
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Config.resolve(
            {
                "run_dir": tmp,
                "job": "caps",
                "prometheus_port": free_port(),
                "prometheus_sd_dir": "off",
                "max_label_values": caps,
            },
            environ={},
        )
        sink = PrometheusSink(cfg, RankContext.from_env({}), {"stats": dict})
        try:
            for s in range(50):
                sink.write(
                    [
                        StepRecord(
                            rank=0,
                            step=s,
                            start_s=1.8e9 + s,
                            duration_s=0.5,
                            ok=True,
                            phases={f"phase{i}": 0.01 for i in range(caps)},
                            phase_comm={},
                            comm_s=0.1,
                            ops={f"op{i}": OpStats(1, 0.003, 0.003, 1 << 20, 1.5 * (1 << 20)) for i in range(caps)},
                            tokens=4096,
                            samples=8,
                            scalars={f"metric{i}": 1.0 for i in range(caps)},
                            spans=(),
                            device=gpu,
                        )
                    ]
                )
            text = generate_latest(sink.registry).decode()
            series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
            times = []
            for _ in range(50):
                t0 = time.perf_counter()
                generate_latest(sink.registry)
                times.append(time.perf_counter() - t0)
        finally:
            sink.close(1.0)
    return {"series": series, "render_ms": statistics.median(times) * 1e3, "bytes": len(text)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    shipped = measure({})
    no_created = measure({"PROMETHEUS_DISABLE_CREATED_SERIES": "True"})
    caps = at_caps()
    demo_ms = at_caps(3)
    body = "\n".join(
        [
            f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()}, Python {platform.python_version()} "
            "(`python bench/series.py`): rank 0 of a 4-rank CPU demo (phases forward, backward, optimizer; one "
            "collective op, all_reduce; host readings, no GPU), scraped after its first steps.",
            "",
            "| exporter | series per rank | of which histogram buckets | of which `_created` |",
            "|---|---|---|---|",
            f"| as shipped | {shipped['series']} | {shipped['buckets']} | {shipped['created']} |",
            f"| PROMETHEUS_DISABLE_CREATED_SERIES=True | {no_created['series']} | {no_created['buckets']} | "
            f"{no_created['created']} |",
            "",
            "Counted from the exporter's definitions (default buckets: 15 for steps and phases, 17 for collectives; "
            "`_created` included): each further phase adds 21 series (its histogram, and the time blocked in collectives inside it with "
            "its `_created`), each further collective op "
            "31 (a 21-series histogram, four counters with their `_created`, two gauges), and a GPU rank up to 25 "
            "per GPU (12 gauges and counters, 2 ECC types, 9 clock-event reasons, 2 NVLink directions) where NVML "
            "supports them all. The label caps (`max_label_values`, 32 values per label) bound phases and ops.",
            "",
            f"**At the label caps** (in process: 32 phases, 32 collective ops, 32 logged names and a GPU's readings on "
            f"one rank): {caps['series']:,} series, /metrics {caps['bytes'] / 1024:.0f} KiB, rendered in "
            f"{caps['render_ms']:.1f} ms (median of 50); with 3 of each, {demo_ms['series']} series in "
            f"{demo_ms['render_ms']:.1f} ms. A Prometheus scraping every 15 s: at the demo's {shipped['series']} series, "
            f"1,000 ranks are {shipped['series'] * 1000:,} series ({shipped['series'] * 1000 / 15:,.0f} samples/s) and "
            f"10,000 ranks {shipped['series'] * 10000:,} ({shipped['series'] * 10000 / 15:,.0f} samples/s); at the caps "
            f"{caps['series'] * 1000:,} and {caps['series'] * 10000:,}. Each rank spends about the render time per "
            f"scrape on its own exporter thread (never the training thread).",
        ]
    )
    print(body)
    if args.out:
        update_section(args.out, "Prometheus series per rank (bench/series.py)", body)


if __name__ == "__main__":
    main()

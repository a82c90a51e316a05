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
sys.path.insert(0, os.path.join(ROOT, "tests"))

from results import update_section  # noqa: E402
from servers import free_port_range  # noqa: E402


def scrape(url: str) -> list[str]:
    with urllib.request.urlopen(url, timeout=5) as r:
        return [line for line in r.read().decode().splitlines() if line and not line.startswith("#")]


def measure(extra_env: dict[str, str]) -> dict:
    base = free_port_range(4)
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TELEMETRY_PROMETHEUS_PORT": str(base), **extra_env}
        demo = subprocess.Popen([sys.executable, "-m", "telemetry", "demo", "--steps", "100000", "--run-dir",
                                 os.path.join(tmp, "run")], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
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
    return {"series": len(lines), "created": sum(n for k, n in names.items() if k.endswith("_created")),
            "buckets": sum(n for k, n in names.items() if k.endswith("_bucket")), "families": len(names)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    shipped = measure({})
    no_created = measure({"PROMETHEUS_DISABLE_CREATED_SERIES": "True"})
    body = "\n".join([
        f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()}, Python {platform.python_version()} "
        "(`python bench/series.py`): rank 0 of a 4-rank CPU demo (phases forward, backward, optimizer; one "
        "collective op, all_reduce; host readings, no GPU), scraped after its first steps.", "",
        "| exporter | series per rank | of which histogram buckets | of which `_created` |", "|---|---|---|---|",
        f"| as shipped | {shipped['series']} | {shipped['buckets']} | {shipped['created']} |",
        f"| PROMETHEUS_DISABLE_CREATED_SERIES=True | {no_created['series']} | {no_created['buckets']} | "
        f"{no_created['created']} |", "",
        "Counted from the exporter's definitions (default buckets: 15 for steps and phases, 17 for collectives; "
        "`_created` included): each further phase adds 19 series (its histogram), each further collective op "
        "31 (a 21-series histogram, four counters with their `_created`, two gauges), and a GPU rank up to 25 "
        "per GPU (12 gauges and counters, 2 ECC types, 9 clock-event reasons, 2 NVLink directions) where NVML "
        "supports them all. The label caps (`max_label_values`, 32 values per label) bound phases and ops.",
    ])
    print(body)
    if args.out:
        update_section(args.out, "Prometheus series per rank (bench/series.py)", body)


if __name__ == "__main__":
    main()

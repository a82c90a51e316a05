"""A real ``telemetry demo`` scraped by a real Prometheus, read both ways: from its run store and from
the server (tests/integration/test_prometheus_parity.py and bench/prometheus_parity.py).

:func:`scraped_demo` runs the demo to its end with a Prometheus scraping every rank each second
(file_sd over the run's targets, as the README configures it); :func:`both_ways` analyzes the run
directory and the server's view of the same job, and :func:`parity` holds them side by side: the
findings (kind, ranks, phase) at warning or above, their onsets in windows, and the goodput split.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np

from tests.helpers.paths import ROOT
from tests.helpers.servers import free_port_range, prometheus, training_scrape_config

ACTED_ON = ("warning", "critical")


@contextlib.contextmanager
def scraped_demo(tmp_path, *inject: str, ranks: int = 4, steps: int = 400, name: str = "parity", timeout: float = 300):
    """Run the demo (each ``inject`` a --inject SPEC) to its end, scraped every second; yields
    (Prometheus URL, run directory, the demo's end in epoch s, its findings JSON) with the server
    still up."""
    import json

    runs = tmp_path / "runs"
    run_dir = runs / name
    with prometheus(tmp_path, training_scrape_config(runs / "prometheus_targets")) as prom:
        env = {**os.environ, "TELEMETRY_PROMETHEUS_PORT": str(free_port_range(ranks))}
        args = [sys.executable, "-m", "telemetry", "demo", "--ranks", str(ranks), "--steps", str(steps)]
        for spec in inject:
            args += ["--inject", spec]
        proc = subprocess.run(
            [*args, "--run-dir", str(run_dir), "--json"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        end = time.time()
        assert proc.returncode == 0, proc.stderr[-3000:]
        yield prom.url, run_dir, end, json.loads(proc.stdout)


def both_ways(url: str, run_dir, end: float, window_s: float) -> tuple[Any, Any, Any]:
    """(the run store's analysis, the Prometheus analysis, the Prometheus RunInput) of one job."""
    from telemetry.analysis import analyze_run
    from telemetry.analysis.inputs.load import open_input
    from telemetry.analysis.inputs.prometheus.live import open_live
    from telemetry.analysis.run import analyze_live

    store = analyze_run(str(run_dir))
    run = open_live(url, os.path.basename(str(run_dir)), window_s=window_s, now=end)
    assert len(open_input(str(run_dir)).table)
    return store, analyze_live(run), run


def acted_on(analysis: Any) -> list[tuple[str, tuple[int, ...], str | None]]:
    """The findings a user acts on, as (kind, ranks, phase), sorted."""
    return sorted((f.kind, tuple(f.ranks), f.phase) for f in analysis.findings if f.severity in ACTED_ON)


def window_of(steps: np.ndarray, step: int) -> int:
    """The index of the window (its step: the job's last at its end) that holds ``step``."""
    return int(np.searchsorted(steps, step, side="left"))


def parity(store: Any, prom: Any) -> dict[str, Any]:
    """What the two analyses say alike and apart: each source's acted-on findings, for each finding
    of the store the window its onset falls in against the window of Prometheus's onset, and the
    goodput parts' shares in points (percent of the run's time)."""
    steps = np.asarray(prom.matrix.steps) if prom.matrix is not None else np.array([], dtype=int)
    onsets = []
    for f in store.findings:
        if f.severity not in ACTED_ON:
            continue
        match = [g for g in prom.findings if (g.kind, g.ranks, g.phase) == (f.kind, f.ranks, f.phase)]
        if match and f.first_step is not None and match[0].first_step is not None:
            onsets.append(
                {
                    "finding": (f.kind, tuple(f.ranks), f.phase),
                    "store_step": f.first_step,
                    "prometheus_step": match[0].first_step,
                    "windows_apart": window_of(steps, match[0].first_step) - window_of(steps, f.first_step),
                }
            )
    a, b = store.summary.get("goodput") or {}, prom.summary.get("goodput") or {}
    points = {k: round(100 * (b.get(k, 0.0) - a.get(k, 0.0)), 1) for k in sorted(set(a) | set(b))}

    def every(a: Any) -> list[tuple]:
        return [(f.kind, tuple(f.ranks), f.phase, f.severity, f.first_step, round(f.slowdown, 3)) for f in a.findings]

    return {
        "windows": steps.tolist(),
        "store_all": every(store),
        "prometheus_all": every(prom),
        "store": acted_on(store),
        "prometheus": acted_on(prom),
        "onsets": onsets,
        "goodput_store": a,
        "goodput_prometheus": b,
        "goodput_points_apart": points,
    }

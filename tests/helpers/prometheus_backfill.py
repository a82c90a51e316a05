"""Two training jobs' metrics over the last 40 minutes, backfilled into a real Prometheus (the
Prometheus source's integration tests and the fault suite read them back).

Our exporter's metrics are written as an OpenMetrics file (a sample every 15 s), backfilled with
``promtool tsdb create-blocks-from openmetrics``, and a real ``prometheus`` is started on that storage:
job ``train-a`` (8 ranks, rank 5's forward 1.5x slower, so it waits less in the all-reduce while
every rank's step takes as long) and job ``train-b`` (2 ranks; rank 1 hangs in its forward 10
minutes before the end while rank 0 waits in a collective).
"""

from __future__ import annotations

import math
import subprocess
import time

import numpy as np
import pytest

from tests.helpers.servers import prometheus, require

SCRAPE_S = 15


HISTORY_S = 40 * 60


WINDOW_S = 60  # what the default rule picks for 15 s scrapes: 4 x 15 s


A_RANKS = 8


SLOW_RANK = 5


HANG_AGO_S = 600  # train-b's rank 1 hangs this long before the end


STEP_BYTES = 2e8 * 2  # two all-reduces of 200 MB per step


NO_SCRAPES = "global: {scrape_interval: 1m}\n"


# ---- what the file holds ------------------------------------------------------------------------
class Series:
    """The samples of one OpenMetrics file, family by family."""

    def __init__(self) -> None:
        self.families: dict[str, tuple[str, list[tuple[str, list[str]]]]] = {}

    def add(self, family: str, kind: str, labels: dict, lines_by_time: list[str]) -> None:
        self.families.setdefault(family, (kind, []))[1].append((_labels(labels), lines_by_time))

    def text(self) -> str:
        out = []
        for family, (kind, series) in self.families.items():
            out.append(f"# TYPE {family} {kind}")
            for _, lines in series:
                out.extend(lines)
        out.append("# EOF")
        return "\n".join(out) + "\n"


def _num(v) -> str:
    v = float(v)
    return "NaN" if math.isnan(v) else ("+Inf" if v == math.inf else repr(v))


def _labels(d: dict) -> str:
    return ",".join(f'{k}="{v}"' for k, v in d.items())


def counter(s: Series, family: str, labels: dict, times, values) -> None:
    lb = _labels(labels)
    s.add(family, "counter", labels, [f"{family}_total{{{lb}}} {_num(v)} {int(t)}" for t, v in zip(times, values)])


def gauge(s: Series, family: str, labels: dict, times, values) -> None:
    lb = _labels(labels)
    s.add(family, "gauge", labels, [f"{family}{{{lb}}} {_num(v)} {int(t)}" for t, v in zip(times, values)])


def histogram(s: Series, family: str, labels: dict, times, counts, sums) -> None:
    lb = _labels(labels)
    lines = []
    for t, c, v in zip(times, counts, sums):
        t = int(t)
        lines += [
            f'{family}_bucket{{{lb},le="+Inf"}} {_num(c)} {t}',
            f"{family}_count{{{lb}}} {_num(c)} {t}",
            f"{family}_sum{{{lb}}} {_num(v)} {t}",
        ]
    s.add(family, "histogram", labels, lines)


def window_of(end: int, t: np.ndarray) -> np.ndarray:
    """Which window (counted back from the end: 0 is the last) an interval ending at t falls in."""
    return (end - t) // WINDOW_S


def job_a(s: Series, end: int) -> dict:
    """8 synchronous ranks; per-step values are constant within each 60 s window (so what a window
    reads does not depend on which scrapes fall on its edges), and vary between windows."""
    times = end - SCRAPE_S * np.arange(HISTORY_S // SCRAPE_S, -1, -1)  # ascending; the last is `end`
    ends = times[1:]  # interval i ends at ends[i]
    steps = 40 + np.arange(len(ends)) % 7  # steps per 15 s interval, the same on every rank
    j = window_of(end, ends)
    jit = 1 + 0.1 * np.sin(j * 1.3)  # per window
    static = 1 + 0.01 * ((np.arange(A_RANKS) * 3) % 5 - 2)
    fwd = 0.08 * jit[:, None] * static[None, :]
    fwd[:, SLOW_RANK] *= 1.5
    bwd = 0.10 * jit[:, None] * static[None, :]
    arrival = fwd + bwd
    comm = arrival.max(axis=1, keepdims=True) - arrival + 0.02  # the slow rank arrives last, waits least
    opt = np.repeat((0.03 * jit)[:, None], A_RANKS, axis=1)
    data = np.full_like(fwd, 0.004)
    dur = fwd + bwd + comm + opt  # equal on every rank
    per_step = {
        "duration_s": dur,
        "forward_s": fwd,
        "backward_s": bwd + comm,
        "optimizer_s": opt,
        "data_s": data,
        "comm_s": comm,
    }

    def cum(per):  # counter values at `times` from per-step values per interval
        return np.vstack([np.zeros((1, A_RANKS)), np.cumsum(per * steps[:, None], axis=0)])

    n_cum = np.concatenate([[0], np.cumsum(steps)])
    util = {r: 0.5 + 0.05 * r for r in range(A_RANKS)}
    for r in range(A_RANKS):
        lab = {"job": "train-a", "rank": r, "local_rank": r % 4, "node": f"node{r // 4}"}
        histogram(s, "train_step_duration_seconds", lab, times, n_cum, cum(dur)[:, r])
        for p in ("forward", "backward", "optimizer"):
            histogram(
                s, "train_phase_duration_seconds", {**lab, "phase": p}, times, n_cum, cum(per_step[f"{p}_s"])[:, r]
            )
        histogram(s, "train_dataloader_wait_seconds", lab, times, n_cum, cum(data)[:, r])
        histogram(
            s, "train_collective_duration_seconds", {**lab, "op": "all_reduce"}, times, 2 * n_cum, cum(comm)[:, r]
        )
        counter(s, "train_collective_calls", {**lab, "op": "all_reduce"}, times, 2.0 * n_cum)
        counter(s, "train_collective_bytes", {**lab, "op": "all_reduce"}, times, STEP_BYTES * n_cum)
        busbw = np.concatenate([[np.nan], STEP_BYTES * 2 * (A_RANKS - 1) / A_RANKS / comm[:, r]])
        gauge(
            s,
            "train_collective_busbw_bytes_per_second",
            {**lab, "op": "all_reduce"},
            times[1:],
            np.full(len(ends), math.inf) if r == 6 else busbw[1:],
        )
        gauge(
            s,
            "train_collective_algbw_bytes_per_second",
            {**lab, "op": "all_reduce"},
            times[1:],
            STEP_BYTES / comm[:, r],
        )
        counter(s, "train_collective_blocked_seconds", lab, times, cum(comm)[:, r])
        # the all-reduce runs in backward: its whole blocked time is there
        counter(s, "train_phase_blocked_seconds", {**lab, "phase": "backward"}, times, cum(comm)[:, r])
        for p in ("forward", "optimizer"):
            counter(s, "train_phase_blocked_seconds", {**lab, "phase": p}, times, np.zeros(len(times)))
        counter(s, "train_steps", lab, times, n_cum.astype(float))
        counter(s, "train_tokens", lab, times, 4096.0 * n_cum)
        counter(s, "train_samples", lab, times, 8.0 * n_cum)
        # NaN and +Inf samples (Prometheus answers them as "NaN", "+Inf"): skipped, never a number
        gauge(s, "train_mfu_ratio", lab, times[1:], [math.nan if r == 7 else 0.4] * len(ends))
        gauge(s, "train_last_step", lab, times[1:], (n_cum[1:] - 1).astype(float))
        gauge(s, "train_last_step_timestamp_seconds", lab, times[1:], (times[1:] - 0.05).astype(float))
        gauge(s, "train_step_in_progress_seconds", lab, times, [0.02] * len(times))
        gauge(s, "train_blocked_in_collective", lab, times, [0.0] * len(times))
        gauge(s, "train_gpu_utilization_ratio", {**lab, "gpu": r % 4}, times, [util[r]] * len(times))
        if r == 0:  # a GPU that is not rank 0's own (gpu label = local rank): not its reading
            gauge(s, "train_gpu_utilization_ratio", {**lab, "gpu": 3}, times, [0.01] * len(times))
        gauge(s, "train_process_cpu_ratio", lab, times, [1.0 + 0.1 * r] * len(times))
        gauge(s, "train_process_resident_memory_bytes", lab, times, (1e9 + r * 1e6 + (times - end)).astype(float))
        counter(s, "train_gpu_energy_joules", lab, times, 300.0 * (times - times[0]).astype(float))
    return {"per_step": per_step, "window": j, "end": end, "last_step": dict(zip(times[1:].tolist(), n_cum[1:] - 1))}


def job_b(s: Series, end: int) -> None:
    """2 ranks stepping until HANG_AGO_S before the end, then rank 1 stuck in a step (outside any
    collective) while rank 0 waits in one; both still scraped."""
    times = end - SCRAPE_S * np.arange(HISTORY_S // SCRAPE_S, -1, -1)
    ends = times[1:]
    hang = end - HANG_AGO_S
    steps = np.where(ends <= hang, 20, 0)
    n_cum = np.concatenate([[0], np.cumsum(steps)]).astype(float)
    last_end = np.minimum(times, hang) - 0.01
    open_s = np.where(times > hang, times - hang, 0.0)
    for r in range(2):
        lab = {"job": "train-b", "rank": r, "local_rank": r, "node": "nodeb"}
        histogram(s, "train_step_duration_seconds", lab, times, n_cum, 0.23 * n_cum)
        histogram(s, "train_phase_duration_seconds", {**lab, "phase": "forward"}, times, n_cum, 0.1 * n_cum)
        counter(s, "train_collective_blocked_seconds", lab, times, 0.01 * n_cum)
        counter(s, "train_steps", lab, times, n_cum)
        gauge(s, "train_last_step", lab, times[1:], n_cum[1:] - 1)
        gauge(s, "train_last_step_timestamp_seconds", lab, times[1:], last_end[1:])
        gauge(s, "train_step_in_progress_seconds", lab, times, open_s)
        gauge(s, "train_blocked_in_collective", lab, times, np.where((times > hang) & (r == 0), 1.0, 0.0))
        gauge(s, "train_process_cpu_ratio", lab, times, [1.0 if r == 1 else 0.05] * len(times))


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory):
    """A real Prometheus serving both jobs from backfilled blocks: (url, truth of train-a)."""
    promtool = require("promtool", "prometheus")
    tmp = tmp_path_factory.mktemp("prom")
    end = int(time.time()) // 60 * 60 - 120  # a whole minute, safely in the past
    s = Series()
    truth = job_a(s, end)
    job_b(s, end)
    src = tmp / "metrics.om"
    src.write_text(s.text())
    made = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(src), str(tmp / "tsdb")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    with prometheus(tmp, NO_SCRAPES) as prom:
        yield prom.url, truth

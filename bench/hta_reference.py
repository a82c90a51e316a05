"""HolisticTraceAnalysis's (HTA 0.5.0) own figures for one Kineto trace, as JSON on stdout: the
reference ``bench/hta_compare.py`` sets ``telemetry.analysis.traces.breakdown`` against.

Runs under HTA's venv (``bench/hta_env.py``), one trace per process, so that the peak RSS is this
trace's alone:

    .hta-venv/bin/python bench/hta_reference.py TRACE [--skip-kernels]

HTA reads a folder of traces: the trace is linked alone into a temporary one. What is computed, by
HTA's public API (``hta.trace_analysis.TraceAnalysis``), each in its own try so that one failing
analysis (HTA raises on a trace without GPU kernels) is reported as its error, not a crash:

- ``get_temporal_breakdown``: idle, compute, non-compute and kernel (span) time, in µs and %;
- ``get_idle_time_breakdown(consecutive_kernel_delay=30)``: host wait, kernel wait and other per
  stream (HTA's default threshold, 30 in the trace's unit: µs);
- ``get_comm_comp_overlap``: the share of communication under computation;
- ``get_gpu_kernel_breakdown(duration_ratio=1.0, num_kernels=10**9)``: time per kernel type (with
  the overlap states HTA reports) and every kernel's total, with nothing folded into "others";
- ``get_cuda_kernel_launch_stats``: per launch the call's duration, the GPU duration and the delay,
  summarised as mean, p50, p95, max and HTA's outlier counts (``runtime_cutoff=50``,
  ``launch_delay_cutoff=100``).

``parse_s`` is the time of ``TraceAnalysis(...)`` (HTA parses, aligns and filters there),
``analysis_s`` that of the analyses, ``peak_rss_mb`` the process's ``ru_maxrss`` at the end (and
``rss_before_mb`` after the imports, before the trace was read). ``--skip-kernels`` leaves the
kernel breakdown out (it is the slowest analysis on a large trace).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import sys
import tempfile
import time
import traceback
from typing import Any, Callable

KERNEL_WAIT = 30  # HTA's default consecutive_kernel_delay, in the trace's unit (µs)


def _rss_mb() -> float:
    self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return round(max(self_kb, child_kb) / 1024.0, 1)


def _try(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - HTA raises plain errors on traces it cannot analyse; each is reported
        return {"error": f"{type(e).__name__}: {e}", "where": traceback.format_exc(limit=-2).strip().splitlines()[-3:]}


def _num(v: Any) -> Any:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return v
    return None if f != f else f  # NaN -> null


def temporal(ta: Any) -> dict[str, Any]:
    df = ta.get_temporal_breakdown(visualize=False)
    r = df.iloc[0]
    return {
        "span_us": _num(r["kernel_time(us)"]),
        "idle_us": _num(r["idle_time(us)"]),
        "compute_us": _num(r["compute_time(us)"]),
        "non_compute_us": _num(r["non_compute_time(us)"]),
        "idle_pct": _num(r["idle_time_pctg"]),
        "compute_pct": _num(r["compute_time_pctg"]),
        "non_compute_pct": _num(r["non_compute_time_pctg"]),
    }


def idle(ta: Any, rank: int) -> dict[str, Any]:
    df, _ = ta.get_idle_time_breakdown(
        ranks=[rank], visualize=False, show_idle_interval_stats=False, consecutive_kernel_delay=KERNEL_WAIT
    )
    totals = {"host_wait_us": 0.0, "kernel_wait_us": 0.0, "other_us": 0.0}
    by_stream: dict[str, dict[str, float]] = {}
    for row in df.itertuples():
        key = f"{row.idle_category}_us"
        t = _num(row.idle_time) or 0.0
        by_stream.setdefault(str(int(row.stream)), {})[key] = t
        totals[key] = totals.get(key, 0.0) + t
    total = sum(totals.values())
    out: dict[str, Any] = dict(totals)
    for k in ("host_wait", "kernel_wait", "other"):
        out[f"{k}_pct"] = round(100.0 * totals[f"{k}_us"] / total, 2) if total > 0 else 0.0
    out["by_stream"] = by_stream
    return out


def overlap(ta: Any) -> Any:
    df = ta.get_comm_comp_overlap(visualize=False)
    return _num(df.iloc[0]["comp_comm_overlap_pctg"])


def kernels(ta: Any) -> dict[str, Any]:
    types, per_kernel = ta.get_gpu_kernel_breakdown(
        visualize=False, duration_ratio=1.0, num_kernels=10**9, include_memory_kernels=True
    )
    by_type = {str(r.kernel_type): {"sum_us": _num(r.sum), "pct": _num(r.percentage)} for r in types.itertuples()}
    # the union of each kind is the sum of the overlap states it is part of
    union = {}
    for kind in ("COMPUTATION", "COMMUNICATION", "MEMORY"):
        parts = [v["sum_us"] for k, v in by_type.items() if kind in k.split(" overlapping ")]
        union[kind.lower()] = sum(p for p in parts if p is not None) if parts else 0.0
    rows = []
    for d in per_kernel.to_dict("records"):
        total, mean = _num(d["sum (us)"]), _num(d["mean (us)"])
        rows.append(
            {
                "name": d["name"],
                "kernel_type": d["kernel_type"],
                "total_us": total,
                "mean_us": mean,
                "count": int(round(total / mean)) if total is not None and mean else None,
            }
        )
    rows.sort(key=lambda r: -(r["total_us"] or 0.0))
    return {"by_type": by_type, "union_us": union, "kernels": rows}


def launches(ta: Any, rank: int) -> dict[str, Any]:
    df = ta.get_cuda_kernel_launch_stats(ranks=[rank], visualize=False)[rank]
    if len(df) == 0:
        return {"count": 0}
    call, gpu, delay = df["cpu_duration"], df["gpu_duration"], df["launch_delay"]
    return {
        "count": int(len(df)),
        "call_us_mean": float(call.mean()),
        "call_us_p50": float(call.quantile(0.5)),
        "gpu_us_mean": float(gpu.mean()),
        "delay_us_mean": float(delay.mean()),
        "delay_us_p50": float(delay.quantile(0.5)),
        "delay_us_p95": float(delay.quantile(0.95)),
        "delay_us_max": float(delay.max()),
        "shorter_than_call": int((gpu < call).sum()),
        "short_kernels_hta": int(((call <= 50) & (gpu < call)).sum()),  # HTA's own plot: call <= 50 µs too
        "calls_over_50us": int((call > 50).sum()),
        "delays_over_100us": int((delay > 100).sum()),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--skip-kernels", action="store_true", help="leave the kernel breakdown out")
    args = ap.parse_args()
    logging.disable(logging.WARNING)  # HTA logs every parse at WARNING; stdout must stay JSON
    from importlib.metadata import version

    from hta.trace_analysis import TraceAnalysis

    hta_version = version("HolisticTraceAnalysis")

    logging.getLogger("hta").setLevel(logging.ERROR)
    rss_imports = _rss_mb()
    path = os.path.abspath(args.trace)
    out: dict[str, Any] = {"trace": path, "hta_version": hta_version, "rss_before_mb": rss_imports}
    with tempfile.TemporaryDirectory(prefix="hta-ref-") as tmp:
        os.symlink(path, os.path.join(tmp, os.path.basename(path)))
        t0 = time.perf_counter()
        try:
            ta = TraceAnalysis(trace_dir=tmp)
        except Exception as e:  # noqa: BLE001 - a trace HTA cannot load is a figure too
            out.update(error=f"{type(e).__name__}: {e}", parse_s=round(time.perf_counter() - t0, 3))
            out["peak_rss_mb"] = _rss_mb()
            print(json.dumps(out))
            return 0
        out["parse_s"] = round(time.perf_counter() - t0, 3)
    rank = ta.t.get_ranks()[0]
    out["rank"] = int(rank)
    steps = _try(ta.get_profiler_steps)
    out["steps"] = [int(s) for s in steps] if isinstance(steps, list) else steps
    t1 = time.perf_counter()
    out["temporal"] = _try(lambda: temporal(ta))
    out["idle"] = _try(lambda: idle(ta, rank))
    out["overlap_pct"] = _try(lambda: overlap(ta))
    out["launch"] = _try(lambda: launches(ta, rank))
    if not args.skip_kernels:
        out["kernel_breakdown"] = _try(lambda: kernels(ta))
    out["analysis_s"] = round(time.perf_counter() - t1, 3)
    out["peak_rss_mb"] = _rss_mb()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

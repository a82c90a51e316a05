"""Our trace breakdown against HolisticTraceAnalysis's own figures on HTA's sample traces
(tests/data/hta): each within 1%, with ``hta_rounding=True``.

The numbers below are HTA 0.5.0's, measured by ``bench/hta_compare.py`` (HTA in its own venv,
``bench/hta_env.py``; ``bench/hta_reference.py`` on each trace: ``get_temporal_breakdown``,
``get_idle_time_breakdown(consecutive_kernel_delay=30)``, ``get_comm_comp_overlap``,
``get_gpu_kernel_breakdown(duration_ratio=1.0)``, ``get_cuda_kernel_launch_stats``) and copied here
as literals, so this test needs no HTA. Communication and memory time are the unions HTA's kernel
breakdown reports (the sum of the overlap states each kind is part of). The launch figures are
summaries of HTA's per-launch frame (mean, p50, p95, max; counts of calls over 50 µs and delays over
100 µs, HTA's default cut-offs). bench/RESULTS.md ("Trace breakdown against HTA 0.5.0") has the
run they came from.

Where HTA gives no figure, that is pinned too: on a trace without GPU kernels (the CUPTI-counter
trace, the CPU-only one) HTA 0.5.0's temporal and idle breakdowns raise, and ours reads the trace as a
CPU trace instead; and HTA's kernel breakdown leaves out kernels of its 'OTHER' kind (the CUDA sync
events) that our top kernels list (``top20_not_in_breakdown``: of our top 20 kernels, those
``bench/hta_compare.py`` found no row for in HTA's breakdown).
"""

import math
import pathlib

import pytest

from telemetry.analysis.traces.breakdown import breakdown

DATA = pathlib.Path(__file__).resolve().parents[3] / "data" / "hta"
TOL = 0.01

# HTA 0.5.0's figures, from bench/hta_compare.py (not ours: measured with HTA, pandas 2.3.3).
HTA = {
    "benchmark_result_2869224_1695835535_trace.json.gz": {
        "steps": [],
        "temporal": {
            "span_us": 12996011.0, "idle_us": 12929684.0, "compute_us": 10637.0, "non_compute_us": 55690.0,
            "idle_pct": 99.49, "compute_pct": 0.08, "non_compute_pct": 0.43,
            "communication_us": 0.0, "memory_us": 55511.0,
        },
        "idle": {"host_wait_us": 24866725.0, "kernel_wait_us": 107.0, "other_us": 0.0},
        "overlap_pct": None,  # HTA: NaN, no communication kernel
        "launch": {
            "count": 98, "call_us_mean": 31771.592, "call_us_p50": 10.0, "gpu_us_mean": 675.541,
            "delay_us_mean": 400.847, "delay_us_p50": 32.5, "delay_us_p95": 1319.05, "delay_us_max": 1533.0,
            "shorter_than_call": 32, "calls_over_50us": 11, "delays_over_100us": 43,
        },
        "top_kernel": ("Memcpy HtoD (Pageable -> Device)", 55503.0, 16),
        "top20_not_in_breakdown": ("Context Sync", "Stream Sync"),
    },
    "nccl_data.json.gz": {
        "steps": [4, 5],
        "temporal": {
            "span_us": 435586.0, "idle_us": 338781.0, "compute_us": 75169.0, "non_compute_us": 21636.0,
            "idle_pct": 77.78, "compute_pct": 17.26, "non_compute_pct": 4.97,
            "communication_us": 24278.0, "memory_us": 1015.0,
        },
        "idle": {"host_wait_us": 738746.0, "kernel_wait_us": 2155.0, "other_us": 0.0},
        "overlap_pct": 14.31,
        "launch": {
            "count": 2516, "call_us_mean": 8.461, "call_us_p50": 8.0, "gpu_us_mean": 39.929,
            "delay_us_mean": 28.07, "delay_us_p50": 3.0, "delay_us_p95": 126.25, "delay_us_max": 945.0,
            "shorter_than_call": 1347, "calls_over_50us": 0, "delays_over_100us": 180,
        },
        "top_kernel": ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", 24204.0, 10),
        "top20_not_in_breakdown": (),
    },
    "sampled_rank-0.json.gz": {
        "steps": [551],
        "temporal": {
            "span_us": 600058.0, "idle_us": 321378.0, "compute_us": 106252.0, "non_compute_us": 172428.0,
            "idle_pct": 53.56, "compute_pct": 17.71, "non_compute_pct": 28.74,
            "communication_us": 195327.0, "memory_us": 662.0,
        },
        "idle": {"host_wait_us": 958796.0, "kernel_wait_us": 2070.0, "other_us": 309639.0},
        "overlap_pct": 11.81,
        "launch": {
            "count": 602, "call_us_mean": 8.487, "call_us_p50": 7.0, "gpu_us_mean": 502.061,
            "delay_us_mean": 16412.163, "delay_us_p50": 10246.0, "delay_us_p95": 64814.85, "delay_us_max": 103661.0,
            "shorter_than_call": 140, "calls_over_50us": 0, "delays_over_100us": 469,
        },
        "top_kernel": ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", 195327.0, 5),
        "top20_not_in_breakdown": (),
    },
    "sampled_rank-1.json.gz": {
        "steps": [551],
        "temporal": {
            "span_us": 600674.0, "idle_us": 328671.0, "compute_us": 135548.0, "non_compute_us": 136455.0,
            "idle_pct": 54.72, "compute_pct": 22.57, "non_compute_pct": 22.72,
            "communication_us": 168027.0, "memory_us": 2667.0,
        },
        "idle": {"host_wait_us": 1005000.0, "kernel_wait_us": 1925.0, "other_us": 357339.0},
        "overlap_pct": 20.05,
        "launch": {
            "count": 577, "call_us_mean": 8.645, "call_us_p50": 7.0, "gpu_us_mean": 530.749,
            "delay_us_mean": 16917.958, "delay_us_p50": 10282.0, "delay_us_p95": 73663.0, "delay_us_max": 113609.0,
            "shorter_than_call": 140, "calls_over_50us": 0, "delays_over_100us": 442,
        },
        "top_kernel": ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", 168027.0, 5),
        "top20_not_in_breakdown": (),
    },
}  # fmt: skip

# Traces HTA 0.5.0 gives no temporal or idle figure for (it raises: no GPU kernel in them), with what it raised.
HTA_NO_FIGURE = {
    "benchmark_result_924719_1679055439_trace.json.gz": "IndexError: single positional indexer is out-of-bounds",
    "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz": "IndexError: single positional indexer is out-of-bounds",
}

_cache: dict[str, dict] = {}


def ours(name: str) -> dict:
    if name not in _cache:
        _cache[name] = breakdown(str(DATA / name), hta_rounding=True).to_dict()
    return _cache[name]


def close(got, want) -> bool:
    if want is None or got is None:
        return got is None and want is None
    if want == 0:
        return got == 0
    return math.isfinite(got) and abs(got - want) <= TOL * abs(want)


def test_every_committed_trace_is_pinned():
    names = {p.name for p in DATA.glob("*.json.gz")}
    assert names == set(HTA) | set(HTA_NO_FIGURE)


@pytest.mark.parametrize("name", sorted(HTA))
def test_temporal_breakdown_within_1pct_of_hta(name):
    got = ours(name)
    assert got["device"] == "gpu"
    assert got["steps"] == HTA[name]["steps"]
    off = {
        k: (got["temporal"].get(k), v) for k, v in HTA[name]["temporal"].items() if not close(got["temporal"].get(k), v)
    }
    assert not off, off


@pytest.mark.parametrize("name", sorted(HTA))
def test_idle_split_and_overlap_within_1pct_of_hta(name):
    got = ours(name)
    off = {k: (got["idle"].get(k), v) for k, v in HTA[name]["idle"].items() if not close(got["idle"].get(k), v)}
    assert not off, off
    assert close(got["overlap_pct"], HTA[name]["overlap_pct"]), (got["overlap_pct"], HTA[name]["overlap_pct"])


@pytest.mark.parametrize("name", sorted(HTA))
def test_launch_stats_within_1pct_of_hta(name):
    got = ours(name)["launch"]
    off = {k: (got.get(k), v) for k, v in HTA[name]["launch"].items() if not close(got.get(k), v)}
    assert not off, off


@pytest.mark.parametrize("name", sorted(HTA))
def test_top_kernel_within_1pct_of_hta(name):
    top = ours(name)["kernels"][0]
    want_name, want_total, want_count = HTA[name]["top_kernel"]
    assert top["name"] == want_name
    assert close(top["total_us"], want_total) and top["count"] == want_count


@pytest.mark.parametrize("name", sorted(HTA))
def test_our_top_kernels_are_htas_but_the_sync_events_its_breakdown_leaves_out(name):
    # bench/hta_compare.py matches our top 20 kernels by name in HTA's kernel breakdown: on the alexnet
    # trace 18 are there and 2 are not (its CUDA sync events, HTA's 'OTHER' kind); on the others all 20
    top = ours(name)["kernels"][:20]
    left_out = HTA[name]["top20_not_in_breakdown"]
    assert len(top) == 20
    assert sorted(k["name"] for k in top if k["kind"] == "other") == sorted(left_out)


@pytest.mark.parametrize("name", sorted(HTA_NO_FIGURE))
def test_no_gpu_kernels_hta_raises_ours_reads_cpu_ops(name):
    # HTA 0.5.0 raises on these (HTA_NO_FIGURE[name]); ours gives the breakdown over CPU operators instead
    got = ours(name)
    assert got["device"] == "cpu"
    assert got["idle"] == {} and got["launch"] == {}
    assert got["temporal"]["span_us"] > 0

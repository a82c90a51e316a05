"""A profiler trace broken down (telemetry/analysis/traces/breakdown.py): temporal breakdown, idle split,
overlap, launches and collectives on a trace small enough to work out by hand; the last profiler step
left out as HTA leaves it; NCCL's new kernel names and CUDA-graph launches; gloo's CPU collectives and
the wait for a late peer split from the transfer."""

import gzip
import json

import pytest

from telemetry.analysis.traces.breakdown import breakdown
from telemetry.analysis.traces.kernels import bus_factor, collective_name, kernel_kind
from telemetry.analysis.traces.waits import split_waits

NCCL_NEW = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def write(path, events, **top):
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events, **top}, f)
    return str(path)


def step(n, ts, dur=100):
    return {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "ts": ts, "dur": dur, "tid": 1}


def launch(corr, ts, dur, name="cudaLaunchKernel"):
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": name,
        "ts": ts,
        "dur": dur,
        "tid": 1,
        "args": {"correlation": corr},
    }


def gpu(corr, ts, dur, name="void gemm_kernel<float>()", cat="kernel", stream=7, **args):
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "ts": ts,
        "dur": dur,
        "tid": stream,
        "args": {"stream": stream, "correlation": corr, **args},
    }


@pytest.fixture
def gpu_trace(tmp_path):
    coll = {
        "Collective name": "allreduce",
        "In msg nelems": 1000,
        "Out msg nelems": 1000,
        "dtype": "Float",
        "Group size": 4,
    }
    events = [
        step(1, 0),
        step(2, 100),
        step(3, 200),
        launch(1, 10, 5),
        gpu(1, 20, 20),  # compute [20, 40)
        launch(2, 12, 3),
        gpu(2, 30, 30, name=NCCL_NEW, stream=20, **coll),  # communication [30, 60): a third under compute
        launch(3, 50, 5),
        gpu(3, 70, 10),  # launched at 50 after [20, 40) ended: 30 µs host wait
        launch(4, 60, 2),
        gpu(4, 85, 5),  # launched before 80: a 5 µs kernel wait
        launch(5, 62, 3, name="cudaMemcpyAsync"),
        gpu(5, 120, 10, name="Memcpy DtoH (Device -> Pageable)", cat="gpu_memcpy"),  # a 30 µs gap: other
        launch(6, 250, 5),
        gpu(6, 260, 10),  # launched in the last step: left out
    ]
    return write(tmp_path / "rank-0.json.gz", events, distributedInfo={"rank": 0, "world_size": 4})


def test_the_temporal_breakdown_idle_split_and_overlap_as_worked_out_by_hand(gpu_trace):
    b = breakdown(gpu_trace)
    assert b.rank == 0 and b.device == "gpu" and b.steps == [1, 2] and b.dropped_steps == [3]
    t = b.temporal
    assert (t["span_us"], t["idle_us"], t["compute_us"], t["communication_us"], t["memory_us"]) == (110, 45, 35, 30, 10)
    assert t["non_compute_us"] == 30 and t["idle_pct"] == pytest.approx(100 * 45 / 110, abs=0.01)
    assert b.overlap_pct == pytest.approx(100 / 3, abs=0.01)
    assert (b.idle["host_wait_us"], b.idle["kernel_wait_us"], b.idle["other_us"]) == (30, 5, 30)
    assert b.launch["count"] == 5 and b.launch["delay_us_max"] == 55  # the copy: 120 - 62 - 3
    assert [s["step"] for s in b.per_step] == [1] and b.per_step[0]["compute_us"] == 35


def test_collectives_carry_bytes_and_bus_bandwidth_under_ncclsnew_kernel_names(gpu_trace):
    (c,) = breakdown(gpu_trace).collectives
    assert c["name"] == "allreduce" and c["count"] == 1 and c["bytes"] == 4000 and c["group_size"] == 4
    assert c["algbw_GBps"] == pytest.approx(4000 / 30e-6 / 1e9, rel=1e-3)
    assert c["busbw_GBps"] == pytest.approx(c["algbw_GBps"] * 1.5, rel=1e-3)


def test_kernel_kinds_and_collective_names_under_old_and_new_nccl_names():
    assert (
        kernel_kind("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)") == "communication"
    )
    assert kernel_kind(NCCL_NEW) == "communication"
    assert kernel_kind("Memcpy HtoD (Pageable -> Device)") == "memory" and kernel_kind("Memset (Device)") == "memory"
    assert kernel_kind("void at::native::vectorized_elementwise_kernel<4>()") == "compute"
    assert kernel_kind("cudaStreamSync") == "other"
    assert collective_name("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)") == "allreduce"
    assert collective_name(NCCL_NEW) == "allreduce"
    assert collective_name("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(x)") == "reduce_scatter"
    assert (
        collective_name("gloo:all_reduce") == "allreduce" and collective_name("c10d::_allgather_base_") == "allgather"
    )
    assert bus_factor("allreduce", 8) == pytest.approx(1.75) and bus_factor("allgather", 8) == pytest.approx(0.875)


def test_a_collective_in_a_cuda_graph_is_communication_and_not_a_launch(tmp_path):
    events = [
        launch(1, 0, 4, name="cudaGraphLaunch"),
        gpu(1, 10, 50, name=NCCL_NEW, stream=30),
        gpu(1, 12, 20),  # a compute kernel of the same graph, on another stream
    ]
    b = breakdown(write(tmp_path / "g.json.gz", events))
    assert b.temporal["communication_us"] == 50 and b.temporal["compute_us"] == 20
    assert [c["name"] for c in b.collectives] == ["allreduce"] and b.launch == {"count": 0}
    assert b.steps == [] and b.dropped_steps == []  # no profiler steps: everything counts


def test_htas_inward_rounding_of_nanosecond_traces_is_only_on_request(tmp_path):
    events = [launch(1, 0.2, 1.0), gpu(1, 10.4, 2.2)]  # ends at 12.6
    path = write(tmp_path / "ns.json.gz", events)
    assert breakdown(path).temporal["compute_us"] == pytest.approx(2.2)
    assert breakdown(path, hta_rounding=True).temporal["compute_us"] == 1.0  # [11, 12]


def gloo_trace(path, rank, spans):
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 90, "tid": 1}]
    for ts, dur in spans:
        events.append({"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "ts": ts, "dur": 2, "tid": 1})
        events.append({"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "ts": ts, "dur": dur, "tid": 9})
    return write(path, events, distributedInfo={"rank": rank, "world_size": 2, "backend": "gloo"})


def test_a_gloo_trace_is_broken_down_over_cpu_operators_and_the_late_peers_wait_is_split(tmp_path):
    early = breakdown(gloo_trace(tmp_path / "r0.json.gz", 0, [(100, 100), (300, 60)]))
    late = breakdown(gloo_trace(tmp_path / "r1.json.gz", 1, [(150, 55), (330, 31)]))
    assert early.device == "cpu" and early.temporal["compute_us"] == 90
    assert early.temporal["communication_us"] == 160 and early.overlap_pct == 0.0
    (c,) = early.collectives
    assert c["name"] == "allreduce" and c["count"] == 2  # gloo's ranges, not also the c10d enqueue
    w = split_waits({0: early, 1: late})
    assert w["matched"] == 2
    assert w["ranks"]["0"]["allreduce"] == {"wait_us": 80.0, "transfer_us": 80.0, "count": 2}
    assert w["ranks"]["1"]["allreduce"] == {"wait_us": 0.0, "transfer_us": 86.0, "count": 2}


def test_traces_without_a_shared_clock_give_no_wait_split(tmp_path):
    a = breakdown(gloo_trace(tmp_path / "a.json.gz", 0, [(100, 10)]))
    b = breakdown(gloo_trace(tmp_path / "b.json.gz", 1, [(10_000, 10)]))
    assert "ranks" not in split_waits({0: a, 1: b}) and "clock" in split_waits({0: a, 1: b})["note"]
    assert "two or more" in split_waits({0: a})["note"]


def test_a_gloo_collectives_bytes_come_from_its_recorded_shapes(tmp_path):
    """A capture records shapes: gloo's range carries ``Input Dims`` and ``Input type``; its bytes and
    algorithm bandwidth follow, and no bus bandwidth (gloo's ranges do not say the group's size)."""
    shapes = {"Input Dims": [[1000]], "Input type": ["float"]}
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 90, "tid": 1},
        {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "ts": 100, "dur": 4, "tid": 9, "args": shapes},
        {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "ts": 200, "dur": 4, "tid": 9, "args": shapes},
        {"ph": "X", "cat": "user_annotation", "name": "gloo:broadcast", "ts": 300, "dur": 4, "tid": 9},  # no shapes
    ]
    b = breakdown(write(tmp_path / "t.json.gz", events))
    by = {c["name"]: c for c in b.collectives}
    assert by["allreduce"]["bytes"] == 8000 and by["allreduce"]["algbw_GBps"] == 1.0  # 8000 B in 8 µs
    assert "busbw_GBps" not in by["allreduce"]
    assert by["broadcast"]["bytes"] == 0 and "algbw_GBps" not in by["broadcast"]


@pytest.mark.parametrize(
    "name", ["nccl_data.json.gz", "sampled_rank-0.json.gz", "benchmark_result_924719_1679055439_trace.json.gz"]
)
def test_a_trace_read_in_many_small_windows_spilled_to_disk_gives_the_same_breakdown(monkeypatch, name):
    """Bounded memory (analysis/tracespill.py): the events are kept in time buckets, spilled to a file
    past a bound and reduced a window at a time. Buckets of 50 µs, windows of 300 records and a
    500-record bound cut HTA's sample traces (two GPU, one CPU) into 8 to 90 windows, each spill
    written out many times: every figure, every op's self time and every collective instance is what one window
    gives (hta_rounding both ways)."""
    import pathlib

    from telemetry.analysis.traces import breakdown as tracebreakdown
    from telemetry.analysis.traces import spill as tracespill

    path = str(pathlib.Path(__file__).resolve().parents[4] / "data" / "hta" / name)
    whole = {r: breakdown(path, hta_rounding=r) for r in (False, True)}
    monkeypatch.setattr(tracespill, "BUCKET_US", 50.0)
    monkeypatch.setattr(tracespill, "SPILL_RECORDS", 500)
    monkeypatch.setattr(tracespill, "WINDOW_RECORDS", 300)
    seen = []
    windows = tracespill.windows

    def counted(*a, **k):
        for w in windows(*a, **k):
            seen.append(w[0])
            yield w

    monkeypatch.setattr(tracebreakdown, "windows", counted)
    for r, one in whole.items():
        seen.clear()
        cut = breakdown(path, hta_rounding=r)
        assert len(seen) > 5  # many windows, not one
        assert cut.to_dict() == one.to_dict()
        assert cut.profile.self_us == pytest.approx(one.profile.self_us, rel=1e-9)
        assert cut.instances == one.instances

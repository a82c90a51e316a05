"""One profiler (Kineto) trace broken down: where the device's time goes, why it idles, how much
communication hides under computation, the top kernels and ops, launch delays and collectives.

Read in one streamed pass (:func:`~.tracefile.iter_trace`); what is kept is a few numbers per GPU
activity, runtime call and CPU operation in typed arrays (about 40 bytes each), never the events
themselves. The definitions are HolisticTraceAnalysis's (HTA 0.5.0), so that the numbers can be
checked side by side (``bench/hta_compare.py``):

- **GPU activities**: complete events whose ``args`` hold a ``stream`` and a ``correlation`` of 0 or
  more (kernels, memory copies and sets). A kind per name: ``communication`` (``^nccl.*Kernel``:
  NCCL's old ``ncclKernel_*`` and new ``ncclDevKernel_*`` names, in or out of CUDA graphs), ``memory``
  (``Memcpy``/``Memset``/``dma`` first), ``compute`` (any other name without ``Memcpy``, ``Memset``
  first or ``Sync``), ``other``.
- **Steps**: ``ProfilerStep#N`` ranges. With two or more, HTA's rule: the last step is left out
  (the profiler stops inside it), and so is every GPU activity not launched (by correlation) from a
  CPU event that starts before the last step does. With fewer, everything counts.
- **Temporal**: ``span`` from the first activity's start to the last one's end; the union of
  compute activities is ``compute``, of communication ``communication``, of memory ``memory``; the
  part of the span no activity covers is ``idle``; ``non_compute = span - compute - idle``.
- **Idle split**, per stream, for each gap before an activity (from the previous one's end on that
  stream): ``host_wait`` when the activity's launch call started after the previous one ended (the
  host was late), else ``kernel_wait`` when the gap is under 30 µs (back-to-back launch overhead),
  else ``other`` (waiting on another stream, an event, a peer).
- **Overlap**: the share of the communication union that compute also covers.
- **Launches**: for each ``cudaLaunchKernel``/``cudaLaunchKernelExC``/``cudaMemcpyAsync``/
  ``cudaMemsetAsync`` call and its activity: the call's duration, and the launch delay (activity
  start less call end, 0 when negative).
- **Collectives**: NCCL kernels with the ``Collective name``, ``In msg nelems``, ``dtype`` and ``Group
  size`` Kineto records in their args (else those of the ``record_param_comms`` op with the same
  ``External id``); on a CPU trace, gloo's ``gloo:*`` ranges and ``c10d::``/``record_param_comms``
  ops. Per collective: count, time (the union of its instances), bytes, algorithm bandwidth (bytes /
  time) and bus bandwidth (nccl-tests' factors: 2(n-1)/n for all-reduce, (n-1)/n for all-gather,
  reduce-scatter and all-to-all, 1 otherwise).

A trace with no GPU activity (a CPU or gloo job) gets the same temporal breakdown over its CPU
operators: ``compute`` is the union of the non-collective operators on any thread, ``communication``
the union of the collective ones (and gloo's ranges on its own threads), ``idle`` what neither
covers; the idle split and launches are empty there.

HTA rounds the timestamps of a trace written in nanoseconds (float ``ts``) inward to whole
microseconds (start up, end down), which shortens every activity by up to 2 µs; ``hta_rounding=True``
does the same, for the side-by-side check only. By default times are taken as written.

:func:`split_waits` takes the breakdowns of several ranks' traces of the same steps (a capture) and
splits each collective's time into the wait for the latest of those ranks to arrive and the
transfer after it (k-th instance of a collective on one rank against the k-th on the others; the
traces must share a clock: one host, or synchronized hosts).
"""

from __future__ import annotations

import math
import os
import re
from array import array
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .kineto import OUR_STEP, PROFILER_STEP
from .tracediff import ProfileBuilder, TraceProfile
from .tracefile import iter_trace

KINDS = ("compute", "communication", "memory", "other")
_COMM_RE = re.compile(r"^nccl.*Kernel")
_MEM_RE = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NOT_COMPUTE_RE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
_NCCL_NAME = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")
_LAUNCH_CALLS = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync"}
_KERNEL_CATS = {"kernel", "Kernel", "gpu_memset", "Memset", "gpu_memcpy", "Memcpy"}
_CPU_COLLECTIVE = ("record_param_comms", "c10d::", "gloo:", "nccl:")
KERNEL_WAIT_US = 30.0  # HTA's consecutive_kernel_delay
DTYPE_BYTES = {
    "Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Int": 4, "Long": 8, "Short": 2, "Char": 1,
    "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16, "Float8_e4m3fn": 1, "Float8_e5m2": 1,
}  # fmt: skip
_CANON = {
    "allreduce": "allreduce", "all_reduce": "allreduce", "allgather": "allgather", "all_gather": "allgather",
    "_allgather_base": "allgather", "allgather_base": "allgather", "reduce_scatter_base": "reduce_scatter", "allgather_into_tensor_coalesced": "allgather",
    "all_gather_into_tensor": "allgather", "reducescatter": "reduce_scatter", "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter", "alltoall": "all_to_all", "all_to_all": "all_to_all",
    "alltoall_base": "all_to_all", "all_to_all_single": "all_to_all", "broadcast": "broadcast",
    "reduce": "reduce", "sendrecv": "send_recv", "send": "send", "recv": "recv", "barrier": "barrier",
    "gather": "gather", "scatter": "scatter",
}  # fmt: skip


def kernel_kind(name: str) -> str:
    """HTA's kind of a GPU activity by its name."""
    if _COMM_RE.match(name):
        return "communication"
    if _MEM_RE.match(name):
        return "memory"
    if not _NOT_COMPUTE_RE.match(name):
        return "compute"
    return "other"


def collective_name(name: str, args: dict[str, Any] | None = None) -> str:
    """The collective a kernel or CPU range runs, canonical (``allreduce``, ``allgather``, ...)."""
    raw = (args or {}).get("Collective name")
    if not raw:
        m = _NCCL_NAME.match(name)
        if m:
            raw = m.group(1)
        else:
            raw = name.split(":")[-1].strip("_") if ":" in name else name
    key = str(raw).lower()
    return _CANON.get(key, _CANON.get(key.replace("_", ""), key))


def bus_factor(coll: str, n: int) -> float:
    """nccl-tests' bus bandwidth factor of a collective over ``n`` ranks."""
    if n <= 1:
        return 1.0
    if coll == "allreduce":
        return 2.0 * (n - 1) / n
    if coll in ("allgather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


@dataclass
class Breakdown:
    """One trace's breakdown (:func:`breakdown`); :meth:`to_dict` is what JSON and the dashboard get."""

    path: str
    rank: int | None
    device: str  # "gpu" or "cpu": what the temporal breakdown is over
    steps: list[int]
    dropped_steps: list[int]
    temporal: dict[str, float]
    per_step: list[dict[str, float]]
    idle: dict[str, Any]
    overlap_pct: float | None
    kernels: list[dict[str, Any]]
    ops: list[dict[str, Any]]
    launch: dict[str, Any]
    collectives: list[dict[str, Any]]
    events: int
    instances: dict[str, list[tuple[float, float, float]]] = field(default_factory=dict, repr=False)
    profile: TraceProfile | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "rank": self.rank,
            "device": self.device,
            "steps": self.steps,
            "dropped_steps": self.dropped_steps,
            "temporal": self.temporal,
            "per_step": self.per_step,
            "idle": self.idle,
            "overlap_pct": self.overlap_pct,
            "kernels": self.kernels,
            "ops": self.ops,
            "launch": self.launch,
            "collectives": self.collectives,
            "events": self.events,
        }


class _Cols:
    """Typed columns, appended one event at a time."""

    def __init__(self, **spec: str) -> None:
        self.cols = {k: array(t) for k, t in spec.items()}

    def add(self, *values: Any) -> None:
        for col, v in zip(self.cols.values(), values):
            col.append(v)

    def np(self) -> dict[str, np.ndarray]:
        return {
            k: np.frombuffer(v, dtype=v.typecode) if len(v) else np.zeros(0, v.typecode) for k, v in self.cols.items()
        }


def _round_in(ts: float, dur: float) -> tuple[float, float]:
    return float(math.ceil(ts)), float(math.floor(ts + dur))


def breakdown(path: str, *, steps_hint: int | None = None, hta_rounding: bool = False, top: int = 20) -> Breakdown:
    """The breakdown of the trace at ``path`` (gzip or plain), in one streamed pass. ``steps_hint``:
    the number of steps the trace holds when it has no step ranges (a capture's manifest says)."""
    meta: dict[str, Any] = {}
    names: dict[str, int] = {}
    name_list: list[str] = []

    def nid(n: str) -> int:
        i = names.get(n)
        if i is None:
            i = names[n] = len(name_list)
            name_list.append(n)
        return i

    gpu = _Cols(ts="d", end="d", stream="q", name="i", corr="q", kcat="b")
    cpu_corr = _Cols(corr="q", ts="d", dur="d", launch="b")  # CPU-side events that carry a correlation
    steps = _Cols(num="q", ts="d", end="d")
    cpu_ops = _Cols(ts="d", end="d", coll="b")
    coll_meta: dict[int, tuple[str, float, int]] = {}  # External id -> (collective, bytes, group size)
    kernel_coll: dict[int, tuple[str, float, int]] = {}  # GPU row -> the same, from the kernel's args
    kernel_ext: dict[int, int] = {}  # GPU row of an NCCL kernel -> its External id
    step_names: set[str] = set()
    cpu_coll: list[tuple[str, float, float, float]] = []  # gloo/c10d/nccl CPU ranges: (name, start, end, bytes)
    prof = ProfileBuilder()
    events = 0
    float_ts = False
    for e in iter_trace(path, meta):
        events += 1
        if type(e) is not dict or e.get("ph") != "X":
            continue
        raw_ts = e.get("ts")
        try:
            ts, dur = float(raw_ts), float(e.get("dur") or 0.0)
        except (TypeError, ValueError):
            continue
        if isinstance(raw_ts, float):
            float_ts = True
        cat, name = e.get("cat") or "", e.get("name") or ""
        prof.add(cat, name, ts, dur, e.get("tid"))
        args = e.get("args")
        args = args if type(args) is dict else {}
        stream, corr = args.get("stream"), args.get("correlation", -1)
        try:
            corr = int(corr)
        except (TypeError, ValueError):
            corr = -1
        if stream is not None and corr >= 0:
            try:
                s = int(stream)
            except (TypeError, ValueError):
                s = -1
            if s >= 0:
                row = len(gpu.cols["ts"])
                gpu.add(ts, ts + dur, s, nid(name), corr, 1 if cat in _KERNEL_CATS else 0)
                if _COMM_RE.match(name):
                    if "Collective name" in args:
                        kernel_coll[row] = _coll_meta(name, args)
                    ext = args.get("External id")
                    if isinstance(ext, int):
                        kernel_ext[row] = ext
                continue
        if corr >= 0:
            cpu_corr.add(corr, ts, dur, 1 if name in _LAUNCH_CALLS else 0)
        if "ProfilerStep" in name:
            step_names.add(name)
            m = PROFILER_STEP.match(name)
            # a GPU-side copy of the range counts for HTA's last step start, but numbers no step
            steps.add(int(m.group(1)) if m and cat != "gpu_user_annotation" else -1, ts, ts + dur)
        if cat == "cpu_op" or (cat == "user_annotation" and name.startswith(("gloo:", "nccl:"))):
            if not OUR_STEP.match(name):
                is_coll = name.startswith(_CPU_COLLECTIVE)
                cpu_ops.add(ts, ts + dur, 1 if is_coll else 0)
                if is_coll and name.startswith(("gloo:", "c10d::", "nccl:")):
                    cpu_coll.append((name, ts, ts + dur, _shape_bytes(args)))
            if name == "record_param_comms":
                ext = args.get("External id")
                if isinstance(ext, int) and args.get("Collective name"):
                    coll_meta[ext] = _coll_meta(name, args)
    prof.events = events
    g, c, st, ops = gpu.np(), cpu_corr.np(), steps.np(), cpu_ops.np()
    if hta_rounding and float_ts:
        g["ts"], g["end"] = np.ceil(g["ts"]), np.floor(g["end"])
        c["dur"] = np.floor(c["ts"] + c["dur"]) - np.ceil(c["ts"])
        c["ts"] = np.ceil(c["ts"])
        st["ts"] = np.ceil(st["ts"])
    numbered = sorted({int(n) for n in st["num"] if n >= 0})
    kept_steps, dropped = numbered, []
    keep = np.ones(len(g["ts"]), dtype=bool)
    if len(step_names) >= 2:
        last_start = float(st["ts"].max())
        early = np.unique(c["corr"][c["ts"] < last_start])
        keep = np.isin(g["corr"], early)
        last = [int(n) for n, t in zip(st["num"], st["ts"]) if t == last_start and n >= 0]
        dropped = last[:1]
        kept_steps = [n for n in numbered if n not in dropped]
    rank = (meta.get("distributedInfo") or {}).get("rank") if isinstance(meta.get("distributedInfo"), dict) else None
    profile = prof.result(path, steps_hint or max(len(kept_steps), 1))
    nsteps = max(len(kept_steps), 1) if kept_steps else profile.steps
    kinds = np.array([KINDS.index(kernel_kind(n)) for n in name_list], dtype=np.int8)
    rows = np.nonzero(keep)[0]
    if len(rows):
        device = "gpu"
        kind = kinds[g["name"][rows]]
        ts, end = g["ts"][rows], g["end"][rows]
        temporal = _temporal({k: (ts[kind == i], end[kind == i]) for i, k in enumerate(KINDS)}, ts, end)
        overlap = _overlap(ts[kind == 1], end[kind == 1], ts[kind == 0], end[kind == 0])
        per_step = _per_step_gpu(g, rows, kind, c, st)
        idle = _idle_split(g, rows, c)
        launch = _launches(g, rows, c)
        kernels = _top_kernels(g, rows, kind, name_list, nsteps, top)
        collectives, instances = _gpu_collectives(g, rows, name_list, kernel_coll, kernel_ext, coll_meta)
    else:
        device = "cpu"
        coll = ops["coll"] == 1
        temporal = _temporal(
            {"compute": (ops["ts"][~coll], ops["end"][~coll]), "communication": (ops["ts"][coll], ops["end"][coll])},
            ops["ts"],
            ops["end"],
        )
        overlap = _overlap(ops["ts"][coll], ops["end"][coll], ops["ts"][~coll], ops["end"][~coll])
        per_step = []
        idle, launch, kernels = {}, {}, []
        collectives, instances = _cpu_collectives(cpu_coll)
    ops_top = [
        {"name": k[1], "kind": k[0], "ms_per_step": round(v / 1e3 / nsteps, 4), "count": profile.count.get(k, 0)}
        for k, v in sorted(profile.self_us.items(), key=lambda kv: -kv[1])
        if k[0] == "op" or (k[0] == "collective" and k[1].startswith(_CPU_COLLECTIVE))
    ][:top]
    return Breakdown(
        path=path,
        rank=rank if isinstance(rank, int) else None,
        device=device,
        steps=kept_steps,
        dropped_steps=dropped,
        temporal=temporal,
        per_step=per_step,
        idle=idle,
        overlap_pct=overlap,
        kernels=kernels,
        ops=ops_top,
        launch=launch,
        collectives=collectives,
        events=events,
        instances=instances,
        profile=profile,
    )


def _coll_meta(name: str, args: dict[str, Any]) -> tuple[str, float, int]:
    coll = collective_name(name, args)
    try:
        nelems = float(args.get("In msg nelems") or 0)
        out = float(args.get("Out msg nelems") or 0)
    except (TypeError, ValueError):
        nelems = out = 0.0
    size = DTYPE_BYTES.get(str(args.get("dtype")), 0)
    try:
        group = int(args.get("Group size") or 0)
    except (TypeError, ValueError):
        group = 0
    return coll, max(nelems, out) * size, group


_SHAPE_TYPES = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4, "short int": 2,
    "signed char": 1, "unsigned char": 1, "bool": 1, "c10::complex<float>": 8, "c10::complex<double>": 16,
}  # fmt: skip


def _shape_bytes(args: dict[str, Any]) -> float:
    """The bytes of a range's first input from the shapes the profiler records (``record_shapes``:
    ``Input Dims`` [[1000]], ``Input type`` ['float']; a gloo collective's range has them); 0 when
    not recorded or of a type not known."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list) or not dims or not types:
        return 0.0
    size = _SHAPE_TYPES.get(str(types[0]), 0)
    if not size or not isinstance(dims[0], list) or not all(isinstance(d, int) for d in dims[0]):
        return 0.0
    return float(math.prod(dims[0]) * size)


def _merge(ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intervals merged where they overlap or touch, as HTA merges them."""
    if len(ts) == 0:
        return ts, end
    order = np.argsort(ts, kind="stable")
    ts, end = ts[order], end[order]
    reach = np.maximum.accumulate(end)
    new = np.empty(len(ts), dtype=bool)
    new[0] = True
    new[1:] = ts[1:] > reach[:-1]
    starts = np.nonzero(new)[0]
    m_ts = ts[starts]
    m_end = np.maximum.reduceat(end, starts)
    return m_ts, m_end


def _union(ts: np.ndarray, end: np.ndarray) -> float:
    m_ts, m_end = _merge(ts, end)
    return float((m_end - m_ts).sum())


def _temporal(parts: dict[str, tuple[np.ndarray, np.ndarray]], ts: np.ndarray, end: np.ndarray) -> dict[str, float]:
    if len(ts) == 0:
        return {}
    m_ts, m_end = _merge(ts, end)
    span = float(m_end[-1] - m_ts[0])
    busy = float((m_end - m_ts).sum())
    out = {"span_us": round(span, 3), "idle_us": round(span - busy, 3)}
    for k, (a, b) in parts.items():
        out[f"{k}_us"] = round(_union(a, b), 3)
    out["non_compute_us"] = round(span - out.get("compute_us", 0.0) - out["idle_us"], 3)
    for k in ("idle", "compute", "non_compute"):
        out[f"{k}_pct"] = round(100.0 * out[f"{k}_us"] / span, 2) if span > 0 else 0.0
    return out


def _overlap(c_ts: np.ndarray, c_end: np.ndarray, k_ts: np.ndarray, k_end: np.ndarray) -> float | None:
    """The share (%) of the union of the first intervals that the union of the second covers."""
    a_ts, a_end = _merge(c_ts, c_end)
    total = float((a_end - a_ts).sum())
    if total <= 0:
        return None
    b_ts, b_end = _merge(k_ts, k_end)
    if len(b_ts) == 0:
        return 0.0
    # for each merged comm interval, the compute union inside it (both sorted, disjoint)
    cum = np.concatenate([[0.0], np.cumsum(b_end - b_ts)])

    def covered_before(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(b_ts, t, side="right")  # intervals starting at or before t
        part = cum[i]
        last = np.clip(i - 1, 0, None)
        over = np.where(i > 0, np.clip(b_end[last] - t, 0, None), 0.0)
        return part - over

    inside = covered_before(a_end) - covered_before(a_ts)
    return round(100.0 * float(inside.sum()) / total, 2)


def _runtime_index(c: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(c["corr"], kind="stable")
    return c["corr"][order], order


def _lookup(c: dict[str, np.ndarray], corr: np.ndarray) -> np.ndarray:
    """For each correlation, the row of the CPU event that carries it (-1 when none)."""
    keys, order = _runtime_index(c)
    if len(keys) == 0:
        return np.full(len(corr), -1)
    i = np.clip(np.searchsorted(keys, corr), 0, len(keys) - 1)
    return np.where(keys[i] == corr, order[i], -1)


def _idle_split(g: dict[str, np.ndarray], rows: np.ndarray, c: dict[str, np.ndarray]) -> dict[str, Any]:
    rows = rows[g["kcat"][rows] == 1]
    cpu = _lookup(c, g["corr"][rows])
    runtime_ts = np.where(cpu >= 0, c["ts"][np.clip(cpu, 0, None)] if len(c["ts"]) else 0.0, np.nan)
    by_stream: dict[str, dict[str, float]] = {}
    totals = {"host_wait_us": 0.0, "kernel_wait_us": 0.0, "other_us": 0.0}
    streams = g["stream"][rows]
    for s in np.unique(streams):
        sel = np.nonzero(streams == s)[0]
        order = sel[np.argsort(g["ts"][rows][sel], kind="stable")]
        ts, end, rt = g["ts"][rows][order], g["end"][rows][order], runtime_ts[order]
        if len(ts) < 2:
            by_stream[str(int(s))] = {"host_wait_us": 0.0, "kernel_wait_us": 0.0, "other_us": 0.0}
            continue
        gap = ts[1:] - end[:-1]
        host = rt[1:] > end[:-1]  # NaN (no launch call seen) compares False
        kern = ~host & (gap < KERNEL_WAIT_US)
        other = ~host & ~kern
        d = {
            "host_wait_us": round(float(gap[host].sum()), 3),
            "kernel_wait_us": round(float(gap[kern].sum()), 3),
            "other_us": round(float(gap[other].sum()), 3),
        }
        by_stream[str(int(s))] = d
        for k in totals:
            totals[k] += d[k]
    total = sum(totals.values())
    out: dict[str, Any] = {k: round(v, 3) for k, v in totals.items()}
    for k in ("host_wait", "kernel_wait", "other"):
        out[f"{k}_pct"] = round(100.0 * totals[f"{k}_us"] / total, 2) if total > 0 else 0.0
    out["by_stream"] = by_stream
    return out


def _launches(g: dict[str, np.ndarray], rows: np.ndarray, c: dict[str, np.ndarray]) -> dict[str, Any]:
    cpu = _lookup(c, g["corr"][rows])
    ok = cpu >= 0
    ok[ok] = c["launch"][cpu[ok]] == 1
    if not ok.any():
        return {"count": 0}
    r, k = cpu[ok], rows[ok]
    call = c["dur"][r]
    gpu_dur = g["end"][k] - g["ts"][k]
    delay = np.clip(g["ts"][k] - c["ts"][r] - call, 0, None)

    def q(a: np.ndarray, p: float) -> float:
        return round(float(np.percentile(a, p)), 3)

    return {
        "count": int(ok.sum()),
        "call_us_mean": round(float(call.mean()), 3),
        "call_us_p50": q(call, 50),
        "gpu_us_mean": round(float(gpu_dur.mean()), 3),
        "delay_us_mean": round(float(delay.mean()), 3),
        "delay_us_p50": q(delay, 50),
        "delay_us_p95": q(delay, 95),
        "delay_us_max": round(float(delay.max()), 3),
        "shorter_than_call": int((gpu_dur < call).sum()),  # kernels the host cannot keep the GPU busy with
        "calls_over_50us": int((call > 50).sum()),
        "delays_over_100us": int((delay > 100).sum()),
    }


def _top_kernels(
    g: dict[str, np.ndarray], rows: np.ndarray, kind: np.ndarray, name_list: list[str], nsteps: int, top: int
) -> list[dict[str, Any]]:
    dur = g["end"][rows] - g["ts"][rows]
    ids = g["name"][rows]
    total = np.bincount(ids, weights=dur, minlength=len(name_list))
    count = np.bincount(ids, minlength=len(name_list))
    out = []
    for i in np.argsort(-total)[:top]:
        if count[i] == 0:
            break
        out.append(
            {
                "name": name_list[i],
                "kind": kernel_kind(name_list[i]),
                "total_us": round(float(total[i]), 3),
                "count": int(count[i]),
                "mean_us": round(float(total[i] / count[i]), 3),
                "ms_per_step": round(float(total[i]) / 1e3 / nsteps, 4),
            }
        )
    return out


def _coll_rows(acc: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for name, a in sorted(acc.items(), key=lambda kv: -_union(np.array(kv[1]["ts"]), np.array(kv[1]["end"]))):
        t = _union(np.array(a["ts"]), np.array(a["end"]))
        n = a["group"]
        row = {"name": name, "count": len(a["ts"]), "time_us": round(t, 3), "bytes": int(a["bytes"]), "group_size": n}
        if a["bytes"] > 0 and t > 0:
            alg = a["bytes"] / (t * 1e-6) / 1e9
            row["algbw_GBps"] = float(f"{alg:.4g}")
            if n > 0:  # the group's size known (NCCL records it; gloo's ranges do not)
                row["busbw_GBps"] = float(f"{alg * bus_factor(name, n):.4g}")
        out.append(row)
    return out


def _gpu_collectives(
    g: dict[str, np.ndarray],
    rows: np.ndarray,
    name_list: list[str],
    kernel_coll: dict[int, tuple[str, float, int]],
    kernel_ext: dict[int, int],
    coll_meta: dict[int, tuple[str, float, int]],
) -> tuple[list[dict[str, Any]], dict[str, list[tuple[float, float, float]]]]:
    acc: dict[str, dict[str, Any]] = {}
    inst: dict[str, list[tuple[float, float, float]]] = {}
    for r in rows:
        name = name_list[g["name"][r]]
        if not _COMM_RE.match(name):
            continue
        r = int(r)
        meta = kernel_coll.get(r) or coll_meta.get(kernel_ext.get(r, -1)) or (collective_name(name), 0.0, 0)
        coll, nbytes, group = meta
        a = acc.setdefault(coll, {"ts": [], "end": [], "bytes": 0.0, "group": group})
        a["ts"].append(float(g["ts"][r]))
        a["end"].append(float(g["end"][r]))
        a["bytes"] += nbytes
        a["group"] = max(a["group"], group)
        inst.setdefault(coll, []).append((float(g["ts"][r]), float(g["end"][r]), nbytes))
    for v in inst.values():
        v.sort()
    return _coll_rows(acc), inst


def _cpu_collectives(
    ranges: list[tuple[str, float, float, float]],
) -> tuple[list[dict[str, Any]], dict[str, list[tuple[float, float, float]]]]:
    """On a CPU trace, gloo's ranges (``gloo:*``, on its own threads) are the collectives' run; the
    ``c10d::`` ops on the caller's thread are their enqueue, counted only when no gloo range is seen.
    Bytes come from the ranges' recorded shapes (:func:`_shape_bytes`; captures record them)."""
    acc: dict[str, dict[str, Any]] = {}
    inst: dict[str, list[tuple[float, float, float]]] = {}
    ran = any(n.startswith(("gloo:", "nccl:")) for n, _, _, _ in ranges)
    for name, ts, end, nbytes in ranges:
        if (ran and name.startswith("c10d::")) or name.startswith(("c10d::wait", "c10d::barrier")):
            continue
        coll = collective_name(name)
        a = acc.setdefault(coll, {"ts": [], "end": [], "bytes": 0.0, "group": 0})
        a["ts"].append(ts)
        a["end"].append(end)
        a["bytes"] += nbytes
        inst.setdefault(coll, []).append((ts, end, nbytes))
    for v in inst.values():
        v.sort()
    return _coll_rows(acc), inst


def _per_step_gpu(
    g: dict[str, np.ndarray], rows: np.ndarray, kind: np.ndarray, c: dict[str, np.ndarray], st: dict[str, np.ndarray]
) -> list[dict[str, float]]:
    """The temporal breakdown of each numbered step: a GPU activity belongs to the step its launch
    call falls in (HTA's iteration rule)."""
    num = st["num"]
    sel = num >= 0
    if not sel.any():
        return []
    s_num, s_ts, s_end = num[sel], st["ts"][sel], st["end"][sel]
    order = np.argsort(s_ts)
    s_num, s_ts, s_end = s_num[order], s_ts[order], s_end[order]
    cpu = _lookup(c, g["corr"][rows])
    launch_ts = np.where(cpu >= 0, c["ts"][np.clip(cpu, 0, None)] if len(c["ts"]) else 0.0, np.nan)
    i = np.searchsorted(s_ts, launch_ts, side="right") - 1
    ok = (i >= 0) & ~np.isnan(launch_ts)
    ok[ok] = launch_ts[ok] < s_end[i[ok]]
    out = []
    for j, n in enumerate(s_num):
        m = ok & (i == j)
        if not m.any():
            continue
        ts, end, k = g["ts"][rows][m], g["end"][rows][m], kind[m]
        t = _temporal({name: (ts[k == x], end[k == x]) for x, name in enumerate(KINDS)}, ts, end)
        out.append({"step": int(n), **{key: t[key] for key in t if key.endswith("_us")}})
    return out


def split_waits(parts: dict[int, Breakdown]) -> dict[str, Any]:
    """Each collective's time on each rank split into the wait for the latest of these ranks to
    arrive and the transfer after it: {"ranks": {rank: {collective: {"wait_us", "transfer_us",
    "count"}}}, "matched": n} or {"note": why not}."""
    ranks = sorted(parts)
    if len(ranks) < 2:
        return {"note": "one trace: the wait for peers needs two or more ranks' traces of the same steps"}
    out: dict[int, dict[str, dict[str, float]]] = {r: {} for r in ranks}
    matched = disjoint = 0
    colls = set.intersection(*(set(parts[r].instances) for r in ranks))
    for coll in sorted(colls):
        n = min(len(parts[r].instances[coll]) for r in ranks)
        for k in range(n):
            inst = {r: parts[r].instances[coll][k] for r in ranks}
            latest = max(v[0] for v in inst.values())
            if latest >= min(v[1] for v in inst.values()):
                disjoint += 1  # one rank ended before another began: not one collective, or no shared clock
                continue
            matched += 1
            for r, (ts, end, _b) in inst.items():
                wait = min(max(latest - ts, 0.0), end - ts)
                d = out[r].setdefault(coll, {"wait_us": 0.0, "transfer_us": 0.0, "count": 0})
                d["wait_us"] += wait
                d["transfer_us"] += (end - ts) - wait
                d["count"] += 1
    if matched == 0:
        return {
            "note": "no collective instance overlaps across these traces: they do not share a clock "
            "(other hosts) or are not of the same steps"
        }
    for r in ranks:
        for d in out[r].values():
            d["wait_us"], d["transfer_us"] = round(d["wait_us"], 3), round(d["transfer_us"], 3)
    return {"ranks": {str(r): out[r] for r in ranks}, "matched": matched, "unmatched": disjoint}


def summarize(parts: dict[int, Breakdown], kernels: int = 10) -> dict[str, Any]:
    """Several ranks' breakdowns as the findings JSON and ``summary.trace_breakdown`` hold them:
    {"ranks": {rank: breakdown (top ``kernels`` kernels and ops)}, "waits": :func:`split_waits`}."""
    ranks = {}
    for r, b in sorted(parts.items()):
        d = b.to_dict()
        d["kernels"], d["ops"] = d["kernels"][:kernels], d["ops"][:kernels]
        d["path"] = os.path.basename(d["path"])
        ranks[str(r)] = d
    return {"ranks": ranks, "waits": split_waits(parts)}


def breakdown_text(b: dict[str, Any], brief: bool = False) -> str:
    """A breakdown (:meth:`Breakdown.to_dict`) as the report prints it; ``brief``: its first line."""
    who = f"rank {b['rank']}" if b.get("rank") is not None else os.path.basename(b["path"])
    t = b["temporal"]
    if not t:
        return f"{who}: no GPU activity and no CPU operators in the trace"
    steps = f"steps {b['steps'][0]}-{b['steps'][-1]}" if b["steps"] else "the whole trace"
    lines = [
        f"{who} ({b['device']}, {steps}"
        + (f"; step {b['dropped_steps'][0]} left out, as HTA does" if b["dropped_steps"] else "")
        + f"): span {t['span_us'] / 1e3:.2f} ms: compute {t['compute_pct']:.1f}%, "
        f"non-compute {t['non_compute_pct']:.1f}% (communication {t.get('communication_us', 0) / 1e3:.2f} ms, "
        f"memory {t.get('memory_us', 0) / 1e3:.2f} ms), idle {t['idle_pct']:.1f}%"
    ]
    if brief:
        return lines[0]
    if b["overlap_pct"] is not None:
        lines.append(f"  communication hidden under compute: {b['overlap_pct']:.1f}%")
    i = b["idle"]
    if i:
        lines.append(
            f"  idle: host wait {i['host_wait_pct']:.1f}%, kernel wait {i['kernel_wait_pct']:.1f}%, other {i['other_pct']:.1f}%"
        )
    la = b["launch"]
    if la.get("count"):
        lines.append(
            f"  launches: {la['count']}, call {la['call_us_mean']:.1f} µs mean, delay p50 {la['delay_us_p50']:.1f} / "
            f"p95 {la['delay_us_p95']:.1f} µs; {la['shorter_than_call']} kernels shorter than their launch call"
        )
    for k in b["kernels"][:5]:
        lines.append(f"  kernel {k['total_us'] / 1e3:9.3f} ms {k['count']:>6}x  {k['name'][:100]}")
    for k in b["ops"][:5]:
        lines.append(f"  op     {k['ms_per_step']:9.3f} ms/step {k['count']:>6}x  {k['name'][:100]}")
    for c in b["collectives"]:
        bw = f", bus {c['busbw_GBps']:.2f} GB/s" if "busbw_GBps" in c else ""
        lines.append(f"  collective {c['name']}: {c['count']}x, {c['time_us'] / 1e3:.3f} ms, {c['bytes']} bytes{bw}")
    return "\n".join(lines)


def waits_text(waits: dict[str, Any]) -> list[str]:
    """:func:`split_waits` as report lines."""
    if "ranks" not in waits:
        return [f"  collectives' wait for peers: {waits.get('note', 'not measured')}"] if waits.get("note") else []
    out = []
    for r, colls in waits["ranks"].items():
        for name, d in colls.items():
            out.append(
                f"  rank {r} {name}: {d['count']}x, waiting for the latest rank {d['wait_us'] / 1e3:.2f} ms, "
                f"transfer {d['transfer_us'] / 1e3:.2f} ms"
            )
    return out

"""One profiler (Kineto) trace broken down: where the device's time goes, why it idles, how much
communication hides under computation, the top kernels and ops, launch delays and collectives.

Read in one streamed pass that keeps a few numbers per GPU activity, runtime call and CPU operation in
time buckets (:mod:`.spill`), then reduced a window of buckets at a time: memory does not grow with the
trace. The definitions (GPU activities and their kinds, steps, the temporal breakdown, the idle split,
overlap, launches, collectives; a CPU-only trace's operators standing in for kernels) are
HolisticTraceAnalysis's, so that the numbers can be held side by side: the manual's captures page says
each. Several ranks' breakdowns are held together in :mod:`.waits`; kernel kinds and collective names
are :mod:`.kernels`'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..inputs.kineto import OUR_STEP, PROFILER_STEP
from ..inputs.tracefile import iter_trace
from .diff import ProfileBuilder, TraceProfile
from .kernels import (
    _COMM_RE,
    _CPU_COLLECTIVE,
    KINDS,
    bus_factor,
    collective_meta,
    collective_name,
    kernel_kind,
    shape_bytes,
)
from .spill import Quantiles, Spill, SpillBudget, Union, covered, merge, windows

_LAUNCH_CALLS = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync"}
_KERNEL_CATS = {"kernel", "Kernel", "gpu_memset", "Memset", "gpu_memcpy", "Memcpy"}
KERNEL_WAIT_US = 30.0  # HTA's consecutive_kernel_delay


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


GPU = np.dtype(
    [("ts", "f8"), ("end", "f8"), ("stream", "i8"), ("name", "i4"), ("corr", "i8"), ("kcat", "i1"), ("coll", "i4")]
)
CALL = np.dtype([("corr", "i8"), ("ts", "f8"), ("end", "f8"), ("launch", "i1")])
CPU_OP = np.dtype([("ts", "f8"), ("end", "f8"), ("coll", "i1")])
CALL_LAG_US = 10e6  # a GPU activity is joined with a runtime call at most this long before it


def breakdown(path: str, *, steps_hint: int | None = None, hta_rounding: bool = False, top: int = 20) -> Breakdown:
    """The breakdown of the trace at ``path`` (gzip or plain), in one streamed pass and a pass over
    its events kept in time buckets (:mod:`.tracespill`). ``steps_hint``: the number of steps the
    trace holds when it has no step ranges (a capture's manifest says)."""
    meta: dict[str, Any] = {}
    names: dict[str, int] = {}
    name_list: list[str] = []

    def nid(n: str) -> int:
        i = names.get(n)
        if i is None:
            i = names[n] = len(name_list)
            name_list.append(n)
        return i

    budget = SpillBudget()
    try:
        gpu, calls, cpu_ops = Spill(GPU, budget), Spill(CALL, budget), Spill(CPU_OP, budget)
        coll_meta: dict[int, tuple[str, float, int]] = {}  # External id -> (collective, bytes, group size)
        nccl: list[tuple[str, float, int] | int] = []  # an NCCL kernel's own meta, or its External id
        steps: list[tuple[int, float, float]] = []
        step_names: set[str] = set()
        cpu_coll: list[tuple[str, float, float, float]] = []  # gloo/c10d/nccl CPU ranges: (name, start, end, bytes)
        prof = ProfileBuilder(budget)
        events = 0
        float_ts = False
        for e in iter_trace(path, meta):
            events += 1
            if type(e) is not dict or e.get("ph") != "X":
                continue
            raw_ts = e.get("ts")
            try:
                ts, dur = float(raw_ts), float(e.get("dur") or 0.0)  # pyright: ignore[reportArgumentType] - no ts: TypeError, skipped
            except (TypeError, ValueError):
                continue
            cat, name = e.get("cat") or "", e.get("name") or ""
            prof.add(cat, name, ts, dur, e.get("tid"))
            end = ts + dur
            op_ts = ts  # CPU operators are taken as written, rounded or not
            if isinstance(raw_ts, float):
                float_ts = True
                if hta_rounding:  # HTA's parser: ns timestamps inward to whole µs (the ends: below)
                    ts = float(math.ceil(ts))
            args = e.get("args")
            args = args if type(args) is dict else {}
            stream, corr = args.get("stream"), args.get("correlation", -1)
            try:
                corr = int(corr)
            except (TypeError, ValueError):
                corr = -1
            if stream is not None and corr >= 0:
                try:
                    sid = int(stream)
                except (TypeError, ValueError):
                    sid = -1
                if sid >= 0:
                    coll = -1
                    if _COMM_RE.match(name):
                        ext = args.get("External id")
                        if "Collective name" in args:
                            coll = len(nccl)
                            nccl.append(collective_meta(name, args))
                        elif isinstance(ext, int):
                            coll = len(nccl)
                            nccl.append(ext)
                    gpu.add(ts, (ts, end, sid, nid(name), corr, 1 if cat in _KERNEL_CATS else 0, coll))
                    continue
            if corr >= 0:
                calls.add(ts, (corr, ts, end, 1 if name in _LAUNCH_CALLS else 0))
            if "ProfilerStep" in name:
                step_names.add(name)
                m = PROFILER_STEP.match(name)
                # a GPU-side copy of the range counts for HTA's last step start, but numbers no step
                steps.append((int(m.group(1)) if m and cat != "gpu_user_annotation" else -1, ts, end))
            if cat == "cpu_op" or (cat == "user_annotation" and name.startswith(("gloo:", "nccl:"))):
                if not OUR_STEP.match(name):
                    is_coll = name.startswith(_CPU_COLLECTIVE)
                    cpu_ops.add(op_ts, (op_ts, end, 1 if is_coll else 0))
                    if is_coll and name.startswith(("gloo:", "c10d::", "nccl:")):
                        cpu_coll.append((name, op_ts, end, shape_bytes(args)))
                if name == "record_param_comms":
                    ext = args.get("External id")
                    if isinstance(ext, int) and args.get("Collective name"):
                        coll_meta[ext] = collective_meta(name, args)
        prof.events = events
        st = np.array(steps, dtype=[("num", "i8"), ("ts", "f8"), ("end", "f8")])
        numbered = sorted({int(n) for n in st["num"] if n >= 0})
        kept_steps, dropped = numbered, []
        last_start = None
        if len(step_names) >= 2:  # HTA's rule: the last step, and what was launched in it, left out
            last_start = float(st["ts"].max())
            last = [int(n) for n, t in zip(st["num"], st["ts"]) if t == last_start and n >= 0]
            dropped = last[:1]
            kept_steps = [n for n in numbered if n not in dropped]
        kinds = np.array([KINDS.index(kernel_kind(n)) for n in name_list], dtype=np.int8)
        # with any timestamp in ns, HTA rounds every activity's and runtime call's end down to a µs
        acc = _Passes(kinds, name_list, st, last_start, floor_ends=hta_rounding and float_ts)
        for lo, hi, w in windows({"gpu": gpu, "calls": calls, "ops": cpu_ops}):
            acc.window(lo, hi, w["gpu"], w["calls"], w["ops"])
        profile = prof.result(path, steps_hint or max(len(kept_steps), 1))
    finally:
        budget.close()
    rank = (meta.get("distributedInfo") or {}).get("rank") if isinstance(meta.get("distributedInfo"), dict) else None
    nsteps = max(len(kept_steps), 1) if kept_steps else profile.steps
    if acc.kept:
        device = "gpu"
        temporal = acc.gpu.temporal()
        overlap = acc.gpu.overlap()
        per_step = acc.per_step()
        idle = acc.idle_split()
        launch = acc.launches()
        kernels = _top_kernels(acc.k_total, acc.k_count, name_list, nsteps, top)
        collectives, instances = _gpu_collectives(acc.comm, nccl, coll_meta, name_list)
    else:
        device = "cpu"
        temporal = acc.cpu.temporal()
        overlap = acc.cpu.overlap()
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


class _Temporal:
    """The temporal breakdown fed a window at a time: a union per kind, one of everything (the span
    and the idle time), and the communication the compute covers (overlap)."""

    def __init__(self, kinds: tuple[str, ...]) -> None:
        self.all = Union()
        self.kind = {k: Union() for k in kinds}
        self.comm_total = 0.0
        self.comm_covered = 0.0

    def add(
        self, ts: np.ndarray, end: np.ndarray, kind: np.ndarray, lo: float, hi: float, names: tuple[str, ...]
    ) -> None:
        self.all.add(ts, end, lo, hi)
        pieces = {}
        for i, k in enumerate(names):
            sel = kind == i
            pieces[k] = self.kind[k].add(ts[sel], end[sel], lo, hi)
        if "communication" in pieces and "compute" in pieces:
            c_ts, c_end = pieces["communication"]
            self.comm_total += float(np.clip(c_end - c_ts, 0, None).sum())
            self.comm_covered += covered(c_ts, c_end, *pieces["compute"])

    def temporal(self) -> dict[str, float]:
        if self.all.first == math.inf:
            return {}
        span = self.all.last - self.all.first
        out = {"span_us": round(span, 3), "idle_us": round(span - self.all.total, 3)}
        for k, u in self.kind.items():
            out[f"{k}_us"] = round(u.total, 3)
        out["non_compute_us"] = round(span - out.get("compute_us", 0.0) - out["idle_us"], 3)
        for k in ("idle", "compute", "non_compute"):
            out[f"{k}_pct"] = round(100.0 * out[f"{k}_us"] / span, 2) if span > 0 else 0.0
        return out

    def overlap(self) -> float | None:
        """The share (%) of the communication's union that the compute's covers."""
        if self.comm_total <= 0:
            return None
        return round(100.0 * self.comm_covered / self.comm_total, 2)


class _Passes:
    """What the breakdown gathers from each window of a trace's events (:func:`breakdown`): the
    GPU activities joined with their runtime calls (those of the last :data:`CALL_LAG_US` kept, by
    correlation), then the temporal breakdown (GPU and CPU), per step, the idle split per stream,
    the launches, the kernels' totals and the NCCL kernels, each carrying on what a window leaves
    open."""

    def __init__(
        self, kinds: np.ndarray, name_list: list[str], st: np.ndarray, last_start: float | None, floor_ends: bool
    ) -> None:
        self.kinds, self.name_list, self.last_start, self.floor_ends = kinds, name_list, last_start, floor_ends
        self.gpu = _Temporal(KINDS)
        self.cpu = _Temporal(("compute", "communication"))
        self.kept = 0
        self.calls = np.zeros(0, dtype=CALL)  # the runtime calls still joinable, sorted by correlation
        sel = st["num"] >= 0
        order = np.argsort(st["ts"][sel], kind="stable")
        self.s_num, self.s_ts, self.s_end = st["num"][sel][order], st["ts"][sel][order], st["end"][sel][order]
        self.steps = [_Temporal(KINDS) for _ in self.s_num]
        self.last_end: dict[int, float] = {}  # stream -> its latest activity's end (start order)
        self.idle: dict[int, list[float]] = {}  # stream -> [host, kernel, other] wait
        self.l_n = 0
        self.l_sum = {"call": 0.0, "gpu": 0.0, "delay": 0.0}
        self.l_max = 0.0
        self.l_counts = {"shorter_than_call": 0, "calls_over_50us": 0, "delays_over_100us": 0}
        self.q_call, self.q_delay = Quantiles(), Quantiles()
        self.k_total = np.zeros(len(name_list))
        self.k_count = np.zeros(len(name_list), dtype=np.int64)
        self.comm: list[tuple[float, float, int, int]] = []  # NCCL kernels kept: (ts, end, name, meta index)

    def _join(self, calls: np.ndarray, g: np.ndarray, lo: float) -> np.ndarray:
        """The row in :attr:`calls` of each activity's runtime call (-1 when none)."""
        if len(calls):
            keep = self.calls[self.calls["ts"] >= lo - CALL_LAG_US] if math.isfinite(lo) else self.calls
            both = np.concatenate([keep, calls])
            self.calls = both[np.argsort(both["corr"], kind="stable")]
        elif math.isfinite(lo) and len(self.calls):
            self.calls = self.calls[self.calls["ts"] >= lo - CALL_LAG_US]
        keys = self.calls["corr"]
        if len(keys) == 0 or len(g) == 0:
            return np.full(len(g), -1)
        i = np.clip(np.searchsorted(keys, g["corr"]), 0, len(keys) - 1)
        return np.where(keys[i] == g["corr"], i, -1)

    def window(self, lo: float, hi: float, g: np.ndarray, calls: np.ndarray, ops: np.ndarray) -> None:
        self.cpu.add(ops["ts"], ops["end"], ops["coll"], lo, hi, ("compute", "communication"))
        if self.floor_ends:
            g, calls = g.copy(), calls.copy()
            g["end"], calls["end"] = np.floor(g["end"]), np.floor(calls["end"])
        cpu = self._join(calls, g, lo)
        found = cpu >= 0
        c_ts = np.where(found, self.calls["ts"][np.clip(cpu, 0, None)] if len(self.calls) else 0.0, np.nan)
        keep = np.ones(len(g), dtype=bool) if self.last_start is None else found & (c_ts < self.last_start)
        g, cpu, c_ts = g[keep], cpu[keep], c_ts[keep]
        self.kept += len(g)
        kind = self.kinds[g["name"]] if len(g) else np.zeros(0, dtype=np.int8)
        self.gpu.add(g["ts"], g["end"], kind, lo, hi, KINDS)
        self._per_step(g, kind, c_ts, lo, hi)
        self._idle(g, c_ts)
        self._launches(g, cpu)
        dur = g["end"] - g["ts"]
        self.k_total += np.bincount(g["name"], weights=dur, minlength=len(self.name_list))
        self.k_count += np.bincount(g["name"], minlength=len(self.name_list))
        comm = np.nonzero(kind == 1)[0]
        for r in comm[np.argsort(g["ts"][comm], kind="stable")]:
            self.comm.append((float(g["ts"][r]), float(g["end"][r]), int(g["name"][r]), int(g["coll"][r])))

    def _per_step(self, g: np.ndarray, kind: np.ndarray, c_ts: np.ndarray, lo: float, hi: float) -> None:
        """A GPU activity belongs to the step its launch call falls in (HTA's iteration rule)."""
        if not len(self.s_num):
            return
        i = np.searchsorted(self.s_ts, c_ts, side="right") - 1
        ok = (i >= 0) & ~np.isnan(c_ts)
        ok[ok] = c_ts[ok] < self.s_end[i[ok]]
        for j in np.unique(i[ok]):
            m = ok & (i == j)
            self.steps[j].add(g["ts"][m], g["end"][m], kind[m], lo, hi, KINDS)

    def per_step(self) -> list[dict[str, float]]:
        out = []
        for n, t in zip(self.s_num, self.steps):
            d = t.temporal()
            if d:
                out.append({"step": int(n), **{key: d[key] for key in d if key.endswith("_us")}})
        return out

    def _idle(self, g: np.ndarray, c_ts: np.ndarray) -> None:
        """Each gap before a kernel on its stream (from the previous one's end): host wait when its
        launch call started after that end, else kernel wait under 30 µs, else other."""
        sel = g["kcat"] == 1
        g, c_ts = g[sel], c_ts[sel]
        for s in np.unique(g["stream"]):
            m = np.nonzero(g["stream"] == s)[0]
            order = m[np.argsort(g["ts"][m], kind="stable")]
            ts, end, rt = g["ts"][order], g["end"][order], c_ts[order]
            s = int(s)
            d = self.idle.setdefault(s, [0.0, 0.0, 0.0])
            prev = self.last_end.get(s)
            if prev is not None:
                ts_, rt_, prev_end = ts, rt, np.concatenate([[prev], end[:-1]])
            else:
                ts_, rt_, prev_end = ts[1:], rt[1:], end[:-1]
            self.last_end[s] = float(end[-1])
            gap = ts_ - prev_end
            host = rt_ > prev_end  # NaN (no launch call seen) compares False
            kern = ~host & (gap < KERNEL_WAIT_US)
            d[0] += float(gap[host].sum())
            d[1] += float(gap[kern].sum())
            d[2] += float(gap[~host & ~kern].sum())

    def idle_split(self) -> dict[str, Any]:
        by_stream = {}
        totals = {"host_wait_us": 0.0, "kernel_wait_us": 0.0, "other_us": 0.0}
        for s in sorted(self.idle):
            d = dict(zip(totals, (round(v, 3) for v in self.idle[s])))
            by_stream[str(s)] = d
            for k in totals:
                totals[k] += d[k]
        total = sum(totals.values())
        out: dict[str, Any] = {k: round(v, 3) for k, v in totals.items()}
        for k in ("host_wait", "kernel_wait", "other"):
            out[f"{k}_pct"] = round(100.0 * totals[f"{k}_us"] / total, 2) if total > 0 else 0.0
        out["by_stream"] = by_stream
        return out

    def _launches(self, g: np.ndarray, cpu: np.ndarray) -> None:
        ok = cpu >= 0
        ok[ok] = self.calls["launch"][cpu[ok]] == 1
        if not ok.any():
            return
        r, k = cpu[ok], np.nonzero(ok)[0]
        call = self.calls["end"][r] - self.calls["ts"][r]
        gpu_dur = g["end"][k] - g["ts"][k]
        delay = np.clip(g["ts"][k] - self.calls["ts"][r] - call, 0, None)
        self.l_n += len(r)
        self.l_sum["call"] += float(call.sum())
        self.l_sum["gpu"] += float(gpu_dur.sum())
        self.l_sum["delay"] += float(delay.sum())
        self.l_max = max(self.l_max, float(delay.max()))
        self.l_counts["shorter_than_call"] += int((gpu_dur < call).sum())
        self.l_counts["calls_over_50us"] += int((call > 50).sum())
        self.l_counts["delays_over_100us"] += int((delay > 100).sum())
        self.q_call.add(call)
        self.q_delay.add(delay)

    def launches(self) -> dict[str, Any]:
        n = self.l_n
        if not n:
            return {"count": 0}
        return {
            "count": n,
            "call_us_mean": round(self.l_sum["call"] / n, 3),
            "call_us_p50": round(self.q_call.percentile(50), 3),
            "gpu_us_mean": round(self.l_sum["gpu"] / n, 3),
            "delay_us_mean": round(self.l_sum["delay"] / n, 3),
            "delay_us_p50": round(self.q_delay.percentile(50), 3),
            "delay_us_p95": round(self.q_delay.percentile(95), 3),
            "delay_us_max": round(self.l_max, 3),
            **self.l_counts,  # shorter_than_call: kernels the host cannot keep the GPU busy with
        }


def _union(ts: np.ndarray, end: np.ndarray) -> float:
    m_ts, m_end = merge(ts, end)
    return float((m_end - m_ts).sum())


def _top_kernels(
    total: np.ndarray, count: np.ndarray, name_list: list[str], nsteps: int, top: int
) -> list[dict[str, Any]]:
    out = []
    for i in np.argsort(-total, kind="stable")[:top]:
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
    kernels: list[tuple[float, float, int, int]],
    nccl: list[tuple[str, float, int] | int],
    coll_meta: dict[int, tuple[str, float, int]],
    name_list: list[str],
) -> tuple[list[dict[str, Any]], dict[str, list[tuple[float, float, float]]]]:
    """The NCCL kernels kept ((start, end, name id, index into ``nccl``: the kernel's own collective
    meta, or its External id, whose ``record_param_comms`` op has it), per collective."""
    acc: dict[str, dict[str, Any]] = {}
    inst: dict[str, list[tuple[float, float, float]]] = {}
    for ts, end, name, ref in kernels:
        own = nccl[ref] if ref >= 0 else None
        meta = own if isinstance(own, tuple) else coll_meta.get(own)  # pyright: ignore[reportArgumentType] - an External id's, or none (get(None): None)
        coll, nbytes, group = meta or (collective_name(name_list[name]), 0.0, 0)
        a = acc.setdefault(coll, {"ts": [], "end": [], "bytes": 0.0, "group": group})
        a["ts"].append(ts)
        a["end"].append(end)
        a["bytes"] += nbytes
        a["group"] = max(a["group"], group)
        inst.setdefault(coll, []).append((ts, end, nbytes))
    for v in inst.values():
        v.sort()
    return _coll_rows(acc), inst


def _cpu_collectives(
    ranges: list[tuple[str, float, float, float]],
) -> tuple[list[dict[str, Any]], dict[str, list[tuple[float, float, float]]]]:
    """On a CPU trace, gloo's ranges (``gloo:*``, on its own threads) are the collectives' run; the
    ``c10d::`` ops on the caller's thread are their enqueue, counted only when no gloo range is seen.
    Bytes come from the ranges' recorded shapes (:func:`.kernels.shape_bytes`; captures record them)."""
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

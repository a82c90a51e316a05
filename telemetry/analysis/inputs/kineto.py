"""PyTorch profiler (Kineto) traces -> a steps table (:func:`read_trace_dir`).

Input: a directory of per-rank Chrome trace files (``*.json``, ``*.json.gz``, as ``torch.profiler``
writes them and HTA reads them; files directly in it only; a file that is not a trace is skipped with
a warning). Each file is streamed (:func:`iter_trace`), never loaded whole: a few numbers per kernel,
CPU operation or launch are kept in typed arrays and attributed to steps and phases in blocks, so
memory grows with the events, at a small fraction of the file's size. The table's phases are compute
and ``comm_s`` the time in collectives, as in a per-operation trace's table. How ranks, steps, phases
and communication are read: docs/integrations.md, "The PyTorch profiler"; the finer rules: :func:`file_rows`.
"""

from __future__ import annotations

import gzip
import logging
import os
import re
from array import array
from typing import Any, cast

import numpy as np
import pandas as pd

from ...steptable.table import TableError
from .tracefile import iter_trace

log = logging.getLogger("telemetry")

SUFFIXES = (".json", ".json.gz")
PROFILER_STEP = re.compile(r"ProfilerStep\s*#\s*(\d+)")
OUR_STEP = re.compile(r"telemetry\.step#(\d+)$")
_RANK_IN_NAME = (re.compile(r"rank[-_.]?(\d+)", re.I), re.compile(r"_(\d+)\."))
_HEAD = 1 << 20  # bytes read to recognise a trace file
_BLOCK = 1 << 14  # kernels or operations attributed at a time
_DATA_PREFIX = "enumerate(DataLoader)"
DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "half": 2,
    "float16": 2,
    "bfloat16": 2,
    "double": 8,
    "float64": 8,
    "int": 4,
    "int32": 4,
    "long": 8,
    "int64": 8,
    "short": 2,
    "int16": 2,
    "char": 1,
    "int8": 1,
    "byte": 1,
    "uint8": 1,
    "bool": 1,
    "complexfloat": 8,
    "complexdouble": 16,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
}
RESERVED = frozenset({"start", "duration", "comm", "step", "rank", "data", "other"})


# ---- streaming -----------------------------------------------------------------------------------


class _Cols:
    """Compact columns: one typed array per field."""

    def __init__(self, **types: str) -> None:
        self.cols = {k: array(t) for k, t in types.items()}

    def add(self, *values: float) -> None:
        for col, v in zip(self.cols.values(), values):
            col.append(v)

    def np(self, name: str) -> np.ndarray:
        col = self.cols[name]
        # A view of the array's own buffer (no copy): nothing is appended once the file is read.
        return np.frombuffer(col, dtype=col.typecode) if len(col) else np.zeros(0, dtype=col.typecode)

    def __len__(self) -> int:
        return len(next(iter(self.cols.values())))


class _FileScan:
    """One file's events reduced to what the steps table needs."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.top: dict[str, Any] = {}
        self.tids: dict[Any, int] = {}
        self.names: dict[str, int] = {}
        self.our_steps = _Cols(n="q", ts="d", dur="d", tid="i")
        self.prof_steps = _Cols(n="q", ts="d", dur="d", tid="i")
        self.annotations = _Cols(ts="d", dur="d", tid="i", name="i")  # candidate phases
        self.data = _Cols(ts="d", dur="d", tid="i")
        self.launches = _Cols(corr="q", ts="d")
        self.kernels = _Cols(ts="d", dur="d", corr="q", comm="b")
        self.ops = _Cols(ts="d", dur="d", tid="i", comm="b")
        self.cpu_comm = _Cols(ts="d", dur="d", nbytes="d")
        self.events = 0

    def _tid(self, tid: int | str | None) -> int:
        t = self.tids.get(tid)
        if t is None:
            t = self.tids[tid] = len(self.tids)
        return t

    def scan(self) -> "_FileScan":
        for e in iter_trace(self.path, self.top):
            self.events += 1
            if type(e) is not dict or e.get("ph") != "X":
                continue
            try:
                ts = float(e["ts"])
                dur = float(e.get("dur") or 0.0)
            except (KeyError, TypeError, ValueError):
                continue
            cat = e.get("cat") or ""
            name = e.get("name") or ""
            if cat == "kernel":
                args = e.get("args") or {}
                low = name.lower()
                self.kernels.add(ts, dur, int(args.get("correlation", -1) or -1), "nccl" in low)
            elif cat == "cpu_op":
                if name == "record_param_comms":
                    self.cpu_comm.add(ts, dur, _comm_bytes(e.get("args") or {}))
                    self.ops.add(ts, dur, self._tid(e.get("tid")), True)
                else:
                    self.ops.add(ts, dur, self._tid(e.get("tid")), name.startswith(("c10d::", "nccl:", "gloo:")))
            elif cat == "user_annotation":
                m = PROFILER_STEP.match(name)
                if m:
                    self.prof_steps.add(int(m.group(1)), ts, dur, self._tid(e.get("tid")))
                    continue
                m = OUR_STEP.match(name)
                if m:
                    self.our_steps.add(int(m.group(1)), ts, dur, self._tid(e.get("tid")))
                elif name.startswith(_DATA_PREFIX):
                    self.data.add(ts, dur, self._tid(e.get("tid")))
                elif name.startswith(("gloo:", "nccl:")):
                    self.cpu_comm.add(ts, dur, 0.0)
                else:
                    nid = self.names.get(name)
                    if nid is None:
                        nid = self.names[name] = len(self.names)
                    self.annotations.add(ts, dur, self._tid(e.get("tid")), nid)
            elif cat in ("cuda_runtime", "cuda_driver"):
                corr = (e.get("args") or {}).get("correlation")
                if corr is not None:
                    self.launches.add(int(corr), ts)
        return self

    def rank(self) -> int:
        info = self.top.get("distributedInfo")
        rank = info.get("rank") if isinstance(info, dict) else None
        if isinstance(rank, int) or (isinstance(rank, str) and rank.isdigit()):
            return int(rank)
        return rank_from_name(self.path)


def rank_from_name(path: str) -> int:
    name = os.path.basename(path)
    for pattern in _RANK_IN_NAME:
        m = pattern.search(name)
        if m:
            return int(m.group(1))
    raise TableError(
        f"{name}: a trace without distributedInfo and no rank in its file name "
        "(accepted: distributedInfo.rank in the trace, or a name such as rank-3, rank3 "
        "or worker_3.json)"
    )


def _comm_bytes(args: dict[str, Any]) -> float:
    try:
        n = max(float(args.get("In msg nelems") or 0), float(args.get("Out msg nelems") or 0))
    except (TypeError, ValueError):
        return 0.0
    size = DTYPE_BYTES.get(str(args.get("dtype", "")).lower().replace("torch.", ""), 0)
    return n * size


def phase_name(annotation: str) -> str:
    """An annotation's name as a steps-table phase (an identifier): ``DistributedDataParallel.forward``
    -> ``forward``, ``Optimizer.step#...`` -> ``optimizer``, others lower-cased with every run of other
    characters as ``_``."""
    if annotation.startswith("Optimizer."):
        return "optimizer"
    if annotation.startswith("DistributedDataParallel.") or annotation.startswith("FullyShardedDataParallel."):
        annotation = annotation.split(".", 1)[1]
    if annotation.isidentifier() and annotation not in RESERVED:
        return annotation
    name = re.sub(r"\W+", "_", annotation).strip("_").lower() or "annotation"
    if not name.isidentifier():
        name = "a_" + name
    return name + "_" if name in RESERVED else name


# ---- one file -> rows --------------------------------------------------------------------------


def _union(starts: np.ndarray, ends: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group, the length of the union of its intervals."""
    out = np.zeros(n_groups)
    if not len(starts):
        return out
    order = np.lexsort((starts, group))
    g, s, e = group[order], starts[order], ends[order]
    # Running end within each group: an interval adds only what reaches past the ones before it.
    reach = pd.Series(e).groupby(g).cummax().to_numpy()
    prev = np.full(len(s), -np.inf)
    same = np.r_[False, g[1:] == g[:-1]]
    prev[1:] = np.where(same[1:], reach[:-1], -np.inf)
    add = np.clip(e - np.maximum(s, prev), 0, None)
    np.add.at(out, g, add)
    return out


def _locate(points: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Index of the (sorted, disjoint) interval holding each point; -1 where none."""
    if not len(starts):
        return np.full(len(points), -1)
    i = np.searchsorted(starts, points, side="right") - 1
    ok = (i >= 0) & (points < ends[np.clip(i, 0, None)])
    return np.where(ok, i, -1)


def file_rows(scan: _FileScan, rank: int, warnings: list[str]) -> pd.DataFrame | None:
    """One file's rows of the steps table; a file with no step is skipped (said in ``warnings``).

    - steps: ``telemetry.step#N`` ranges where the trace has them (the run store's numbers, starts and
      durations), else ``ProfilerStep#N`` (N counts from the profiler's creation; one with no work,
      collective or annotation in it, as after the loop's last ``prof.step()``, is not a step);
      ``start_s`` is epoch seconds (``baseTimeNanoseconds`` + ``ts``);
    - ``data_s``: the ``enumerate(DataLoader)#...`` annotations inside a ``ProfilerStep`` (which then
      starts after them, as the run store times a step from its batch's arrival), or between the
      previous ``telemetry.step`` range's end and this one's end;
    - phases: the annotations directly inside the step on its thread (collective and data-loader ones
      excepted), named by :func:`phase_name`; a kernel counts in the phase its ``cudaLaunchKernel`` ran
      in (the ``correlation`` id); on a CPU-only trace, the top-level ``cpu_op``s that started inside
      it; compute outside every phase is ``other_s``; memory copies and sets count as neither;
    - ``comm_s``: the union of ``nccl`` kernels' intervals, else of the CPU's collective ranges
      (``record_param_comms``, ``gloo:``/``nccl:`` annotations), in the step their launch (or start)
      fell in; ``comm_bytes``: per ``record_param_comms``, the larger of ``In/Out msg nelems`` x its
      dtype's size (:data:`DTYPE_BYTES`; gloo's CPU traces have none: then no ``comm_bytes``)."""
    name = os.path.basename(scan.path)
    ours = len(scan.our_steps) > 0
    steps = scan.our_steps if ours else scan.prof_steps
    if not len(steps):
        warnings.append(f"{name}: no steps (no ProfilerStep#N or telemetry.step#N annotation); skipped")
        return None
    n, s_ts, s_dur, s_tid = (steps.np(k) for k in ("n", "ts", "dur", "tid"))
    order = np.argsort(s_ts, kind="stable")
    n, s_ts, s_dur, s_tid = n[order], s_ts[order], s_dur[order], s_tid[order]
    s_end = s_ts + s_dur
    k = len(n)
    base_s = float(scan.top.get("baseTimeNanoseconds") or 0) * 1e-9

    # Data wait
    d_ts, d_dur = scan.data.np("ts"), scan.data.np("dur")
    data = np.zeros(k)
    if len(d_ts):
        if ours:  # after the previous step's end, up to this step's end
            lo = np.r_[-np.inf, s_end[:-1]]
            i = np.searchsorted(s_end, d_ts, side="left")
            ok = (i < k) & (d_ts >= lo[np.clip(i, 0, k - 1)])
        else:
            i = _locate(d_ts, s_ts, s_end)
            ok = i >= 0
        np.add.at(data, i[ok], d_dur[ok])
    start = s_ts if ours else s_ts + data
    duration = s_dur if ours else s_dur - data

    # Phases: annotations directly inside the step, on its thread
    a_ts, a_dur, a_tid, a_name = (scan.annotations.np(c) for c in ("ts", "dur", "tid", "name"))
    a_step = _locate(a_ts, s_ts, s_end)
    a_in = np.clip(a_step, 0, None)
    inside = (a_step >= 0) & (a_tid == s_tid[a_in]) & (a_ts + a_dur <= s_end[a_in])
    idx = np.flatnonzero(inside)
    idx = idx[np.lexsort((-a_dur[idx], a_ts[idx]))]
    top_idx = []
    reach = -np.inf
    last_step = -1
    for j in idx:  # annotations of the step's thread in time order: top level unless inside the last
        if a_step[j] != last_step:
            reach, last_step = -np.inf, a_step[j]
        if a_ts[j] >= reach:
            top_idx.append(j)
            reach = a_ts[j] + a_dur[j]
    top_idx = np.array(top_idx, dtype=int)
    id_to_phase = {i: phase_name(nm) for nm, i in scan.names.items()}
    p_ts, p_end = a_ts[top_idx], a_ts[top_idx] + a_dur[top_idx]
    p_name = np.array([id_to_phase[i] for i in a_name[top_idx]], dtype=object)
    porder = np.argsort(p_ts, kind="stable")
    p_ts, p_end, p_name = p_ts[porder], p_end[porder], p_name[porder]
    phases = list(dict.fromkeys(p_name))  # in the order the steps first ran them
    phase_ix = {p: i for i, p in enumerate(phases)}
    p_col = np.array([phase_ix[p] for p in p_name], dtype=int)
    other = len(phases)
    compute = np.zeros((k, other + 1))

    d_order = np.argsort(d_ts)
    d_lo, d_hi = d_ts[d_order], (d_ts + d_dur)[d_order]

    def attribute(when: np.ndarray, amount: np.ndarray) -> None:
        """Compute at times ``when`` (a launch or an op's start) -> its step's phase, or other;
        nothing inside a data-loader annotation. In blocks: the temporaries stay small."""
        for lo in range(0, len(when), _BLOCK):
            w, a = when[lo : lo + _BLOCK], amount[lo : lo + _BLOCK]
            st = _locate(w, s_ts, s_end)
            ph = _locate(w, p_ts, p_end)
            col = np.where(ph >= 0, p_col[np.clip(ph, 0, None)] if len(p_col) else other, other)
            ok = st >= 0
            if len(d_lo):
                ok &= _locate(w, d_lo, d_hi) < 0
            np.add.at(compute, (st[ok], col[ok]), a[ok])

    comm = np.zeros(k)
    k_ts, k_dur, k_corr, k_comm = (scan.kernels.np(c) for c in ("ts", "dur", "corr", "comm"))
    gpu = len(k_ts) > 0
    if gpu:
        l_corr, l_ts = scan.launches.np("corr"), scan.launches.np("ts")
        if len(l_corr):
            lo = np.argsort(l_corr, kind="stable")
            l_corr, l_ts = l_corr[lo], l_ts[lo]
            del lo
        comm_parts = []
        for lo in range(0, len(k_ts), _BLOCK):
            sl = slice(lo, lo + _BLOCK)
            when = k_ts[sl].copy()  # launch time where the launch is known, else the kernel's own start
            if len(l_corr):
                j = np.clip(np.searchsorted(l_corr, k_corr[sl]), 0, len(l_corr) - 1)
                hit = l_corr[j] == k_corr[sl]
                when[hit] = l_ts[j[hit]]
            c = k_comm[sl].astype(bool)
            attribute(when[~c], k_dur[sl][~c])
            if c.any():
                st = _locate(when[c], s_ts, s_end)
                ok = st >= 0
                comm_parts.append((k_ts[sl][c][ok], (k_ts[sl] + k_dur[sl])[c][ok], st[ok]))
        if comm_parts:
            comm = _union(*(np.concatenate(p) for p in zip(*comm_parts)), k)  # pyright: ignore[reportCallIssue] - three arrays (the parts' triples), then k
    else:
        o_ts, o_dur, o_tid, o_comm = (scan.ops.np(c) for c in ("ts", "dur", "tid", "comm"))
        if len(o_ts):
            oo = np.lexsort((-o_dur, o_ts, o_tid))
            o_ts, o_dur, o_tid, o_comm = o_ts[oo], o_dur[oo], o_tid[oo], o_comm[oo]
            del oo
            top = ~o_comm.astype(bool)
            for t in np.unique(o_tid):  # top level: starts at or after every earlier op's end on its thread
                ix = np.flatnonzero(o_tid == t)
                reach = np.maximum.accumulate(o_ts[ix] + o_dur[ix])
                top[ix[1:]] &= o_ts[ix[1:]] >= reach[:-1]
            attribute(o_ts[top], o_dur[top])
    c_ts, c_dur, c_bytes = scan.cpu_comm.np("ts"), scan.cpu_comm.np("dur"), scan.cpu_comm.np("nbytes")
    st = _locate(c_ts, s_ts, s_end)
    ok = st >= 0
    if not gpu:
        comm = _union(c_ts[ok], (c_ts + c_dur)[ok], st[ok], k)
    nbytes = np.zeros(k)
    np.add.at(nbytes, st[ok], c_bytes[ok])

    us = 1e-6
    table = pd.DataFrame(
        {
            "rank": np.full(k, rank, dtype=np.int64),
            "step": n.astype(np.int64),
            "start_s": base_s + start * us,
            "duration_s": duration * us,
        }
    )
    for p, i in phase_ix.items():
        table[f"{p}_s"] = compute[:, i] * us
    if compute[:, other].any() or not phases:
        table["other_s"] = compute[:, other] * us
    if len(d_ts):
        table["data_s"] = data * us
    table["comm_s"] = comm * us
    if nbytes.any():
        table["comm_bytes"] = nbytes
    if not ours:
        # The profiler's last step, after the loop's last prof.step(), often holds nothing but the
        # data loader's final next() (StopIteration): no work, no collective, no annotation.
        has_phase = np.zeros(k, dtype=bool)
        has_phase[a_step[top_idx]] = True
        empty = (compute.sum(axis=1) == 0) & (comm == 0) & ~has_phase
        if empty.any():
            table = cast(pd.DataFrame, table[~empty]).reset_index(drop=True)
    return table


# ---- a directory -------------------------------------------------------------------------------


def trace_files(path: str) -> list[str]:
    return sorted(
        os.path.join(path, f)
        for f in os.listdir(path)
        if f.lower().endswith(SUFFIXES) and os.path.isfile(os.path.join(path, f))
    )


def looks_like_trace(path: str) -> bool:
    """A Chrome trace file: its first MiB names ``traceEvents`` (or it is a list of events)."""
    try:
        opener = gzip.open if path.lower().endswith(".gz") else open
        with opener(path, "rb") as f:
            head = f.read(_HEAD)
    except (OSError, EOFError, gzip.BadGzipFile):
        return False
    text = head.lstrip()
    return b'"traceEvents"' in head or (text.startswith(b"[") and b'"ph"' in text[:4096])


def is_trace_dir(path: str) -> bool:
    return any(looks_like_trace(f) for f in trace_files(path))


def read_trace_dir(
    path: str, warnings: list[str] | None = None
) -> tuple[pd.DataFrame, dict[str, Any], dict[int, dict]]:
    """A directory of per-rank Kineto traces -> (steps table, meta, ranks). Raises TableError for a
    file whose rank cannot be told, or when no file holds a step."""
    warnings = warnings if warnings is not None else []
    tables, ranks, world, files = [], {}, None, []
    for f in trace_files(path):
        name = os.path.basename(f)
        if not looks_like_trace(f):
            warnings.append(f"{name}: not a Chrome trace (no traceEvents); skipped")
            continue
        scan = _FileScan(f).scan()
        rank = scan.rank()
        info = scan.top.get("distributedInfo") or {}
        if isinstance(info, dict) and isinstance(info.get("world_size"), int):
            world = max(world or 0, info["world_size"])
        ranks.setdefault(rank, {}).update(
            {k: v for k, v in (("host", scan.top.get("host_name")), ("trace", name)) if v}
        )
        rows = file_rows(scan, rank, warnings)
        files.append(name)
        if rows is not None:
            tables.append(rows)
        log.info(
            "telemetry: %s: rank %d, %d events, %d steps", name, rank, scan.events, 0 if rows is None else len(rows)
        )
    if not tables:
        raise TableError(
            f"{path!r}: no steps in its {len(files)} trace file(s) (no ProfilerStep#N or "
            "telemetry.step#N annotation); accepted: traces of a profiled loop that calls "
            "prof.step(), or of telemetry.init(profiler_ranges=True)"
        )
    table = pd.concat(tables, ignore_index=True, sort=False)
    for c in table.columns:
        if c.endswith("_s") and c not in ("start_s", "duration_s"):
            table[c] = table[c].fillna(0.0)
    table = table.sort_values(["rank", "step"], kind="stable").reset_index(drop=True)
    hosts = {r: info["host"] for r, info in ranks.items() if info.get("host")}
    if hosts and len(set(hosts.values())) > 1:
        table["node"] = table["rank"].map(hosts).astype(object)
    meta = {"source": "kineto", "world_size": world or len(ranks), "files": files}
    return table, meta, ranks

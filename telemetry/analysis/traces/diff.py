"""Slow rank against peer: two profiler (Kineto) traces compared op by op, kernel by kernel and
collective by collective, by **self** time per step.

:func:`profile` streams a trace (:func:`~..inputs.tracefile.iter_trace`) into a :class:`TraceProfile`: self time
and count per (kind, name), per step, with memory that does not grow with the trace (CPU operations in
time buckets, :mod:`.spill`). :func:`trace_diff` ranks the names by the time per step the flagged
rank spends beyond the peer (``flagged_ms_per_step - peer_ms_per_step``), largest first; ``ratio`` is
None where the peer spent nothing. The findings JSON's ``trace_diff`` entries are these dicts. What
counts as an op, a kernel and a collective, what is left out, the steps: docs/captures.md, "A slow
rank against a peer".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..inputs.kineto import OUR_STEP, PROFILER_STEP
from ..inputs.tracefile import iter_trace
from .spill import Spill, SpillBudget, windows

_COLLECTIVE_OPS = ("record_param_comms", "c10d::", "gloo:", "nccl:")
KINDS = ("op", "kernel", "collective")


@dataclass
class TraceProfile:
    """One trace reduced to self time (µs) and count per (kind, name), and its steps."""

    path: str
    steps: int
    self_us: dict[tuple[str, str], float] = field(default_factory=dict)
    count: dict[tuple[str, str], int] = field(default_factory=dict)
    events: int = 0

    def per_step(self) -> dict[tuple[str, str], tuple[float, float]]:
        """(kind, name) -> (ms per step, calls per step)."""
        n = max(self.steps, 1)
        return {k: (v / 1e3 / n, self.count.get(k, 0) / n) for k, v in self.self_us.items()}


def profile(path: str, steps: int | None = None) -> TraceProfile:
    """Self time and count per (kind, name) of the trace at ``path`` (``steps``: its number of steps
    when the trace has no step ranges)."""
    b = ProfileBuilder()
    top: dict[str, Any] = {}
    for e in iter_trace(path, top):
        b.events += 1
        if type(e) is not dict or e.get("ph") != "X":
            continue
        try:
            ts, dur = float(e["ts"]), float(e.get("dur") or 0.0)
        except (KeyError, TypeError, ValueError):
            continue
        b.add(e.get("cat") or "", e.get("name") or "", ts, dur, e.get("tid"))
    return b.result(path, steps)


class ProfileBuilder:
    """:func:`profile`'s state, fed one complete event at a time (also by the breakdown's own pass
    over a trace, so that one reading gives both). CPU operations go to a time-bucketed
    :class:`~.tracespill.Spill` and are nested a window at a time, each thread's open operators
    carried from one window to the next: memory does not grow with the trace."""

    OP = np.dtype([("ts", "f8"), ("end", "f8"), ("tid", "i4"), ("name", "i4")])

    def __init__(self, budget: SpillBudget | None = None) -> None:
        self.names: dict[str, int] = {}
        self.name_list: list[str] = []
        self.tids: dict[Any, int] = {}
        self.own_budget = budget is None
        self.budget = SpillBudget() if budget is None else budget
        self.ops = Spill(self.OP, self.budget)
        self.kern_self: dict[tuple[str, str], float] = {}
        self.kern_count: dict[tuple[str, str], int] = {}
        self.ours: set[int] = set()
        self.prof: set[int] = set()
        self.events = 0

    def add(self, cat: str, name: str, ts: float, dur: float, tid: int | str | None) -> None:
        if cat == "kernel":
            key = ("collective" if "nccl" in name.lower() else "kernel", name)
            self.kern_self[key] = self.kern_self.get(key, 0.0) + dur
            self.kern_count[key] = self.kern_count.get(key, 0) + 1
        elif cat == "cpu_op":
            nid = self.names.get(name)
            if nid is None:
                nid = self.names[name] = len(self.name_list)
                self.name_list.append(name)
            t = self.tids.get(tid)
            if t is None:
                t = self.tids[tid] = len(self.tids)
            self.ops.add(ts, (ts, ts + dur, t, nid))
        elif cat == "user_annotation":
            m = OUR_STEP.match(name)
            if m:
                self.ours.add(int(m.group(1)))
            else:
                m = PROFILER_STEP.match(name)
                if m:
                    self.prof.add(int(m.group(1)))

    def result(self, path: str, steps: int | None = None) -> TraceProfile:
        out = TraceProfile(path, len(self.ours) or len(self.prof) or (steps or 1), events=self.events)
        for key, v in self.kern_self.items():
            out.self_us[key] = v
            out.count[key] = self.kern_count[key]
        op_self = np.zeros(len(self.name_list))
        op_count = np.zeros(len(self.name_list), dtype=np.int64)
        stacks: dict[int, list[list[float]]] = {}
        try:
            for _, _, w in windows({"ops": self.ops}):
                _self_times(w["ops"], stacks, op_self, op_count)
        finally:
            if self.own_budget:
                self.budget.close()
        for stack in stacks.values():  # operators still open at the trace's end
            for _end, own, nid in stack:
                op_self[int(nid)] += max(own, 0.0)
                op_count[int(nid)] += 1
        for i, name in enumerate(self.name_list):
            if op_count[i]:
                key = ("collective" if name.startswith(_COLLECTIVE_OPS) else "op", name)
                out.self_us[key] = out.self_us.get(key, 0.0) + float(op_self[i])
                out.count[key] = out.count.get(key, 0) + int(op_count[i])
        return out


def _self_times(ops: np.ndarray, stacks: dict[int, list[list[float]]], acc: np.ndarray, count: np.ndarray) -> None:
    """Add each finished operation's self time (its duration less its direct children's) to ``acc``
    by name: each thread's operations of one window, nested by time containment (sorted by start,
    the longer first) under the operators the windows before left open (``stacks``, per thread:
    [end, self time so far, name], innermost last)."""
    order = np.lexsort((-ops["end"], ops["ts"]))
    ts, end, tid, nid = (ops[k][order].tolist() for k in ("ts", "end", "tid", "name"))
    for i in range(len(ts)):
        stack = stacks.get(tid[i])
        if stack is None:
            stack = stacks[tid[i]] = []
        t, e = ts[i], end[i]
        while stack and t >= stack[-1][0]:
            top = stack.pop()
            acc[int(top[2])] += max(top[1], 0.0)
            count[int(top[2])] += 1
        if stack:
            stack[-1][1] -= min(e, stack[-1][0]) - t  # a child: not its parent's own time
        stack.append([e, e - t, nid[i]])


def trace_diff(flagged: TraceProfile, peer: TraceProfile, limit: int = 20) -> list[dict[str, Any]]:
    """The names the flagged rank spends more time in per step than the peer, largest extra first
    (at most ``limit``), as the findings JSON's ``trace_diff`` entries."""
    f, p = flagged.per_step(), peer.per_step()
    rows = []
    for key in set(f) | set(p):
        fm, fc = f.get(key, (0.0, 0.0))
        pm, pc = p.get(key, (0.0, 0.0))
        rows.append(
            {
                "name": key[1],
                "kind": key[0],
                "flagged_ms_per_step": round(fm, 4),
                "peer_ms_per_step": round(pm, 4),
                "ratio": round(fm / pm, 3) if pm > 0 else None,
                "flagged_count": round(fc, 2),
                "peer_count": round(pc, 2),
                "_extra": fm - pm,
            }
        )
    rows.sort(key=lambda r: (-r["_extra"], r["name"]))
    for r in rows:
        del r["_extra"]
    return [r for r in rows[:limit] if r["flagged_ms_per_step"] > r["peer_ms_per_step"]]


def diff_text(rows: list[dict[str, Any]], flagged: str, peer: str) -> str:
    """The diff as the report prints it."""
    if not rows:
        return f"{flagged} spends no more time per step than {peer} in any op, kernel or collective."
    lines = [
        f"{flagged} against {peer}: time per step beyond the peer's, by self time",
        f"  {'kind':<10} {'ms/step':>9} {'peer':>9} {'ratio':>7} {'calls':>7} {'peer':>7}  name",
    ]
    for r in rows:
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "new"
        lines.append(
            f"  {r['kind']:<10} {r['flagged_ms_per_step']:>9.3f} {r['peer_ms_per_step']:>9.3f} {ratio:>7} "
            f"{r['flagged_count']:>7.1f} {r['peer_count']:>7.1f}  {r['name']}"
        )
    return "\n".join(lines)

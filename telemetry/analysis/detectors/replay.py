"""What-if by dependency replay of a per-operation trace (pipeline parallelism included).

The steps-table what-if (:mod:`.whatif`) takes a step as the max over ranks of work, which is wrong
for pipelines. With a per-operation trace (:mod:`..inputs.formats`), :class:`Replay` replays each step's ops
through their dependencies instead, and :func:`reprice` re-costs the findings of :data:`REPLAYED_KINDS`
as ``1 - T(healed) / T(actual)`` (ratios of replays, so that modelling error cancels), in detector
order, each with those before it healed. The model, the heals and the limits: docs/detectors.md,
"Replay of a pipeline's dependencies".

>>> rp = Replay.build(ops)               # doctest: +SKIP
>>> rp.step_times()                      # doctest: +SKIP
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, cast

import numpy as np
import pandas as pd

from ..findings import SEVERITIES, Finding, severity_for
from ..inputs.formats import is_comm, phase_of

if TYPE_CHECKING:
    from ...steptable.matrix import StepMatrix

log = logging.getLogger("telemetry")

WORLD, STAGE, PIPELINE, LOCAL = "world", "stage", "pipeline", "local"
# Collectives whose group is not the data-parallel group (the ranks of one stage).
COLLECTIVE_GROUPS = {
    "optimizer-clip-main-grad": WORLD,  # the gradient norm, all-reduced over every rank
    "embedding-grads-all-reduce": PIPELINE,  # first and last stage of one pipeline (tied embeddings)
    "layernorm-grads-all-reduce": LOCAL,  # tensor-parallel group: its peers are not in the trace
}
TRANSFER_QUANTILE = 0.01
REPLAYED_KINDS = ("straggler", "stage_imbalance", "imbalance")
NEEDED = ("rank", "step", "optype", "start_ts", "duration", "stage", "dp_rank")  # columns a replay needs

_COMPUTE, _LOCAL, _P2P, _COLL = 0, 1, 2, 3


def op_role(optype: str) -> tuple[int, str | None]:
    """(kind, group) of an optype: for a send or receive the group is its direction (forward,
    backward), for a collective one of :data:`WORLD`, :data:`STAGE`, :data:`PIPELINE`."""
    op = optype.lower()
    if "send" in op or "recv" in op:
        direction = "forward" if "forward" in op else "backward" if "backward" in op else None
        return (_P2P, direction) if direction else (_LOCAL, None)
    group = COLLECTIVE_GROUPS.get(op)
    if group is None and is_comm(op):
        group = PIPELINE if "embedding" in op else STAGE
    if group == LOCAL:
        return _LOCAL, None
    if group is not None:
        return _COLL, group
    return (_COMPUTE, None) if phase_of(op) is not None else (_LOCAL, None)


class _Cycle(ValueError):
    def __init__(self, steps: np.ndarray):
        super().__init__(
            f"in step(s) {', '.join(map(str, steps[:5]))}{' ...' if len(steps) > 5 else ''} the "
            "recorded order of operations contradicts their dependencies"
        )
        self.steps = steps


class Replay:
    """One trace's dependency graph over all its steps; :meth:`step_times` replays it, vectorized over
    all steps at once (by levels of the graph).

    Each rank runs its ops in recorded order (``start_ts``). The k-th forward send of a rank on stage
    s meets the k-th forward receive of the same pipeline (``dp_rank``) on stage s+1 (backward: s to
    s-1); a transfer starts when both sides have posted it and takes the direction's transfer time
    (the :data:`TRANSFER_QUANTILE` of its send and receive durations: what a transfer nobody waits for
    takes); sends and receives that start together on a rank (``send_forward_recv_backward``) are one
    batch. The k-th occurrence of a collective among its group (:data:`COLLECTIVE_GROUPS`, else the
    ranks of one stage) starts when every participant has reached it and takes the least time any
    spent in it. Gaps between ops are not replayed: the step starts at 0 on every rank."""

    def __init__(self, rows: pd.DataFrame, transfer: dict[str, float]):
        self.rows = rows  # the trace's ops, sorted by step, rank, start; ``duration`` is the actual
        self.transfer = transfer  # seconds per p2p transfer, by direction
        self.steps = np.unique(rows["step"].to_numpy())
        self._graph()

    @classmethod
    def build(cls, ops: pd.DataFrame | None) -> "Replay | None":
        """The replay of a per-op trace with its layout (``stage``, ``dp_rank``); None without.
        Steps whose recorded order contradicts the dependencies are left out (logged)."""
        if ops is None or not set(NEEDED) <= set(ops.columns) or not len(ops):
            return None
        start, dur = ops["start_ts"].to_numpy(float), ops["duration"].to_numpy(float)
        ok = np.isfinite(start) & np.isfinite(dur) & (dur >= 0)
        ok &= ops["stage"].notna().to_numpy() & ops["dp_rank"].notna().to_numpy()
        rows = ops.loc[ok, list(NEEDED) + [c for c in ("mb_id",) if c in ops.columns]]
        codes, names = pd.factorize(rows["optype"])
        names = [str(x) for x in names]
        keep = (codes >= 0) & (codes != (names.index("first-op") if "first-op" in names else -2))
        rows = rows[keep].copy()
        if rows.empty:
            return None
        rows["op"] = codes[keep]
        rows["optype"] = pd.Categorical.from_codes(codes[keep], names)
        rows = rows.iloc[
            np.lexsort(
                (
                    np.arange(len(rows)),
                    rows["start_ts"].to_numpy(float),
                    rows["rank"].to_numpy(),
                    rows["step"].to_numpy(),
                )
            )
        ].reset_index(drop=True)
        roles = [op_role(o) for o in names]
        op = rows["op"].to_numpy()
        rows["kind"] = np.array([k for k, _ in roles], dtype=np.int8)[op]
        rows["group"] = np.array([g for _, g in roles], dtype=object)[op]
        rows["send"] = np.array(["send" in o.lower() for o in names])[op]
        rows["duration"] = rows["duration"].astype(float)
        transfer = {}
        for d in ("forward", "backward"):
            x = rows.loc[(rows["kind"] == _P2P) & (rows["group"] == d), "duration"]
            transfer[d] = float(np.quantile(x, TRANSFER_QUANTILE)) if len(x) else 0.0
        for _ in range(3):
            try:
                return cls(rows, transfer)
            except _Cycle as exc:
                log.warning("telemetry: per-op replay: %s; those steps are not replayed", exc)
                rows = rows[~rows["step"].isin(exc.steps)].reset_index(drop=True)
                if rows.empty:
                    return None
        return None

    # -- the graph ---------------------------------------------------------------------------
    def _graph(self) -> None:
        """Nodes: 0 the step's start, then one per rank-chain entry (a compute or local op, or a
        batch of communication ops posted together), then one per event (a transfer or one
        occurrence of a collective). Edges: chain order, each participant's previous entry to
        the event, the event to each participant's entry."""
        r = self.rows
        n = len(r)
        step, rank = r["step"].to_numpy(), r["rank"].to_numpy()
        start, kind = r["start_ts"].to_numpy(float), r["kind"].to_numpy()
        stage, dp = r["stage"].to_numpy().astype(np.int64), r["dp_rank"].to_numpy().astype(np.int64)
        p2p = kind == _P2P
        same = np.zeros(n, dtype=bool)
        same[1:] = (step[1:] == step[:-1]) & (rank[1:] == rank[:-1])
        joins = np.zeros(n, dtype=bool)  # p2p ops posted together on a rank: one batch
        joins[1:] = same[1:] & p2p[1:] & p2p[:-1] & (start[1:] == start[:-1])
        chain = np.cumsum(~joins) - 1
        n_chain = int(chain[-1]) + 1
        first = np.flatnonzero(~joins)
        chain_pred = np.where(same[first], np.arange(n_chain), 0)  # chain entry c is node c + 1
        self._chain_row = np.where(np.isin(kind[first], (_COMPUTE, _LOCAL)), first, -1)

        comm = np.flatnonzero(kind >= _P2P)
        occ = r.groupby(["step", "rank", "op"], sort=False).cumcount().to_numpy()[comm]
        group = r["group"].to_numpy()[comm]
        is_p2p = kind[comm] == _P2P
        fwd = is_p2p & (group == "forward")
        sends = r["send"].to_numpy()[comm]
        n_stages = int(stage.max()) + 1
        sender = np.where(sends, stage[comm], np.where(fwd, stage[comm] - 1, stage[comm] + 1)) % n_stages
        code = r["op"].to_numpy()[comm]
        keys = pd.DataFrame(
            {
                "step": step[comm],
                "occ": occ,
                "what": np.where(is_p2p, np.where(fwd, -1, -2), code),
                "pipe": np.where(is_p2p | (group == PIPELINE), dp[comm], -1),
                "stage": np.where(is_p2p, sender, np.where(group == STAGE, stage[comm], -1)),
            }
        )
        event = keys.groupby(["step", "what", "pipe", "stage", "occ"], sort=False).ngroup().to_numpy()
        n_event = int(event.max()) + 1 if len(event) else 0
        event_node = 1 + n_chain + event
        src = np.concatenate([chain_pred, chain_pred[chain[comm]], event_node])
        dst = np.concatenate([np.arange(1, n_chain + 1), event_node, 1 + chain[comm]])
        node_step = np.concatenate([[step[0]], step[first], np.zeros(n_event, dtype=step.dtype)])
        node_step[event_node] = step[comm]

        # an event's own time: a transfer's is its direction's; a collective's the least any
        # participant spent in it (recomputed per replay from the durations)
        fixed = np.zeros(n_event)
        fixed[event[is_p2p]] = np.where(fwd[is_p2p], self.transfer["forward"], self.transfer["backward"])
        self._ev_fixed = fixed
        coll, ev_coll = comm[~is_p2p], event[~is_p2p]
        o = np.argsort(ev_coll, kind="stable")
        self._coll_rows, self._coll_events = coll[o], np.unique(ev_coll)
        self._coll_offsets = np.flatnonzero(np.r_[True, np.diff(ev_coll[o]) != 0]) if len(o) else np.zeros(0, int)
        self._n_chain, self._n_nodes = n_chain, 1 + n_chain + n_event
        self._levels(src, dst, node_step)
        chain_step = step[first]
        self._step_offsets = np.flatnonzero(np.r_[True, chain_step[1:] != chain_step[:-1]])

    def _levels(self, src: np.ndarray, dst: np.ndarray, node_step: np.ndarray) -> None:
        """Kahn's algorithm a frontier at a time (vectorized): each node's level; then, per level,
        the in-edges grouped by node, which is all :meth:`step_times` needs."""
        n = len(node_step)
        indeg = np.bincount(dst, minlength=n)
        out_dst = dst[np.argsort(src, kind="stable")]
        out_ptr = np.r_[0, np.cumsum(np.bincount(src, minlength=n))]
        level = np.full(n, -1, dtype=np.int64)
        frontier, lv = np.flatnonzero(indeg == 0), 0
        while len(frontier):
            level[frontier] = lv
            a, cnt = out_ptr[frontier], out_ptr[frontier + 1] - out_ptr[frontier]
            total = int(cnt.sum())
            if not total:
                break
            idx = np.repeat(a - np.r_[0, np.cumsum(cnt)[:-1]], cnt) + np.arange(total)
            u, c = np.unique(out_dst[idx], return_counts=True)
            indeg[u] -= c
            frontier, lv = u[indeg[u] == 0], lv + 1
        if (level < 0).any():
            raise _Cycle(np.unique(node_step[level < 0]))
        o = np.lexsort((dst, level[dst]))
        self._src, dsts = src[o], dst[o]
        lvl = level[dsts]
        bounds = np.flatnonzero(np.r_[True, lvl[1:] != lvl[:-1], True])
        self._plan = []
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            d = dsts[lo:hi]
            starts = np.flatnonzero(np.r_[True, d[1:] != d[:-1]])
            self._plan.append((lo, hi, d[starts], starts))

    # -- replays -----------------------------------------------------------------------------
    def step_times(self, durations: np.ndarray | None = None) -> np.ndarray:
        """Replayed time of each step (``self.steps``) for op durations aligned with ``self.rows``."""
        dur = self.rows["duration"].to_numpy(float) if durations is None else np.asarray(durations, float)
        add = np.zeros(self._n_nodes)
        has = self._chain_row >= 0
        add[1 : self._n_chain + 1][has] = dur[self._chain_row[has]]
        ev = self._ev_fixed.copy()
        if len(self._coll_rows):
            ev[self._coll_events] = np.minimum.reduceat(dur[self._coll_rows], self._coll_offsets)
        add[1 + self._n_chain :] = ev
        end = np.zeros(self._n_nodes)
        src = self._src
        for lo, hi, nodes, starts in self._plan:
            end[nodes] = np.maximum.reduceat(end[src[lo:hi]], starts) + add[nodes]
        return np.maximum.reduceat(end[1 : self._n_chain + 1], self._step_offsets)

    def recorded_times(self) -> np.ndarray:
        """Each step's recorded time: its first op's start to its last op's end, over all ranks."""
        r = self.rows
        g = r.assign(_end=r["start_ts"] + r["duration"]).groupby("step")
        return (
            (cast(pd.Series, g["_end"].max()) - cast(pd.Series, g["start_ts"].min()))
            .reindex(self.steps)
            .to_numpy(float)
        )

    # -- heals: new durations (aligned with ``self.rows``) ------------------------------------
    def _compute_in(self, steps: tuple[int, int] | None) -> np.ndarray:
        mask = (self.rows["kind"] == _COMPUTE).to_numpy()
        if steps is not None:
            s = self.rows["step"].to_numpy()
            mask = mask & (s >= steps[0]) & (s <= steps[1])
        return mask

    def heal_stage(self, dur: np.ndarray, stage: int, steps: tuple[int, int] | None = None) -> np.ndarray:
        """The stage rebalanced: per step and compute optype, its ops scaled to the mean over stages
        (of each stage's median op) and its excess spread evenly over the other stages' ops, so
        that the work is moved, not removed."""
        mask = self._compute_in(steps)
        keys = ["step", "op", "stage"]
        sub = self.rows.loc[mask, keys].assign(d=dur[mask])
        med = sub.groupby(keys, sort=False)["d"].median()
        by = med.groupby(level=[0, 1], sort=False)
        mean, n = by.transform("mean"), by.transform("size")
        mine = med.index.get_level_values("stage") == stage
        excess = pd.Series(np.where(mine, med - mean, np.nan), index=med.index).groupby(level=[0, 1]).transform("max")
        excess = excess.clip(lower=0.0).where(n > 1, 0.0)
        with np.errstate(all="ignore"):
            target = np.where(mine, med - excess, med + excess / (n - 1).clip(lower=1))
            ratio = pd.Series(np.where(med > 0, target / med, 1.0), index=med.index)
        f = ratio.reindex(pd.MultiIndex.from_frame(self.rows.loc[mask, keys])).to_numpy(float)
        out = dur.copy()
        out[mask] = np.where(np.isfinite(f), dur[mask] * f, dur[mask])
        return out

    def heal_balance(self, dur: np.ndarray, steps: tuple[int, int] | None = None) -> np.ndarray:
        """Every compute op at its peers' mean (same step, stage and optype: the stage's ranks and
        micro-batches), so that the work is spread evenly, not removed."""
        mask = self._compute_in(steps)
        sub = self.rows.loc[mask, ["step", "stage", "op"]].assign(d=dur[mask])
        out = dur.copy()
        out[mask] = sub.groupby(["step", "stage", "op"], sort=False)["d"].transform("mean").to_numpy(float)
        return out

    def heal_ranks(self, dur: np.ndarray, ranks: list[int], steps: tuple[int, int] | None = None) -> np.ndarray:
        """The ranks' compute ops at their stage peers' median (same step and optype)."""
        mask = self._compute_in(steps)
        mine = mask & self.rows["rank"].isin(ranks).to_numpy()
        peers = mask & ~mine
        if not mine.any() or not peers.any():
            return dur.copy()
        keys = ["step", "stage", "op"]
        med = self.rows.loc[peers, keys].assign(d=dur[peers]).groupby(keys, sort=False)["d"].median()
        f = med.reindex(pd.MultiIndex.from_frame(self.rows.loc[mine, keys])).to_numpy(float)
        out = dur.copy()
        out[mine] = np.where(np.isfinite(f), f, dur[mine])
        return out


# -- re-costing an analysis ------------------------------------------------------------------


def _span(f: Finding, steps: np.ndarray) -> tuple[int, int]:
    lo = f.first_step if f.first_step is not None else int(steps[0])
    hi = f.last_step if f.last_step is not None else int(steps[-1])
    return int(lo), int(hi)


def _heal_for(rp: Replay, f: Finding) -> Callable[[np.ndarray], np.ndarray] | None:
    span = _span(f, rp.steps)
    if f.kind == "stage_imbalance" and f.details.get("stage") is not None:
        return lambda d: rp.heal_stage(d, int(f.details["stage"]), span)
    if f.kind == "imbalance":
        return lambda d: rp.heal_balance(d, span)
    if f.kind == "straggler" and f.ranks:
        ranks = list(f.ranks) + [int(r) for r in f.details.get("co_stragglers", [])]
        return lambda d: rp.heal_ranks(d, ranks, span)
    return None


def _saving(before: np.ndarray, after: np.ndarray, base: np.ndarray, recorded: np.ndarray, mask: np.ndarray) -> float:
    """Share of the masked steps' recorded time saved going from ``before`` to ``after``."""
    with np.errstate(all="ignore"):
        saved = np.where(base > 0, (before - after) / base, 0.0) * recorded
    total = float(np.nansum(recorded[mask]))
    return float(np.nansum(saved[mask]) / total) if total > 0 else 0.0


def _pct(x: float) -> str:
    return f"{x:.2%}" if abs(x) < 0.001 else f"{x:.1%}"


_SYNC_NOTE = re.compile(r" \(replay of a synchronous step; with pipelining this is an upper bound\)")
_NOTES = {
    "stage_imbalance": " (replay of the trace's dependencies, the stage's excess moved onto the other stages)",
    "imbalance": " (replay of the trace's dependencies)",
}


def _reword(f: Finding, old: float, new: float) -> str:
    """The evidence with the replay's cost in place of the synchronous what-if's."""
    text = f.evidence
    for fmt in (lambda x: f"{x:.1%}", _pct):
        a, b = fmt(old), fmt(new)
        if f"{a} faster" in text:
            text = text.replace(f"{a} faster", f"{b} faster", 1)
            break
    note = _NOTES.get(f.kind)
    if note and note not in text:
        text = _SYNC_NOTE.sub(note, text) if _SYNC_NOTE.search(text) else text + note
    return text


def reprice(
    findings: list[Finding],
    summary: dict[str, Any],
    ops: pd.DataFrame | None,
    m: StepMatrix | None,
    shift: np.ndarray | None,
) -> list[Finding]:
    """Re-cost ``findings`` of kinds :data:`REPLAYED_KINDS` by replaying ``ops`` (in the detectors'
    order, each with the ones before it healed) and set ``summary["slowdown"]`` (in place) to the
    replay with all of them healed, plus what the other findings add; returns the findings,
    re-sorted. Unchanged when there is nothing to re-cost or the trace cannot be replayed (no
    layout, an order that contradicts the dependencies)."""
    order = {"straggler": 0, "stage_imbalance": 1, "imbalance": 2}
    todo = sorted((i for i, f in enumerate(findings) if f.kind in order), key=lambda i: order[findings[i].kind])
    if ops is None or m is None or not m.n_steps or not todo or summary.get("slowdown", 0.0) >= 1.0:
        return findings
    rp = Replay.build(ops)
    if rp is None:
        return findings
    recorded = pd.Series(np.asarray(m.step_time(), float), index=m.steps).reindex(rp.steps).to_numpy(float)
    recorded = np.where(np.isfinite(recorded), recorded, rp.recorded_times())
    dur = rp.rows["duration"].to_numpy(float)
    base = rp.step_times(dur)
    prev, cur = base, dur
    out = list(findings)
    joint: dict[frozenset, tuple[float, np.ndarray]] = {}  # stragglers named as a group are healed and costed once
    for i in todo:
        f = findings[i]
        heal = _heal_for(rp, f)
        if heal is None:
            continue
        lo, hi = _span(f, rp.steps)
        mask = (rp.steps >= lo) & (rp.steps <= hi)
        key = frozenset([f.kind, *f.ranks, *f.details.get("co_stragglers", [])])
        if key not in joint:
            before, cur = cur, heal(cur)
            after = rp.step_times(cur)
            joint[key] = (max(0.0, _saving(prev, after, base, recorded, mask)), before)
            prev = after
        cost, before = joint[key]
        details = dict(f.details, whatif="replay", whatif_sync=round(float(f.slowdown), 6))
        evidence = _reword(f, f.slowdown, cost)
        if "marginal_slowdown" in details:  # this rank alone, with the ones costed before healed
            alone = rp.step_times(rp.heal_ranks(before, list(f.ranks), (lo, hi)))
            own = max(0.0, _saving(rp.step_times(before), alone, base, recorded, mask))
            evidence = evidence.replace(
                f"this rank alone {_pct(details['marginal_slowdown'])}", f"this rank alone {_pct(own)}"
            )
            details.update(marginal_slowdown=own, group_slowdown=cost)
        out[i] = replace(f, slowdown=cost, severity=severity_for(cost), evidence=evidence, details=details)
    if prev is base:  # nothing was healed
        return findings
    replayed = max(0.0, _saving(base, prev, base, recorded, np.ones(len(rp.steps), dtype=bool)))
    from .whatif import slowdown as sync_slowdown

    synced = sync_slowdown(m, shift) if shift is not None else 0.0  # the part the replay replaces
    t = np.asarray(m.step_time(), float)
    total_s = max(float(np.nansum(t)), 1e-12)
    for f in findings:  # ranks stalled on data are in the shift too, and not replayed: keep their cost
        if f.kind in ("data_stall", "input_bound") and f.ranks:
            lo, hi = _span(f, m.steps)
            synced -= f.slowdown * float(np.nansum(t[(m.steps >= lo) & (m.steps <= hi)])) / total_s
    summary["slowdown"] = round(min(1.0, max(0.0, float(summary["slowdown"]) - max(synced, 0.0)) + replayed), 6)
    summary["whatif"] = "replay"
    gp = summary.get("goodput") or {}
    if "straggler_wait" in gp:  # the time waited for the culprits, as the replay has it
        up = summary.get("uptime") or {}
        wall = float(np.nansum(recorded)) + float(up.get("between_steps_s", 0.0)) + float(up.get("lost_s", 0.0))
        room = gp["straggler_wait"] + gp.get("other", 0.0)
        sw = min(room, replayed * float(np.nansum(recorded)) / max(wall, 1e-12))
        gp["other"], gp["straggler_wait"] = round(max(0.0, room - sw), 4), round(sw, 4)
    out.sort(key=lambda f: (-SEVERITIES.index(f.severity), -f.slowdown))
    return out

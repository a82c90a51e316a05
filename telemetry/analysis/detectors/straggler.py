"""Stragglers: ranks whose compute is above their peers', persistently or in bursts, found from compute
and arrival order, never from step time (in a synchronous job every rank's step time is the same).

:func:`detect_stragglers` scans each series (total compute, each phase's) against the peers of the
same stage (:mod:`.stretch`), keeps the hot ranks that arrive last (:func:`_candidates`: one that waits
more is a victim), costs them largest first, each with those before it healed, so that their costs
add up, and groups a node's slow ranks (:func:`_units`); a persistent stretch's edges go where the
excess changes level (:func:`~.stretch.refine_edges`). The test decides whether a rank is slow; the
what-if only decides the severity. The rules: docs/finding-kinds.md, "straggler"; slow nodes, hidden
and small stragglers: docs/detectors.md, "In groups and in the small".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np

from ...steptable.matrix import StepMatrix, every_kth_step, nanmedian
from ..findings import Finding, severity_for
from .context import Context, Found
from .stretch import (
    Hit,
    StragglerParams,
    peer_median,
    scan,
)
from .whatif import slowdown

TOTAL = "__compute__"


@dataclass
class _Candidate:
    """A rank running hot that arrives late (not a victim): a straggler if it costs enough."""

    rank: int  # row in the matrix
    phase: str | None  # the phase to name; None: compute outside the instrumented phases
    lead: Hit  # the hit accounting for the most excess time
    phase_hits: dict[str, Hit]
    waits: float | None  # its median wait in collectives minus its peers' (negative: it arrives last)
    mask: np.ndarray  # (S,) the steps it is hot in


def detect_stragglers(
    m: StepMatrix, params: StragglerParams | None = None, exclude: frozenset[str] = frozenset({"data"})
) -> tuple[list[Finding], np.ndarray]:
    """Return the straggler findings and the (R x S) compute shift that would heal them all."""
    p = params or StragglerParams()
    shift = np.zeros((m.n_ranks, m.n_steps))
    if m.n_ranks < 2 or m.n_steps == 0:
        return [], shift
    live_idx = np.arange(p.warmup(m.n_steps), m.n_steps)
    candidates = _candidates(m, _hits_by_rank(m, p, live_idx, exclude), live_idx)
    # Largest excess first, each costed with the ones before it healed: with two stragglers, the
    # smaller one only costs time once the larger is fixed, and the costs add up to the total. The
    # ranks of one node slow together are one unit (a slow node), costed as one.
    findings = []
    weak: list[tuple[list[_Candidate], float]] = []
    for unit in sorted(_units(m, candidates), key=lambda u: -max(c.lead.excess_s for c in u)):
        one, covered, first, last = _heal(m, unit, shift)
        cost = slowdown(m, shift + one, covered) - slowdown(m, shift, covered)
        if cost < p.min_slowdown:
            weak.append((unit, cost))
            continue
        shift += one
        findings.append(
            _node_finding(m, unit, first, last, covered, cost)
            if len(unit) > 1
            else _finding(m, unit[0], first, last, covered, cost, after_larger=bool(findings))
        )
    if weak:
        # Each costs under the bar alone (the others still set the pace, or its peers' noise hides
        # it); together they may not. Costed as a group, each named with its own marginal cost; a
        # rank that is significantly slower is named even when it costs little today (at info),
        # with what it would cost in a quieter job.
        group = [c for unit, _ in weak for c in unit]
        one, covered, _, _ = _heal(m, group, shift)
        joint = slowdown(m, shift + one, covered) - slowdown(m, shift, covered)
        together = len(weak) >= 2 and joint >= p.min_slowdown
        shift += one
        for unit, own in weak:
            _, cov, first, last = _heal(m, unit, shift)
            if len(unit) > 1:
                findings.append(_node_finding(m, unit, first, last, cov, joint if together else own))
                continue
            c = unit[0]
            f = _finding(m, c, first, last, cov, joint if together else own, after_larger=False)
            quiet = c.lead.excess_s / max(float(nanmedian(m.step_time()[cov])), 1e-12)
            if together:
                others = sorted(int(m.ranks[o.rank]) for o in group if o is not c)
                f.details.update(co_stragglers=others, group_slowdown=joint, marginal_slowdown=own)
                f = _reword(
                    f,
                    f"healing it would make those steps {joint:.1%} faster",
                    f"it is slow together with rank{'s' if len(others) > 1 else ''} "
                    f"{', '.join(map(str, others))}: healing them all would make those steps "
                    f"{joint:.1%} faster, this rank alone {_pct(own)} (the others still set the pace)",
                )
            else:
                steady = c.lead.mode == "persistent" and cov.sum() >= 0.5 * (m.n_steps - p.warmup(m.n_steps))
                if quiet < (p.min_small_cost if steady else p.min_quiet_cost):
                    shift -= _heal(m, unit, shift)[0]  # not named: not part of the what-if either
                    continue
                f.details.update(if_quiet=quiet)
                f = _reword(
                    f,
                    f"healing it would make those steps {own:.1%} faster",
                    f"healing it would make those steps {_pct(own)} faster today (its peers' own "
                    f"noise sets the pace); in a quiet job its excess would cost {quiet:.1%}",
                )
            findings.append(f)
    return findings, shift


def _pct(x: float) -> str:
    """A small share with the digits it needs: 0.03%, 0.4%, 2.1%."""
    return f"{x:.2%}" if abs(x) < 0.001 else f"{x:.1%}"


def _heal(m: StepMatrix, unit: list["_Candidate"], shift: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """The compute shift that heals ``unit``'s ranks, the steps its finding covers, first and last."""
    one = np.zeros_like(shift)
    mask = np.zeros(m.n_steps, dtype=bool)
    for c in unit:
        one[c.rank, c.mask] = c.lead.excess_s
        mask |= c.mask
    first, last = np.flatnonzero(mask)[[0, -1]]
    covered = np.zeros(m.n_steps, dtype=bool)
    covered[first : last + 1] = True  # the cost is over every step the finding covers
    return one, covered, int(first), int(last)


def _units(m: StepMatrix, candidates: list["_Candidate"]) -> list[list["_Candidate"]]:
    """Candidates to cost together: the slow ranks of one node (two or more, at least half of the
    node's ranks, in a job of several nodes) are one unit; every other candidate is its own."""
    if m.nodes is None or len(set(m.nodes.tolist())) < 2:
        return [[c] for c in candidates]
    by_node: dict[str, list[_Candidate]] = {}
    for c in candidates:
        by_node.setdefault(str(m.nodes[c.rank]), []).append(c)
    units = []
    for node, cs in by_node.items():
        size = int(np.sum(m.nodes == node))
        if len(cs) >= 2 and 2 * len(cs) >= size:
            units.append(sorted(cs, key=lambda c: c.rank))
        else:
            units += [[c] for c in cs]
    return units


def _reword(f: Finding, old: str, new: str) -> Finding:
    from dataclasses import replace

    return replace(f, evidence=f.evidence.replace(old, new))


def _node_finding(
    m: StepMatrix, unit: list["_Candidate"], first: int, last: int, covered: np.ndarray, cost: float
) -> Finding:
    node = str(cast(np.ndarray, m.nodes)[unit[0].rank])  # a unit of several ranks: the table names nodes
    ranks = [int(m.ranks[c.rank]) for c in unit]
    size = int(np.sum(m.nodes == node))
    phases = [c.phase for c in unit if c.phase]
    phase = max(set(phases), key=phases.count) if phases else None
    where = f"phase {phase}" if phase else "compute outside the instrumented phases"
    ratio = float(np.median([1 + c.lead.excess_s / c.lead.base_s for c in unit]))
    excess = float(np.median([c.lead.excess_s for c in unit]))
    steps = f"{int(m.steps[first])}-{int(m.steps[last])}"
    span = f"{ranks[0]}-{ranks[-1]}" if ranks == list(range(ranks[0], ranks[-1] + 1)) else ", ".join(map(str, ranks))
    evidence = (
        f"slow node {node}: ranks {span} ({len(ranks)} of its {size}) take {excess * 1e3:.1f} ms more "
        f"in {where} than their peers ({ratio:.2f}x, median of the node's ranks) over steps {steps}; "
        f"healing the node would make those steps {cost:.1%} faster"
    )
    return Finding(
        kind="straggler",
        ranks=ranks,
        phase=phase,
        first_step=int(m.steps[first]),
        last_step=int(m.steps[last]),
        severity=severity_for(cost),
        slowdown=cost,
        evidence=evidence,
        details={
            "node": node,
            "node_ranks": size,
            "excess_s": excess,
            "ratio": ratio,
            "rank_excess_s": {int(m.ranks[c.rank]): c.lead.excess_s for c in unit},
        },
    )


def _hits_by_rank(
    m: StepMatrix, p: StragglerParams, live_idx: np.ndarray, exclude: frozenset[str]
) -> dict[int, dict[str, Hit]]:
    """Per rank (row), the series it runs hot in: total compute and each phase's."""
    series = {TOTAL: m.compute}
    series.update({k: v for k, v in m.phase_compute.items() if k not in exclude})
    z_min = p.z_for(m.n_ranks * len(series))
    by_rank: dict[int, dict[str, Hit]] = {}
    for name, arr in series.items():
        for r, hit in scan(name, arr[:, live_idx], m.groups, p, z_min, whole=m.weight is None).items():
            by_rank.setdefault(r, {})[name] = hit
    return by_rank


def _candidates(m: StepMatrix, by_rank: dict[int, dict[str, Hit]], live_idx: np.ndarray) -> list[_Candidate]:
    """The hot ranks that arrive late at the collectives; a hot rank that does not is a victim (its
    long phase is waiting that we cannot see, not compute)."""
    comm_excess = None
    if m.comm is not None:
        c = m.comm[:, live_idx]
        comm_excess = c - peer_median(c, m.groups)  # (R, S_live): negative when a rank arrives last
    out = []
    for r, hits in sorted(by_rank.items()):
        phase_hits = {k: h for k, h in hits.items() if k != TOTAL}
        name = max(phase_hits, key=lambda k: phase_hits[k].excess_s) if phase_hits else None
        # The hit that accounts for the most excess time leads (a burst in total compute must not
        # hide a phase that is slow on a fifth of all steps); a phase that holds most of total
        # compute's excess time is the same slowness, found where it is: it leads, with its own steps
        # (total compute, a sum, also carries every small static difference from the first step on).
        lead = max(hits.values(), key=lambda h: h.excess_s * h.mask.sum())
        if lead.series == TOTAL and phase_hits:
            top = max(phase_hits.values(), key=lambda h: h.excess_s * h.mask.sum())
            if top.excess_s * top.mask.sum() >= 0.8 * lead.excess_s * lead.mask.sum():
                lead = top
        if lead.series != TOTAL:
            name = lead.series
        waits = float(nanmedian(comm_excess[r, lead.mask])) if comm_excess is not None else None
        if waits is not None and not waits < 0:
            continue
        mask = np.zeros(m.n_steps, dtype=bool)
        mask[live_idx[lead.mask]] = True
        out.append(_Candidate(r, name, lead, phase_hits, waits, mask))
    return out


def _finding(
    m: StepMatrix, c: _Candidate, first: int, last: int, covered: np.ndarray, cost: float, after_larger: bool
) -> Finding:
    rank_id = int(m.ranks[c.rank])
    lead = c.lead
    ref = c.phase_hits[c.phase] if c.phase else lead
    where = f"phase {c.phase}" if c.phase else "compute outside the instrumented phases"
    step_t = float(nanmedian(m.step_time()[covered]))
    steps = f"{int(m.steps[first])}-{int(m.steps[last])}"
    # slow on every step of its span: say so plainly, whichever test found it (short runs: spikes)
    every = int(c.mask.sum()) >= last - first + 1
    how = "" if lead.mode == "persistent" or every else f" on {int(c.mask.sum())} of steps {steps} (intermittent)"
    waits_text = ""
    if c.waits is not None:
        waits_text = f"; it waits {abs(c.waits) * 1e3:.1f} ms less in collectives than its peers (it arrives last)"
    peers = "its stage's peers" if m.has_layout else "its peers"
    after = " (after the larger stragglers above are healed)" if after_larger else ""
    waiting = _waiting_group(m, c.rank, covered, ref.excess_s)
    if waiting is not None:
        waits_text += (
            f"; its peers wait for it in the {waiting[0]} collectives: {waiting[1] * 1e3:.1f} ms per step "
            "more than it waits there"
        )
    evidence = (
        f"rank {rank_id}'s {where} takes {ref.excess_s * 1e3:.1f} ms more than {peers}' "
        f"median {ref.base_s * 1e3:.1f} ms ({1 + ref.excess_s / ref.base_s:.2f}x) over steps "
        f"{steps}{how}{waits_text}; healing it would make those "
        f"steps {cost:.1%} faster{after} (step time {step_t * 1e3:.1f} ms)"
    )
    return Finding(
        kind="straggler",
        ranks=[rank_id],
        phase=c.phase,
        first_step=int(m.steps[first]),
        last_step=int(m.steps[last]),
        severity=severity_for(cost),
        slowdown=cost,
        evidence=evidence,
        details={
            "excess_s": lead.excess_s,
            "peer_s": lead.base_s,
            "ratio": 1 + ref.excess_s / ref.base_s,
            "z": round(lead.z, 2),
            "mode": lead.mode,
            "stage": int(m.groups[c.rank]) if m.has_layout else None,
            "phase_excess_s": {k: h.excess_s for k, h in c.phase_hits.items()},
            **({"group": waiting[0], "group_wait_s": waiting[1]} if waiting is not None else {}),
        },
    )


def _waiting_group(m: StepMatrix, row: int, covered: np.ndarray, excess_s: float) -> tuple[str, float] | None:
    """The parallel dimension in which the straggler is waited for: per process group's label
    (``comm_group.<label>_s``), how much less the straggler waits in that group's collectives than
    its peers' median (medians over the covered steps); the largest. Named when it is at least a
    quarter of the straggler's excess and the group is not the whole job (``world`` says nothing a
    1-D job does not). The table does not say which ranks share a group with it: the peers are all
    the ranks that use a group of that label."""
    best = None
    for col in m.columns:
        if not (col.startswith("comm_group.") and col.endswith("_s")):
            continue
        grid = m.extra(col)
        if grid is None or not covered.any():
            continue
        med = nanmedian(grid[:, covered], axis=1)
        others = np.delete(med, row)
        if not np.isfinite(med[row]) or not np.isfinite(others).any():
            continue
        gap = float(nanmedian(others) - med[row])
        if best is None or gap > best[1]:
            best = (col[len("comm_group.") : -2], gap)
    if best is None or best[0] == "world" or best[1] < 0.25 * excess_s:
        return None
    return best


def straggler_scores(m: StepMatrix, params: StragglerParams | None = None) -> dict[int, float]:
    """Per rank: median relative excess of total compute over its peers (0.5 = 50% slower)."""
    p = params or StragglerParams()
    live = slice(p.warmup(m.n_steps), None)
    a = m.compute[:, live]
    a = every_kth_step(a)
    peers = peer_median(a, m.groups)
    with np.errstate(all="ignore"):
        rel = nanmedian((a - peers) / peers, axis=1)
    return {int(r): float(v) for r, v in zip(m.ranks, rel) if np.isfinite(v)}


def detect(m: StepMatrix | None, ctx: Context) -> Found:
    """Stragglers, from the warm-up on (the detectors' table): their findings, and the shift their
    culprits' healing gives, which every detector after them starts from."""
    if m is None:
        return Found()
    found, shift = detect_stragglers(m, ctx.params.straggler)
    return Found(found, shift)

"""Stragglers: ranks whose compute is persistently above their peers', found from compute and
arrival order, never from step time (in a synchronous job every rank's step time is the same).

For each series (total compute, and each phase's compute: phase time less the time blocked in
collectives inside it) and each rank, the per-step excess over the median of the *other* ranks is
taken. A rolling median of that excess locates the steps where the rank runs hot; over those steps
the rank is a straggler when its median excess is

- large: at least ``min_rel_excess`` of the peers' typical time in that series, and
- certain: at least ``z_min`` robust standard errors above zero (autocorrelation is allowed for by
  counting only half of the steps as independent), and
- consistent with the physics: where collective times are known, the rank waits *less* than its
  peers (it arrives last).

The named phase is the one holding most of the excess. The what-if removes that excess from the
rank's compute on the covered steps and replays the steps (:mod:`.whatif`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .findings import Finding, severity_for
from .matrix import StepMatrix, nanmedian
from .whatif import slowdown

TOTAL = "__compute__"


@dataclass(frozen=True)
class StragglerParams:
    warmup_steps: int | None = None  # None: 5% of the steps, at least 2, at most 20
    min_rel_excess: float = 0.05
    z_min: float = 4.0
    window: int = 31
    min_run: int = 5
    min_slowdown: float = 0.01  # below this a straggler is not reported at all

    def warmup(self, n_steps: int) -> int:
        if self.warmup_steps is not None:
            return min(self.warmup_steps, max(n_steps - 1, 0))
        return int(min(20, max(2, round(0.05 * n_steps)))) if n_steps > 4 else 0


def _peer_median(arr: np.ndarray) -> np.ndarray:
    """(R, S) median of the other ranks at each step (leave-one-out for small worlds)."""
    r = arr.shape[0]
    if r > 16:
        return np.broadcast_to(nanmedian(arr, axis=0), arr.shape)
    out = np.empty_like(arr)
    for i in range(r):
        out[i] = nanmedian(np.delete(arr, i, axis=0), axis=0)
    return out


def _rolling_median(e: np.ndarray, w: int) -> np.ndarray:
    if e.shape[1] < w:
        return np.broadcast_to(nanmedian(e, axis=1)[:, None], e.shape).copy()
    pad = w // 2
    padded = np.pad(e, ((0, 0), (pad, w - 1 - pad)), mode="edge")
    windows = np.lib.stride_tricks.sliding_window_view(padded, w, axis=1)
    return nanmedian(windows, axis=2)


def _robust_sigma(e: np.ndarray) -> float:
    """Typical per-step noise of one rank's excess: the median over ranks of each rank's MAD
    scale, so that one misbehaving rank does not widen everyone's bounds."""
    med = nanmedian(e, axis=1)[:, None]
    per_rank = 1.4826 * nanmedian(np.abs(e - med), axis=1)
    s = float(nanmedian(per_rank))
    return s if np.isfinite(s) else 0.0


def _longest_hot_span(hot: np.ndarray, min_run: int) -> tuple[int, int] | None:
    """First and last index of the union of runs of True at least ``min_run`` long."""
    idx = np.flatnonzero(np.diff(np.concatenate(([0], hot.astype(np.int8), [0]))))
    starts, ends = idx[::2], idx[1::2]
    keep = (ends - starts) >= min_run
    if not keep.any():
        return None
    return int(starts[keep][0]), int(ends[keep][-1] - 1)


@dataclass
class _Hit:
    series: str
    lo: int
    hi: int
    excess_s: float  # median excess over the covered steps
    base_s: float  # peers' typical time in the series
    z: float


def _scan(series: str, arr: np.ndarray, live: np.ndarray, p: StragglerParams) -> dict[int, _Hit]:
    a = arr[:, live]
    if a.shape[1] < p.min_run or a.shape[0] < 2:
        return {}
    peers = _peer_median(a)
    e = a - peers
    base = float(nanmedian(peers))
    if not np.isfinite(base) or base <= 0:
        return {}
    sigma = _robust_sigma(e)
    w = min(p.window, max(3, a.shape[1] // 4))
    rolled = _rolling_median(e, w)
    thr = max(p.min_rel_excess * base, 2.0 * 1.253 * sigma / np.sqrt(w))
    hits = {}
    for r in range(a.shape[0]):
        span = _longest_hot_span(np.nan_to_num(rolled[r]) > thr, p.min_run)
        if span is None:
            continue
        lo, hi = span
        seg = e[r, lo:hi + 1]
        seg = seg[np.isfinite(seg)]
        if seg.size < p.min_run:
            continue
        excess = float(np.median(seg))
        se = 1.253 * max(sigma, 1e-9) / np.sqrt(max(seg.size / 2.0, 1.0))
        z = excess / se
        if excess >= p.min_rel_excess * base and z >= p.z_min:
            hits[r] = _Hit(series, lo, hi, excess, base, z)
    return hits


def detect_stragglers(m: StepMatrix, params: StragglerParams | None = None) -> tuple[list[Finding], np.ndarray]:
    """Return the straggler findings and the (R x S) compute shift that would heal them all."""
    p = params or StragglerParams()
    shift = np.zeros((m.n_ranks, m.n_steps))
    if m.n_ranks < 2 or m.n_steps == 0:
        return [], shift
    live = np.zeros(m.n_steps, dtype=bool)
    live[p.warmup(m.n_steps):] = True
    live_idx = np.flatnonzero(live)
    series = {TOTAL: m.compute}
    series.update({k: v for k, v in m.phase_compute.items() if k != "data"})
    by_rank: dict[int, dict[str, _Hit]] = {}
    for name, arr in series.items():
        for r, hit in _scan(name, arr, live, p).items():
            by_rank.setdefault(r, {})[name] = hit
    comm_excess = None
    if m.comm is not None:
        c = m.comm[:, live]
        comm_excess = nanmedian(c - _peer_median(c), axis=1)

    findings = []
    for r, hits in sorted(by_rank.items()):
        phase_hits = {k: h for k, h in hits.items() if k != TOTAL}
        if phase_hits:
            name = max(phase_hits, key=lambda k: phase_hits[k].excess_s)
            hit = phase_hits[name]
        else:
            name, hit = None, hits[TOTAL]
        if comm_excess is not None and not comm_excess[r] < 0:
            continue  # it does not arrive late: its long phase is waiting we cannot see, not compute
        lo, hi = live_idx[hit.lo], live_idx[hit.hi]
        mask = np.zeros(m.n_steps, dtype=bool)
        mask[lo:hi + 1] = True
        one = np.zeros_like(shift)
        one[r, mask] = hit.excess_s
        cost = slowdown(m, one, mask)
        if cost < p.min_slowdown:
            continue
        shift += one
        rank_id = int(m.ranks[r])
        where = f"phase {name}" if name else "compute outside the instrumented phases"
        step_t = float(nanmedian(m.step_time()[mask]))
        waits = ""
        if comm_excess is not None:
            waits = (f"; it waits {abs(comm_excess[r]) * 1e3:.1f} ms less in collectives than its "
                     "peers (it arrives last)")
        evidence = (f"rank {rank_id}'s {where} takes {hit.excess_s * 1e3:.1f} ms more than its peers' "
                    f"median {hit.base_s * 1e3:.1f} ms ({1 + hit.excess_s / hit.base_s:.2f}x) over steps "
                    f"{int(m.steps[lo])}-{int(m.steps[hi])}{waits}; healing it would make those steps "
                    f"{cost:.1%} faster (step time {step_t * 1e3:.1f} ms)")
        findings.append(Finding(
            kind="straggler", ranks=[rank_id], phase=name, first_step=int(m.steps[lo]),
            last_step=int(m.steps[hi]), severity=severity_for(cost), slowdown=cost, evidence=evidence,
            details={"excess_s": hit.excess_s, "peer_s": hit.base_s, "ratio": 1 + hit.excess_s / hit.base_s,
                     "z": round(hit.z, 2),
                     "series": sorted("compute" if k == TOTAL else k for k in hits)}))
    return findings, shift

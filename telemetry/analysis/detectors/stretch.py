"""A rank's stretch of steps above its peers, found robustly: the parameters (:class:`StragglerParams`),
the excess over the peers' median, window levels and their edges, the scan of one series
(:func:`scan`: a persistent stretch, or bursts more frequent than chance gives at the peers' rate:
:func:`binomial_tail`). Stragglers, data stalls and the utilization detectors read it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...steptable.matrix import even_sample, every_kth_step, nanmedian

# a short series of single steps, above its peers on this share of its steps by at least this share of their
# time, is judged whole (_whole): a clear straggler, not a small static difference between ranks
WHOLE_SHARE, WHOLE_EXCESS = 0.9, 0.5


@dataclass(frozen=True)
class StragglerParams:
    warmup_steps: int | None = None  # None: 5% of the steps, at least 2, at most 20
    min_rel_excess: float = 0.03  # the practical floor: a rank 3% slower in a series than its peers
    z_min: float = 4.0
    window: int = 31
    min_run: int = 5
    min_slowdown: float = 0.01  # below this a straggler is reported at info only (see min_quiet_cost)
    min_quiet_cost: float = 0.03  # ... and only if its excess would cost this much in a quiet job,
    min_small_cost: float = 0.005  # or this much when it is slow through most of the run (a small straggler)
    spike_sigma: float = 4.0
    min_hot_fraction: float = 0.05

    def warmup(self, n_steps: int) -> int:
        if self.warmup_steps is not None:
            return min(self.warmup_steps, max(n_steps - 1, 0))
        return int(min(20, max(2, round(0.05 * n_steps)))) if n_steps > 4 else 0

    def z_for(self, n_tests: int) -> float:
        """z threshold for n_tests rank-series tests: one false alarm in ~100 healthy jobs."""
        return max(self.z_min, math.sqrt(2.0 * math.log(max(n_tests, 1) / 0.01)))


def peer_median(arr: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """(R, S) median of each rank's peers (same group) at each step; leave-one-out in small groups.

    In a group of more than 64 ranks the per-step median is taken over 64 evenly spaced ranks:
    ranks are exchangeable for the group's centre, and its error (about 0.16 noise units) is far
    below the excess that counts, at a sixteenth of the cost for 1,024 ranks."""
    unique = np.unique(groups)
    if len(unique) == 1 and len(groups) > 16:  # one large group: one centre for all, no copy
        sample = arr[even_sample(np.arange(len(groups)))]
        return np.broadcast_to(nanmedian(sample, axis=0)[None, :], arr.shape)
    out = np.full_like(arr, np.nan)
    for g in unique:
        idx = np.flatnonzero(groups == g)
        if len(idx) == 1:
            continue  # no peers
        if len(idx) > 16:
            sample = arr[even_sample(idx)]
            out[idx] = nanmedian(sample, axis=0)[None, :]
            continue
        sub = arr[idx]
        for j, i in enumerate(idx):
            out[i] = nanmedian(np.delete(sub, j, axis=0), axis=0)
    return out


def block_level(e: np.ndarray, w: int, clip: float) -> tuple[np.ndarray, int]:
    """Per rank, the mean excess (clipped to +-clip, so that spikes cannot move it) over windows of
    about w steps, at half-window resolution: returns (R, n // h) levels and h. Each half-block
    takes the later window that holds it. One vectorized pass over the data, whatever its size."""
    R, n = e.shape
    h = max(1, w // 2)
    c = np.clip(e, -clip, clip)
    if np.isnan(c).any():
        c = np.where(np.isnan(c), 0.0, c)
    nh = n // h
    if nh < 2:
        return np.broadcast_to(c.mean(axis=1)[:, None], (R, max(nh, 1))).copy(), max(1, n if nh < 1 else h)
    half = c[:, : nh * h].reshape(R, nh, h).mean(axis=2)  # (R, nh)
    level = np.empty_like(half)
    level[:, :-1] = (half[:, :-1] + half[:, 1:]) / 2.0  # the window made of half-blocks k and k+1
    level[:, -1] = level[:, -2]
    return level, h


def expand(flags: np.ndarray, h: int, n: int) -> np.ndarray:
    """Half-block flags (nh,) -> step flags (n,); steps past the last half-block take its flag."""
    out = np.repeat(flags, h)[:n]
    if len(out) < n:
        out = np.concatenate([out, np.full(n - len(out), flags[-1])])
    return out


def robust_sigma(e: np.ndarray) -> float:
    """Typical per-step noise of one rank's excess: the median over ranks of each rank's MAD scale
    (from at most ~2,000 evenly spaced steps: the noise level needs no more)."""
    e = every_kth_step(e)
    med = nanmedian(e, axis=1)[:, None]
    per_rank = 1.4826 * nanmedian(np.abs(e - med), axis=1)
    s = float(nanmedian(per_rank))
    return s if np.isfinite(s) else 0.0


def refine_edges(x: np.ndarray, lo: int, hi: int, h: int) -> tuple[int, int]:
    """Move a hot stretch's edges (found at half-block resolution, ``h`` steps) to the steps where
    the excess changes level: the split maximizing the cumulative sum of (x - c), c halfway between
    the levels inside and outside, each edge searched from 2h steps outside where it was found to
    anywhere inside the stretch (a short noise run joined to the real one, with a quiet gap between,
    must not hold the onset early: a data stall from step 300 was dated 110). Deviations are clipped
    at twice the level difference, so one spike cannot pull an edge."""
    n = len(x)
    x = np.where(np.isfinite(x), x, np.nan)
    inside = float(np.nanmedian(x[lo : hi + 1]))
    rest = np.concatenate([x[:lo], x[hi + 1 :]])
    outside = float(np.nanmedian(rest)) if np.isfinite(rest).any() else 0.0
    step = inside - outside
    if not (np.isfinite(step) and step > 0):
        return lo, hi
    d = np.clip(np.nan_to_num(x - (inside + outside) / 2.0), -2 * step, 2 * step)
    cs = np.concatenate(([0.0], np.cumsum(d)))  # cs[k] = sum of d[:k]
    a, b = max(0, lo - 2 * h), hi
    new_lo = a + int(np.argmin(cs[a : b + 1]))  # maximizes sum d[k:...]
    a2, b2 = new_lo, min(n - 1, hi + 2 * h)
    new_hi = a2 + int(np.argmax(cs[a2 + 1 : b2 + 2]))  # maximizes sum d[...:k + 1]
    return new_lo, new_hi


def hot_mask(hot: np.ndarray, min_run: int) -> np.ndarray:
    """Keep only runs of True at least ``min_run`` long."""
    out = np.zeros_like(hot)
    idx = np.flatnonzero(np.diff(np.concatenate(([0], hot.astype(np.int8), [0]))))
    for a, b in zip(idx[::2], idx[1::2]):
        if b - a >= min_run:
            out[a:b] = True
    return out


@dataclass
class Hit:
    series: str
    mask: np.ndarray  # (S_live,) steps the rank is hot
    excess_s: float  # median excess over those steps
    base_s: float  # peers' typical time in the series
    z: float
    mode: str  # persistent or intermittent


def scan(
    series: str, a: np.ndarray, groups: np.ndarray, p: StragglerParams, z_min: float, whole: bool = False
) -> dict[int, Hit]:
    """Ranks running hot in one series (already restricted to the live steps). ``whole``: its columns are
    single steps, and a short series may be judged whole (:func:`_whole`)."""
    if a.shape[1] < p.min_run or a.shape[0] < 2:
        return {}
    peers = peer_median(a, groups)
    e = a - peers
    base = float(nanmedian(every_kth_step(peers)))
    if not np.isfinite(base) or base <= 0:
        return {}
    sigma = max(robust_sigma(e), 1e-9)
    n_live = a.shape[1]
    w = min(p.window, max(3, n_live // 4))
    level, h = block_level(e, w, clip=4.0 * sigma)
    thr = max(p.min_rel_excess * base, 2.0 * 1.253 * sigma / np.sqrt(w))
    spikes = e > max(p.spike_sigma * sigma, p.min_rel_excess * base)  # NaN compares False
    spike_rate = spikes.mean(axis=1)
    hot = level > thr  # (R, half-blocks)
    # only ranks with some hot stretch or frequent spikes can be stragglers: skip the rest
    candidates = np.flatnonzero(hot.any(axis=1) | (spike_rate >= p.min_hot_fraction))
    hits = {}
    for r in candidates:
        hit = None
        runs = hot_mask(expand(hot[r], h, n_live), p.min_run)
        if runs.sum() >= p.min_run:
            lo, hi = np.flatnonzero(runs)[[0, -1]]
            if runs[lo : hi + 1].mean() >= 0.5:  # hot through most of its span: one persistent stretch
                span = np.zeros_like(runs)
                span[lo : hi + 1] = True
                # judged as found first (most hot stretches of a large world are noise and fail
                # here), then again over its edges moved to where the excess changes level
                if _judge(series, e[r], span, base, sigma, p, z_min, "persistent") is not None:
                    lo, hi = refine_edges(e[r], int(lo), int(hi), h)
                    span = np.zeros_like(runs)
                    span[lo : hi + 1] = True
                    hit = _judge(series, e[r], span, base, sigma, p, z_min, "persistent")
        if hit is None and whole and n_live < 2 * p.window:
            hit = _whole(series, e[r], base, sigma, p, z_min)
        others = np.delete(spike_rate, r) if len(spike_rate) > 1 else np.zeros(1)
        if (
            spike_rate[r] >= p.min_hot_fraction
            and spike_rate[r] >= 4 * max(float(np.median(others)), 0.01)
            and binomial_tail(int(spikes[r].sum()), n_live, max(float(np.mean(others)), 0.01)) <= chance_for(z_min)
        ):
            # slow on some steps only: when that accounts for clearly more excess time (1.5x) than a
            # persistent stretch (whose median then sits barely above the floor), the rank is
            # intermittent; a stretch that holds the bursts anyway stays persistent (its edges are exact)
            bursts = _judge(series, e[r], dense(spikes[r]), base, sigma, p, z_min, "intermittent")
            if bursts is not None and (
                hit is None or bursts.excess_s * bursts.mask.sum() > 1.5 * hit.excess_s * hit.mask.sum()
            ):
                hit = bursts
        if hit is not None:
            hits[int(r)] = hit
    return hits


def _whole(series: str, e: np.ndarray, base: float, sigma: float, p: StragglerParams, z_min: float) -> Hit | None:
    """A short series (a profiler capture's dozen steps) in which the rank is above its peers on nearly
    every step, by half their time or more, judged over all of it. Its windowed level can dip under the bar in places: with two
    ranks the peers' median is the pair's mean, so the noise unit is half the straggler's own spread,
    and a neighbour's load makes its extra work vary several-fold from step to step."""
    ok = np.isfinite(e)
    if ok.sum() < p.min_run or (e[ok] > 0).mean() < WHOLE_SHARE or np.median(e[ok]) < WHOLE_EXCESS * base:
        return None
    return _judge(series, e, ok, base, sigma, p, z_min, "persistent")


def binomial_tail(k: int, n: int, q: float) -> float:
    """P(X >= k) for X ~ Binomial(n, q): how often chance alone gives a rank k spiky steps of n when
    its peers have them at rate q. Summed in log space (n up to a run's steps).

    >>> round(binomial_tail(5, 57, 6 / 171), 3)  # 5 hiccups in 57 steps, its peers 2 on average
    0.049
    >>> binomial_tail(40, 570, 0.01) < 1e-15
    True
    """
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    ks = np.arange(k, n + 1)
    lg = np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, n + 1)))))  # ln i! for i = 0..n
    logs = lg[n] - lg[ks] - lg[n - ks] + ks * math.log(q) + (n - ks) * math.log1p(-q)
    top = float(logs.max())
    return float(min(1.0, math.exp(top) * np.exp(logs - top).sum()))


def chance_for(z: float) -> float:
    """The chance a z threshold allows one test, exp(-z^2 / 2): the bound :meth:`StragglerParams.z_for`
    sets z from (0.01 / tests), so a count test at this level keeps the same one false alarm in
    about a hundred healthy jobs."""
    return math.exp(-z * z / 2.0)


def dense(spikes: np.ndarray) -> np.ndarray:
    """The spikes of the stretch where they come often: a rank slowed on some of its steps from step
    S (to step E) has a higher rate of spikes from S on than before (and after); a noise spike
    outside that stretch is not where it starts. Bernoulli change points (the onset, then the end),
    each kept only when it explains the spikes far better than one rate does (a likelihood ratio
    over 2 ln n + 10: scanning every step costs a Bonferroni term). Each edge is put where the rate
    says it most likely was: the first (last) spike of the stretch less (plus) the median gap
    between spikes at the stretch's rate, never past the spike outside it."""
    out = spikes.copy()
    n = len(spikes)
    if n < 10 or spikes.sum() < 3:
        return out
    onset = _change(spikes, rising=True)
    lo = 0 if onset is None else onset
    rest = spikes[lo:]
    back = _change(rest[::-1], rising=True) if rest.sum() >= 3 else None  # the end: a rise, read backwards
    hi = n - 1 if back is None else lo + len(rest) - 1 - back
    if hi <= lo:
        return out
    out[:lo] = False
    out[hi + 1 :] = False
    return out


def _change(x: np.ndarray, rising: bool) -> int | None:
    """The step at which a 0/1 series' rate rises (one change point), or None when one rate explains it."""
    n = len(x)
    c = np.concatenate(([0], np.cumsum(x.astype(np.int64))))
    k = np.arange(1, n)  # split before step k: [0, k) and [k, n)
    a, b = c[k], c[n] - c[k]
    na, nb = k, n - k

    def ll(ones: np.ndarray | int, total: np.ndarray | int) -> np.ndarray:
        q = np.clip(ones / np.maximum(total, 1), 1e-9, 1 - 1e-9)
        return ones * np.log(q) + (total - ones) * np.log1p(-q)

    gain = ll(a, na) + ll(b, nb) - ll(c[n], n)
    if rising:
        gain = np.where(b / nb > a / na, gain, -np.inf)
    best = int(np.argmax(gain))
    if not 2 * gain[best] > 2 * np.log(n) + 10:
        return None
    split = int(k[best])
    first = split + int(np.argmax(x[split:]))  # the stretch's first spike
    rate = float(b[best] / nb[best])
    gap = int(np.ceil(np.log(0.5) / np.log1p(-min(rate, 0.999)))) - 1 if rate > 0 else 0  # median geometric gap
    before = np.flatnonzero(x[:split])
    floor = int(before[-1]) + 1 if len(before) else 0
    return max(floor, first - max(gap, 0))


def _judge(
    series: str, e: np.ndarray, mask: np.ndarray, base: float, sigma: float, p: StragglerParams, z_min: float, mode: str
) -> Hit | None:
    seg = e[mask]
    seg = seg[np.isfinite(seg)]
    if seg.size < p.min_run:
        return None
    excess = float(np.median(seg))
    z = excess / (1.253 * sigma / np.sqrt(max(seg.size / 2.0, 1.0)))
    if excess >= p.min_rel_excess * base and z >= z_min:
        return Hit(series, mask, excess, base, z, mode)
    return None

"""Data stalls and input-bound ranks and jobs: waiting for input (:func:`detect_data_stalls`).

A rank whose data-loader wait is above its peers' (the straggler scan on the data series) delays the
step for everyone; a job whose every rank waits is job-wide. Either is ``input_bound`` when the wait
was there from the start (the first ``FROM_START`` of the steps; of windows read from Prometheus:
:func:`_early_windows`), else ``data_stall``. A rank's stall is named only where its wait stands out
against its compute (:class:`DataWait`): a rank slowed in everything also fetches slower, and that is
its straggling, not its input. The rules: docs/finding-kinds.md, "data_stall" and "input_bound".
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ...steptable.matrix import StepMatrix, even_sample, nanmedian, rank_median
from ..findings import Finding, severity_for
from . import inputs
from .context import Context, Found
from .stretch import StragglerParams, scan
from .whatif import slowdown

MIN_JOB_FRACTION = 0.05
STANDS_OUT = 1.2  # a rank's mean data wait over a stall's steps: at least this many times its peers' (and
# this many times more than its compute against theirs)
OWN_SHARE = 0.25  # and its excess at least this share of its own excess in compute over those steps
FROM_START = 0.1  # a rank's wait that begins within this share of the steps analyzed: its input is slow


def _early_windows(live_idx: np.ndarray) -> int:
    """Windows of several steps (a live job read from Prometheus): how many of the first live windows are
    "from the start": FROM_START of them, at least the first. A window is known only whole, so a wait
    that began in the second of 16 windows began after the start (the run store, from every step, dates
    the same onset past the first tenth: the two agree)."""
    return max(1, int(FROM_START * len(live_idx)))


@dataclass(frozen=True)
class DataWait:
    """The data wait of some ranks against their peers' over some steps (seconds per step): the
    means (a burst of long waits counts by its time, which a median would hide), the culprits'
    median, and their compute against their peers' over the same steps."""

    mean_s: float  # the culprits' mean wait per step (the median over culprit ranks)
    median_s: float  # the culprits' median wait
    peer_mean_s: float  # the peers' mean wait per step (the median over peer ranks)
    compute_excess_s: float  # the culprits' mean compute minus their peers' (the same medians)
    compute_ratio: float  # the culprits' mean compute over their peers'

    @property
    def excess_s(self) -> float:
        return self.mean_s - self.peer_mean_s

    @property
    def ratio(self) -> float:
        return self.mean_s / self.peer_mean_s if self.peer_mean_s > 0 else float("inf")

    def stands_out(self) -> bool:
        """The wait is the rank's own trouble: clearly above its peers', grown clearly more than its
        compute did, and not a small part of a slowness that hits its compute too."""
        compute_ratio = self.compute_ratio if np.isfinite(self.compute_ratio) else 1.0
        return (
            self.excess_s > 0
            and self.ratio >= STANDS_OUT * max(compute_ratio, 1.0)
            and self.excess_s >= OWN_SHARE * max(self.compute_excess_s, 0.0)
        )

    @classmethod
    def of(cls, m: StepMatrix, culprits: np.ndarray, cols: np.ndarray) -> "DataWait":
        """``culprits``: (R,) bool; ``cols``: (S,) bool, the steps."""
        mine, peers = np.flatnonzero(culprits), even_sample(np.flatnonzero(~culprits))
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a rank with no steps there: NaN, silently
            d = m.data[:, cols]
            mean = d.mean(axis=1)  # (R,) m.data has no NaN (a missing step waited 0)
            comp = np.nanmean(m.compute[:, cols], axis=1)
            ca, cb = float(nanmedian(comp[mine])), float(nanmedian(comp[peers]))
            return cls(
                mean_s=float(np.median(mean[mine])),
                median_s=float(np.median(np.median(d[mine], axis=1))),
                peer_mean_s=float(np.median(mean[peers])),
                compute_excess_s=ca - cb,
                compute_ratio=ca / cb if cb > 0 else float("nan"),
            )


def detect_data_stalls(
    m: StepMatrix, live: np.ndarray, shift: np.ndarray, p: StragglerParams | None = None
) -> tuple[list[Finding], np.ndarray]:
    p = p or StragglerParams()
    out_shift = np.zeros_like(shift)
    if "data" not in m.phases or m.n_steps == 0:
        return [], out_shift
    live_idx = np.flatnonzero(live)
    data = m.data
    findings = []
    everyone = np.zeros(m.n_ranks, dtype=int)
    hits = scan("data", data[:, live_idx], everyone, p, p.z_for(m.n_ranks)) if m.n_ranks > 1 else {}
    for r, hit in sorted(hits.items()):
        mask = np.zeros(m.n_steps, dtype=bool)
        mask[live_idx[hit.mask]] = True
        one = np.zeros_like(shift)
        one[r, mask] = hit.excess_s
        cost = slowdown(m, shift + out_shift + one, mask) - slowdown(m, shift + out_shift, mask)
        if cost < p.min_slowdown:
            continue
        first, last = np.flatnonzero(mask)[[0, -1]]
        span = np.zeros(m.n_steps, dtype=bool)
        span[first : last + 1] = True
        culprit = np.zeros(m.n_ranks, dtype=bool)
        culprit[r] = True
        wait = DataWait.of(m, culprit, span)
        if not wait.stands_out():
            continue
        out_shift += one
        rank_id = int(m.ranks[r])
        steps = f"{int(m.steps[first])}-{int(m.steps[last])}"
        hot = int(mask.sum())
        where = f"over steps {steps}" if hot == last - first + 1 else f"on {hot} of steps {steps}"
        if m.weight is not None:
            slow_input = first - live_idx[0] < _early_windows(live_idx)
        else:
            slow_input = first - live_idx[0] <= FROM_START * len(live_idx)
        evidence = (
            f"rank {rank_id} waits {hit.excess_s * 1e3:.1f} ms more for its next batch than its peers "
            f"({hit.base_s * 1e3:.1f} ms) {where} ({wait.mean_s * 1e3:.1f} ms per step on average "
            f"against {wait.peer_mean_s * 1e3:.1f} ms); the other ranks wait for it in the collective; "
            f"a data loader as fast as its peers' would make those steps {cost:.1%} faster"
        )
        details = {
            "excess_s": hit.excess_s,
            "peer_s": hit.base_s,
            "mode": hit.mode,
            "mean_s": wait.mean_s,
            "peer_mean_s": wait.peer_mean_s,
        }
        if slow_input:  # from the start: its input is slow, with readiness and bytes/s against its peers'
            mine, theirs = inputs.side(m, np.array([r]), span), inputs.side(m, np.flatnonzero(~culprit), span)
            said = inputs.evidence(mine, theirs)
            evidence = f"rank {rank_id}'s input is slow: " + evidence[len(f"rank {rank_id} ") :]
            evidence += f"; {said}" if said else ""
            details.update(inputs.details(mine, theirs))
        findings.append(
            Finding(
                kind="input_bound" if slow_input else "data_stall",
                ranks=[rank_id],
                phase="data",
                first_step=int(m.steps[first]),
                last_step=int(m.steps[last]),
                severity=severity_for(cost),
                slowdown=cost,
                evidence=evidence,
                details=details,
            )
        )
    # input-bound job: every rank waits
    t = m.step_time()
    waits = rank_median(data - out_shift)
    frac = float(np.nansum(waits[live]) / max(np.nansum(t[live]), 1e-12))
    if frac >= MIN_JOB_FRACTION:
        one = np.zeros_like(shift)
        one[:, live] = np.clip(data - out_shift, 0, None)[:, live]
        cost = slowdown(m, shift + out_shift + one, live) - slowdown(m, shift + out_shift, live)
        if cost >= p.min_slowdown:
            out_shift += one
            mean_wait = float(np.nanmean(waits[live]))  # frac is this mean's share: the same numbers
            # input-bound from the start, or a wait that came later (a job-wide data stall, as before)
            n_early = _early_windows(live_idx) if m.weight is not None else max(5, int(FROM_START * len(live_idx)))
            early = live_idx[:n_early]
            early_frac = float(np.nansum(waits[early]) / max(np.nansum(t[early]), 1e-12))
            from_start = early_frac >= 0.5 * frac
            everyone_in = inputs.side(m, np.arange(m.n_ranks), live)
            said = inputs.evidence(everyone_in, None, "the median rank") if from_start else ""
            findings.append(
                Finding(
                    kind="input_bound" if from_start else "data_stall",
                    ranks=[],
                    phase="data",
                    first_step=int(m.steps[live][0]),
                    last_step=int(m.steps[live][-1]),
                    severity=severity_for(cost),
                    slowdown=cost,
                    evidence=(
                        f"{'the job is input-bound' if from_start else 'the job waits for input'}: the median rank waits {mean_wait * 1e3:.1f} ms per step for data "
                        f"on average ({nanmedian(waits[live]) * 1e3:.1f} ms on a typical step), {frac:.1%} of the "
                        f"job's time; with input ready in time steps would be {cost:.1%} faster"
                        + (f"; {said}" if said else "")
                    ),
                    details={"wait_fraction": frac, **(inputs.details(everyone_in, None) if from_start else {})},
                )
            )
    return findings, out_shift


def detect(m: StepMatrix | None, ctx: Context) -> Found:
    """Ranks stalled on data, on what the stragglers leave (the detectors' table)."""
    if m is None or ctx.live is None or ctx.shift is None:
        return Found()
    found, more = detect_data_stalls(m, ctx.live, ctx.shift, ctx.params.straggler)
    return Found(found, more)

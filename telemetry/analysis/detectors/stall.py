"""Data stalls: ranks (or the whole job) waiting for input.

A rank whose data-loader wait is above its peers' (the same scan as for stragglers, on the data
series, all ranks as peers) delays the step for everyone: its peers wait for it in the collective.
What-if: its wait at the peers' level. A job whose every rank waits (median wait at least
``min_job_fraction`` of the step) is input-bound: what-if, no wait at all.
"""

from __future__ import annotations

import numpy as np

from ..findings import Finding, severity_for
from .matrix import StepMatrix, nanmedian, rank_median
from .straggler import StragglerParams, scan
from .whatif import slowdown

MIN_JOB_FRACTION = 0.05


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
        out_shift += one
        first, last = np.flatnonzero(mask)[[0, -1]]
        rank_id = int(m.ranks[r])
        findings.append(
            Finding(
                kind="data_stall",
                ranks=[rank_id],
                phase="data",
                first_step=int(m.steps[first]),
                last_step=int(m.steps[last]),
                severity=severity_for(cost),
                slowdown=cost,
                evidence=(
                    f"rank {rank_id} waits {hit.excess_s * 1e3:.1f} ms more for its next batch than its peers "
                    f"({hit.base_s * 1e3:.1f} ms) over steps {int(m.steps[first])}-{int(m.steps[last])}; the "
                    f"other ranks wait for it in the collective; a data loader as fast as its peers' would "
                    f"make those steps {cost:.1%} faster"
                ),
                details={"excess_s": hit.excess_s, "peer_s": hit.base_s, "mode": hit.mode},
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
            findings.append(
                Finding(
                    kind="data_stall",
                    ranks=[],
                    phase="data",
                    first_step=int(m.steps[live][0]),
                    last_step=int(m.steps[live][-1]),
                    severity=severity_for(cost),
                    slowdown=cost,
                    evidence=(
                        f"the job is input-bound: every rank waits a median {nanmedian(waits[live]) * 1e3:.1f} ms "
                        f"per step for data ({frac:.1%} of the step); with input ready in time steps would be "
                        f"{cost:.1%} faster"
                    ),
                    details={"wait_fraction": frac},
                )
            )
    return findings, out_shift

"""A synchronous data-parallel step, simulated: the steps table a real job would write.

Each rank computes forward/backward/optimizer (lognormal noise around a per-rank static factor),
then all ranks meet in the gradient all-reduce inside backward: the step ends when the slowest
rank's compute is done plus the collective's own time, so faster ranks wait (their comm_s grows).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

PHASES = {"forward": 0.010, "backward": 0.020, "optimizer": 0.004}


def simulate(ranks=8, steps=200, seed=0, jitter=0.05, static=0.01, comm_s=0.005,
             slow=None, spikes=(), all_rank_slow_steps=(), warmup_factor=3.0):
    """slow: {(rank, phase): (factor, first_step, last_step)}; spikes: [(rank, step, seconds)]."""
    rng = np.random.default_rng(seed)
    slow = slow or {}
    rank_factor = 1 + rng.normal(0, static, size=ranks)
    rows = []
    t = 1.7e9
    for s in range(steps):
        comp = {}
        for p, base in PHASES.items():
            x = base * rank_factor * rng.lognormal(0, jitter, size=ranks)
            if s < 2:
                x *= warmup_factor
            for (r, ph), (f, lo, hi) in slow.items():
                if ph == p and lo <= s <= hi:
                    x[r] *= f
            comp[p] = x
        total = sum(comp.values())
        for r, step, sec in spikes:
            if step == s:
                comp["forward"][r] += sec
                total[r] += sec
        if s in all_rank_slow_steps:
            comp["optimizer"] = comp["optimizer"] + 0.05
            total = total + 0.05
        own_comm = comm_s * rng.lognormal(0, jitter)
        end = total.max() + own_comm
        for r in range(ranks):
            wait = end - total[r]
            rows.append({"rank": r, "step": s, "start_s": t, "duration_s": end,
                         "forward_s": comp["forward"][r], "backward_s": comp["backward"][r] + wait,
                         "optimizer_s": comp["optimizer"][r], "comm_s": wait,
                         "comm.backward_s": wait, "tokens": 4096, "samples": 8})
        t += end
    return pd.DataFrame(rows)

"""Detectors by parallel dimension (issue 30): slow communication names the dimension whose collectives
slowed (comm_group.<label>_s columns), and a job without such columns is told as before."""

import numpy as np
import pandas as pd

from telemetry.analysis.detectors import analyze


def job(slow_group, ranks=8, steps=300, onset=150, extra_s=0.012, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for step in range(steps):
        for rank in range(ranks):
            fwd = 0.030 * (1 + 0.01 * rng.standard_normal())
            bwd = 0.050 * (1 + 0.01 * rng.standard_normal())
            groups = {"dp": 0.006, "tp": 0.004}
            if slow_group and step >= onset:
                groups[slow_group] += extra_s
            comm = sum(groups.values())
            rows.append(
                {
                    "rank": rank,
                    "step": step,
                    "start_s": step * 0.1,
                    "duration_s": fwd + bwd + comm,
                    "forward_s": fwd,
                    "backward_s": bwd + comm,
                    "comm.backward_s": comm,
                    "comm_s": comm,
                    **{f"comm_group.{g}_s": v for g, v in groups.items()},
                    **{f"comm_group.{g}_bytes": 1_000_000 for g in groups},
                }
            )
    return pd.DataFrame(rows)


def test_slow_communication_names_the_dimension_that_slowed():
    for group in ("tp", "dp"):
        (f,) = [f for f in analyze(job(group)).findings if f.kind == "slow_comm"]
        assert f.details["group"] == group and f.first_step in range(148, 153)
        assert f"in the {group} collectives" in f.evidence
        other = "dp" if group == "tp" else "tp"
        assert abs(f.details["group_change_s"][other]) < 0.002 < f.details["group_change_s"][group]


def test_without_dimension_columns_slow_communication_is_told_as_before():
    table = job("tp").drop(columns=[c for c in job("tp").columns if c.startswith("comm_group.")])
    (f,) = [f for f in analyze(table).findings if f.kind == "slow_comm"]
    assert "group" not in f.details and "collectives" in f.evidence and " in the " not in f.evidence

"""open_input (telemetry/analysis/inputs/load.py): the one loader, on per-operation traces and steps tables,
and its note on a multi-rank run without collectives."""

import math

import pandas as pd
import pytest

from telemetry.analysis.inputs.formats import per_op_to_steps
from telemetry.analysis.inputs.load import PER_OP_TRACE, STEPS_TABLE, open_input
from telemetry.cli import main as cli


def ops_frame():
    """Rank 0 step 0 (stage 0) and step 1; rank 1 step 0 (stage 1), with rows to be dropped."""
    rows = [
        # rank, step, optype, start_ts, duration, stage, dp_rank
        (0, 0, "forward-compute", 10.00, 0.30, 0, 0),
        (0, 0, "send-forward", 10.30, 0.05, 0, 0),
        (0, 0, "backward-compute", 10.35, 0.50, 0, 0),
        (0, 0, "all-reduce", 10.85, 0.10, 0, 0),
        (0, 0, "optimizer-step", 10.95, 0.04, 0, 0),
        (0, 0, "gc", 10.99, 0.01, 0, 0),  # the last op ends at 11.00
        (0, 0, "backward-compute", 9.00, -0.50, 0, 0),  # negative: dropped (would move the start to 9.0)
        (0, 0, "forward-compute", 5.00, math.nan, 0, 0),  # NaN duration: dropped
        (0, 0, "forward-compute", math.nan, 100.0, 0, 0),  # NaN start: dropped
        (0, 1, "forward-compute", 12.00, 0.25, 0, 0),
        (0, 1, "forward-compute", 12.25, 0.25, 0, 0),  # a phase sums its ops
        (0, 1, "backward-compute", 12.50, 0.40, 0, 0),
        (1, 0, "first-op", 10.10, 0.00, 1, 0),
        (1, 0, "recv-forward", 10.10, 0.20, 1, 0),
        (1, 0, "forward-compute", 10.30, 0.30, 1, 0),
        (1, 0, "backward-compute", 10.60, 0.20, 1, 0),  # ends at 10.80
    ]
    return pd.DataFrame(rows, columns=["rank", "step", "optype", "start_ts", "duration", "stage", "dp_rank"])


def row(table, rank, step):
    [r] = table[(table["rank"] == rank) & (table["step"] == step)].to_dict("records")
    return r


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_open_input_converts_a_per_op_trace(tmp_path, suffix):
    path = tmp_path / f"trace.{suffix}"
    ops = ops_frame()
    if suffix == "csv":
        ops.to_csv(path, index=False)
    else:
        ops.to_parquet(path, index=False)
    run = open_input(str(path))
    assert run.kind == PER_OP_TRACE
    t = run.table
    assert sorted(zip(t["rank"], t["step"])) == [(0, 0), (0, 1), (1, 0)]
    assert t["rank"].dtype == "int64" and t["step"].dtype == "int64"
    r = row(t, 0, 0)
    assert r["duration_s"] == pytest.approx(1.0) and r["comm_s"] == pytest.approx(0.15)
    assert r["forward_s"] == pytest.approx(0.30)
    assert row(t, 1, 0)["stage"] == 1
    assert run.meta == {} and run.progress == {} and run.records == []


def test_open_input_reads_a_steps_table_as_it_is(tmp_path):
    path = tmp_path / "steps.csv"
    per_op_to_steps(ops_frame()).to_csv(path, index=False)
    run = open_input(str(path))
    assert run.kind == STEPS_TABLE
    assert row(run.table, 0, 0)["duration_s"] == pytest.approx(1.0)


def test_a_multi_rank_run_without_collectives_is_called_out(tmp_path, capsys):
    import pandas as pd

    path = tmp_path / "t.csv"
    pd.DataFrame(
        {
            "rank": [0, 1, 0, 1],
            "step": [0, 0, 1, 1],
            "start_s": [0.0, 0.0, 1.0, 1.0],
            "duration_s": [1.0] * 4,
            "forward_s": [0.5] * 4,
        }
    ).to_csv(path, index=False)
    assert cli(["analyze", str(path)]) == 0
    assert "2 ranks but no time in collectives was recorded" in capsys.readouterr().out
    with_comm = tmp_path / "c.csv"
    pd.DataFrame(
        {"rank": [0, 1], "step": [0, 0], "start_s": [0.0, 0.0], "duration_s": [1.0, 1.0], "comm_s": [0.1, 0.2]}
    ).to_csv(with_comm, index=False)
    assert cli(["analyze", str(with_comm)]) == 0
    assert "no time in collectives" not in capsys.readouterr().out

"""Per-operation traces (telemetry/analysis/inputs/formats.py): one row per operation turned into steps tables."""

import math

import pandas as pd
import pytest

from telemetry.analysis.inputs.formats import is_comm, is_per_op_trace, per_op_to_steps, phase_of


@pytest.mark.parametrize(
    "optype, phase",
    [
        ("forward-compute", "forward"),
        ("Forward-Compute", "forward"),  # case does not matter
        ("backward-compute", "backward"),
        ("optimizer", "optimizer"),
        ("optimizer-step", "optimizer"),
        ("gc", "gc"),
        ("first-op", None),  # a marker, not a phase
        ("embedding-lookup", "embedding_lookup"),  # another compute optype becomes a phase column name
        ("3d-parallel-thing", None),  # ... only when it can be one (an identifier)
    ],
)
def test_phase_of_compute_optypes(optype, phase):
    assert phase_of(optype) == phase
    assert not is_comm(optype)


@pytest.mark.parametrize(
    "optype",
    [
        "send-forward",
        "recv-backward",
        "forward-send",
        "backward-recv",
        "all-gather",
        "reduce-scatter",
        "all-reduce",
        "allreduce",
        "allgather",
        "broadcast",
        "all-to-all",
        "comm",
        "dp-comm",
        "ALL-REDUCE",
    ],
)
def test_communication_optypes_are_comm_and_no_phase(optype):
    assert is_comm(optype)
    assert phase_of(optype) is None  # even "forward-send": the send is communication, not forward compute


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


def test_per_op_to_steps_builds_one_row_per_rank_and_step():
    t = per_op_to_steps(ops_frame())
    assert sorted(zip(t["rank"], t["step"])) == [(0, 0), (0, 1), (1, 0)]
    assert {
        "start_s",
        "duration_s",
        "forward_s",
        "backward_s",
        "optimizer_s",
        "gc_s",
        "comm_s",
        "stage",
        "dp_rank",
    } <= set(t.columns)
    assert not {"first_op_s", "send_forward_s", "all_reduce_s"} & set(t.columns)

    r = row(t, 0, 0)
    assert r["start_s"] == pytest.approx(10.0)  # the first op's start: the dropped rows do not count
    assert r["duration_s"] == pytest.approx(1.0)  # first op's start to the last op's end
    assert r["forward_s"] == pytest.approx(0.30)
    assert r["backward_s"] == pytest.approx(0.50)  # the negative row is not subtracted
    assert r["optimizer_s"] == pytest.approx(0.04) and r["gc_s"] == pytest.approx(0.01)
    assert r["comm_s"] == pytest.approx(0.15)  # send-forward + all-reduce

    r = row(t, 0, 1)
    assert r["start_s"] == pytest.approx(12.0) and r["duration_s"] == pytest.approx(0.90)
    assert r["forward_s"] == pytest.approx(0.50) and r["backward_s"] == pytest.approx(0.40)
    assert r["optimizer_s"] == 0.0 and r["gc_s"] == 0.0  # a phase that did not run took no time
    assert r["comm_s"] == 0.0  # no communication op: zero, not missing

    r = row(t, 1, 0)
    assert r["start_s"] == pytest.approx(10.10) and r["duration_s"] == pytest.approx(0.70)
    assert r["comm_s"] == pytest.approx(0.20) and r["forward_s"] == pytest.approx(0.30)
    assert (r["stage"], r["dp_rank"]) == (1, 0)
    assert (row(t, 0, 0)["stage"], row(t, 0, 0)["dp_rank"]) == (0, 0)


def test_per_op_to_steps_without_layout_columns():
    t = per_op_to_steps(ops_frame().drop(columns=["stage", "dp_rank"]))
    assert "stage" not in t.columns and "dp_rank" not in t.columns
    assert row(t, 0, 0)["duration_s"] == pytest.approx(1.0)


def test_is_per_op_trace():
    ops = ops_frame()
    assert is_per_op_trace(ops)
    assert not is_per_op_trace(ops.drop(columns=["optype"]))
    assert not is_per_op_trace(ops.assign(duration_s=1.0))  # already a steps table
    assert not is_per_op_trace(per_op_to_steps(ops))


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier"])
def test_torch_collective_names_are_communication_not_phases(op):
    assert is_comm(op) and phase_of(op) is None

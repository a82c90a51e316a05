"""Dependency replay of per-operation traces (telemetry/analysis/detectors/replay.py): hand-built
1F1B pipelines whose step times are worked out by hand, and the OSDI 2025 straggler-analysis
corpus (skipped when ../shared/corpora/straggler-analysis is absent)."""

import ast
import json
import os

import numpy as np
import pandas as pd
import pytest

from telemetry.analysis.detectors import analyze
from telemetry.analysis.detectors.replay import Replay, op_role, reprice
from telemetry.analysis.findings import Finding
from telemetry.analysis.inputs.formats import per_op_to_steps
from telemetry.steptable.matrix import from_table
from tests.helpers.paths import ROOT

CORPUS = os.path.join(os.path.dirname(ROOT), "shared", "corpora", "straggler-analysis")

NAMES = {
    "F": "forward-compute",
    "B": "backward-compute",
    "fs": "forward-send",
    "fr": "forward-recv",
    "bs": "backward-send",
    "br": "backward-recv",
    "emb": "embedding-grads-all-reduce",
    "rs": "grads-reduce-scatter",
    "clip": "optimizer-clip-main-grad",
    "opt": "optimizer",
}


def trace(ranks: dict, steps=(0,), step_len=100.0) -> pd.DataFrame:
    """{rank: (dp_rank, stage, [(op, micro-batch, start, duration), ...])} -> a per-op trace."""
    rows = []
    for s in steps:
        for rank, (dp, stage, ops) in ranks.items():
            for op, mb, start, dur in ops:
                rows.append((dp, stage, rank, s, NAMES[op], s * step_len + start, dur, mb))
    return pd.DataFrame(rows, columns=["dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration", "mb_id"])


# 2 stages x 2 data-parallel ranks, 3 micro-batches, 1F1B (Megatron's order: stage 0 warms up with one
# forward, sends and receives posted together are one row each at the same start), transfers 0.1 s.
# Pipeline dp0: stage 0 forward 1, backward 2; stage 1 forward 1.5, backward 3. Pipeline dp1: the same
# but stage 1's backward is 2.5. Then the tied embeddings' all-reduce (stage 0 with stage 1 of the same
# pipeline, 0.2), the reduce-scatter (each stage's two ranks, 0.5), the gradient norm (every rank,
# 0.2) and the optimizer (0.3). Every time below is worked out by hand; the step ends at 18.1.
ASYMMETRIC = {
    0: (
        0,
        0,
        [
            ("F", 0, 0, 1),
            ("fs", -1, 1, 0.1),
            ("F", 1, 1.1, 1),
            ("fs", -1, 2.1, 3.6),
            ("br", -1, 2.1, 3.6),
            ("B", 0, 5.7, 2),
            ("F", 2, 7.7, 1),
            ("fs", -1, 8.7, 1.6),
            ("br", -1, 8.7, 1.6),
            ("B", 1, 10.3, 2),
            ("br", -1, 12.3, 2.6),
            ("B", 2, 14.9, 2),
            ("emb", -1, 16.9, 0.2),
            ("rs", -1, 17.1, 0.5),
            ("clip", -1, 17.6, 0.2),
            ("opt", -1, 17.8, 0.3),
        ],
    ),
    2: (
        0,
        1,
        [
            ("fr", -1, 0, 1.1),
            ("F", 0, 1.1, 1.5),
            ("B", 0, 2.6, 3),
            ("bs", -1, 5.6, 0.1),
            ("fr", -1, 5.6, 0.1),
            ("F", 1, 5.7, 1.5),
            ("B", 1, 7.2, 3),
            ("bs", -1, 10.2, 0.1),
            ("fr", -1, 10.2, 0.1),
            ("F", 2, 10.3, 1.5),
            ("B", 2, 11.8, 3),
            ("bs", -1, 14.8, 0.1),
            ("emb", -1, 14.9, 2.2),
            ("rs", -1, 17.1, 0.5),
            ("clip", -1, 17.6, 0.2),
            ("opt", -1, 17.8, 0.3),
        ],
    ),
    1: (
        1,
        0,
        [
            ("F", 0, 0, 1),
            ("fs", -1, 1, 0.1),
            ("F", 1, 1.1, 1),
            ("fs", -1, 2.1, 3.1),
            ("br", -1, 2.1, 3.1),
            ("B", 0, 5.2, 2),
            ("F", 2, 7.2, 1),
            ("fs", -1, 8.2, 1.1),
            ("br", -1, 8.2, 1.1),
            ("B", 1, 9.3, 2),
            ("br", -1, 11.3, 2.1),
            ("B", 2, 13.4, 2),
            ("emb", -1, 15.4, 0.2),
            ("rs", -1, 15.6, 2.0),
            ("clip", -1, 17.6, 0.2),
            ("opt", -1, 17.8, 0.3),
        ],
    ),
    3: (
        1,
        1,
        [
            ("fr", -1, 0, 1.1),
            ("F", 0, 1.1, 1.5),
            ("B", 0, 2.6, 2.5),
            ("bs", -1, 5.1, 0.1),
            ("fr", -1, 5.1, 0.1),
            ("F", 1, 5.2, 1.5),
            ("B", 1, 6.7, 2.5),
            ("bs", -1, 9.2, 0.1),
            ("fr", -1, 9.2, 0.1),
            ("F", 2, 9.3, 1.5),
            ("B", 2, 10.8, 2.5),
            ("bs", -1, 13.3, 0.1),
            ("emb", -1, 13.4, 2.2),
            ("rs", -1, 15.6, 2.0),
            ("clip", -1, 17.6, 0.2),
            ("opt", -1, 17.8, 0.3),
        ],
    ),
}

# Both pipelines alike: stage 0 forward 1, backward 2; stage 1 (twice the work) forward 2, backward 4.
# The step ends at 22.4. Rebalanced (the work moved: every stage forward 1.5, backward 3) it would end
# at 19.4, worked out the same way: a cost of 1 - 19.4 / 22.4 = 13.4%.
_S0 = [
    ("F", 0, 0, 1),
    ("fs", -1, 1, 0.1),
    ("F", 1, 1.1, 1),
    ("fs", -1, 2.1, 5.1),
    ("br", -1, 2.1, 5.1),
    ("B", 0, 7.2, 2),
    ("F", 2, 9.2, 1),
    ("fs", -1, 10.2, 3.1),
    ("br", -1, 10.2, 3.1),
    ("B", 1, 13.3, 2),
    ("br", -1, 15.3, 4.1),
    ("B", 2, 19.4, 2),
    ("rs", -1, 21.4, 0.5),
    ("clip", -1, 21.9, 0.2),
    ("opt", -1, 22.1, 0.3),
]
_S1 = [
    ("fr", -1, 0, 1.1),
    ("F", 0, 1.1, 2),
    ("B", 0, 3.1, 4),
    ("bs", -1, 7.1, 0.1),
    ("fr", -1, 7.1, 0.1),
    ("F", 1, 7.2, 2),
    ("B", 1, 9.2, 4),
    ("bs", -1, 13.2, 0.1),
    ("fr", -1, 13.2, 0.1),
    ("F", 2, 13.3, 2),
    ("B", 2, 15.3, 4),
    ("bs", -1, 19.3, 0.1),
    ("rs", -1, 19.4, 0.5),
    ("clip", -1, 19.9, 2.2),
    ("opt", -1, 22.1, 0.3),
]
HEAVY_LAST_STAGE = {0: (0, 0, _S0), 1: (1, 0, _S0), 2: (0, 1, _S1), 3: (1, 1, _S1)}


def test_roles_of_megatron_optypes():
    assert op_role("forward-compute")[0] == op_role("optimizer")[0]  # compute
    assert op_role("forward-send") == op_role("forward-recv") == op_role("send-forward")
    assert op_role("backward-recv")[1] == "backward"
    assert op_role("optimizer-clip-main-grad")[1] == "world"
    assert op_role("embedding-grads-all-reduce")[1] == "pipeline"
    assert op_role("grads-reduce-scatter")[1] == op_role("params-all-gather")[1] == "stage"
    assert op_role("layernorm-grads-all-reduce") == op_role("first-op")  # local: its tensor-parallel peers
    # are not in the trace


def test_replay_of_actual_durations_is_the_recorded_step():
    rp = Replay.build(trace(ASYMMETRIC))
    assert rp.transfer == {"forward": pytest.approx(0.1), "backward": pytest.approx(0.1)}
    assert rp.recorded_times() == pytest.approx([18.1])
    assert rp.step_times() == pytest.approx([18.1])


def test_replay_over_several_steps_at_once():
    rp = Replay.build(trace(ASYMMETRIC, steps=(3, 4, 5)))
    assert list(rp.steps) == [3, 4, 5]
    assert rp.step_times() == pytest.approx([18.1] * 3)
    # stage 1's last backward of step 4 one second longer: only step 4 moves, by the whole second
    # (it is on the critical path: the reduce-scatter waits for it)
    dur = rp.rows["duration"].to_numpy(float).copy()
    r = rp.rows
    dur[((r["step"] == 4) & (r["rank"] == 2) & (r["optype"] == "backward-compute") & (r["mb_id"] == 2)).to_numpy()] += 1
    assert rp.step_times(dur) == pytest.approx([18.1, 19.1, 18.1])


def test_rebalancing_a_stage_costs_what_the_hand_replay_says():
    rp = Replay.build(trace(HEAVY_LAST_STAGE))
    assert rp.step_times() == pytest.approx([22.4])
    healed = rp.heal_stage(rp.rows["duration"].to_numpy(float), stage=1)
    compute = rp.rows["optype"].isin(["forward-compute", "backward-compute"]).to_numpy()
    assert set(np.round(healed[compute], 9)) == {1.5, 3.0}  # the work moved, not removed
    assert rp.step_times(healed) == pytest.approx([19.4])


def test_reprice_costs_a_stage_imbalance_finding_by_the_replay():
    ops = trace(HEAVY_LAST_STAGE, steps=(0, 1, 2))
    m = from_table(per_op_to_steps(ops))
    f = Finding(
        kind="stage_imbalance",
        ranks=[2, 3],
        phase="backward",
        first_step=0,
        last_step=2,
        severity="critical",
        slowdown=0.4,
        evidence="pipeline stage 1 (ranks 2, 3) computes 3000.0 ms more per step than the typical stage "
        "(3000.0 ms, 2.00x), most of it in backward; rebalancing it would make steps 40.0% "
        "faster (replay of a synchronous step; with pipelining this is an upper bound)",
        details={"stage": 1},
    )
    summary = {"slowdown": 0.0}
    [g] = reprice([f], summary, ops, m, shift=None)
    cost = 1 - 19.4 / 22.4
    assert g.slowdown == pytest.approx(cost)
    assert summary["slowdown"] == pytest.approx(cost, abs=1e-6)
    assert g.details["whatif"] == "replay" and g.details["whatif_sync"] == 0.4
    assert f"would make steps {cost:.1%} faster (replay of the trace's dependencies" in g.evidence
    assert "synchronous" not in g.evidence


def test_healing_a_straggler_and_balancing():
    rp = Replay.build(trace(ASYMMETRIC))
    dur = rp.rows["duration"].to_numpy(float)
    # rank 2 (stage 1 of pipeline 0) at its peer's (rank 3's) durations: the two pipelines alike,
    # each as fast as pipeline 1 was: its stage 0 ends at 15.4, then 0.2 + 0.5 + 0.2 + 0.3
    healed = rp.heal_ranks(dur, [2])
    assert rp.step_times(healed) == pytest.approx([16.6])
    b = rp.rows["optype"].eq("backward-compute").to_numpy() & rp.rows["rank"].eq(2).to_numpy()
    assert set(healed[b]) == {2.5}
    # balancing: each op at its stage's mean, per optype (stage 1's backward: (3 + 2.5) / 2)
    balanced = rp.heal_balance(dur)
    b1 = rp.rows["optype"].eq("backward-compute").to_numpy() & rp.rows["stage"].eq(1).to_numpy()
    assert set(balanced[b1]) == {2.75}
    assert rp.step_times(balanced)[0] == pytest.approx(18.1 - 0.25 * 3, abs=1e-9)


def test_a_step_whose_order_contradicts_the_dependencies_is_left_out(caplog):
    ops = trace(ASYMMETRIC, steps=(0, 1))
    clip = (ops["step"] == 1) & (ops["rank"] == 0) & (ops["optype"] == "optimizer-clip-main-grad")
    ops.loc[clip, "start_ts"] = 100 + 16.0  # rank 0 all-reduces the norm before its embeddings: a deadlock
    rp = Replay.build(ops)
    assert list(rp.steps) == [0] and rp.step_times() == pytest.approx([18.1])
    assert "in step(s) 1 the recorded order of operations contradicts their dependencies" in caplog.text


def test_no_layout_no_replay():
    assert Replay.build(trace(ASYMMETRIC).drop(columns=["stage"])) is None
    assert Replay.build(None) is None


# -- the corpus -------------------------------------------------------------------------------

corpus = pytest.mark.skipif(not os.path.isdir(CORPUS), reason=f"{CORPUS} is absent")


def _result(name):
    with open(os.path.join(CORPUS, f"result-{name}.json")) as fh:
        res = json.load(fh)
    return {k: ast.literal_eval(v) if isinstance(v, str) else v for k, v in res.items()}


@corpus
@pytest.mark.parametrize("name", ["ST", "SE", "AR"])
def test_corpus_replay_matches_the_papers_replay(name):
    """With the recorded durations our replay is the paper's no-launch-delay replay, step by step."""
    rp = Replay.build(pd.read_parquet(os.path.join(CORPUS, f"trace-{name}.parquet")))
    paper = _result(name)["step_t_nodelay"]
    ours = rp.step_times()
    ref = np.array([paper[str(s)] for s in rp.steps])
    assert np.abs(ours / ref - 1).max() < 0.01


@corpus
@pytest.mark.parametrize("name, tolerance", [("ST", 0.2), ("SE", 0.2), ("AR", 0.1)])
def test_corpus_total_whatif_near_the_papers(name, tolerance):
    from telemetry.analysis.inputs.load import open_input

    run = open_input(os.path.join(CORPUS, f"trace-{name}.parquet"))
    assert run.ops is not None
    result = analyze(run.table, run.progress, run.world_size, ops=run.ops)
    paper = 1 - 1 / _result(name)["blocking_slowdown"]
    ours = result.summary["slowdown"]
    assert abs(ours / paper - 1) <= tolerance, (ours, paper)
    replayed = [f for f in result.findings if f.details.get("whatif") == "replay"]
    assert replayed and result.summary["whatif"] == "replay"
    for f in replayed:
        assert f"{f.slowdown:.1%} faster" in f.evidence
        assert "synchronous step" not in f.evidence
    # without the operations nothing changes: the steps table's own what-if
    plain = analyze(run.table, run.progress, run.world_size)
    assert "whatif" not in plain.summary
    assert not any(f.details.get("whatif") for f in plain.findings)

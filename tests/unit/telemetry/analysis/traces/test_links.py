"""From a finding to its traces (telemetry/analysis/traces/links.py): the traced steps are replayed from the
steps table as the OTLP sink chose them, and a finding lists its worst traced steps' trace ids."""

import pandas as pd

from telemetry.analysis.findings import Finding
from telemetry.analysis.traces.links import traced, with_trace_ids
from telemetry.traceids import trace_id_hex


def table(durations_by_rank, forward_by_rank=None):
    rows = []
    for rank, durations in durations_by_rank.items():
        for step, d in enumerate(durations):
            fwd = (forward_by_rank or {}).get(rank, [d / 2] * len(durations))[step]
            rows.append({"rank": rank, "step": step, "start_s": float(step), "duration_s": d, "forward_s": fwd})
    return pd.DataFrame(rows)


def straggler(first=0, last=None):
    return Finding("straggler", [1], "forward", first, last, "warning", 0.1, "rank 1 is slow")


def test_the_sampler_is_replayed_per_rank_every_nth_and_slow_steps():
    t = table({0: [0.1] * 30, 1: [0.1] * 20 + [0.5] + [0.1] * 9})
    flags = traced(t, every=10)
    chosen = {(int(r), int(s)) for r, s in t.loc[flags, ["rank", "step"]].itertuples(index=False)}
    assert chosen == {(0, 0), (0, 10), (0, 20), (1, 0), (1, 10), (1, 20)}
    t.loc[(t["rank"] == 1) & (t["step"] == 23), "duration_s"] = 0.5  # slower than twice rank 1's median
    chosen = {(int(r), int(s)) for r, s in t.loc[traced(t, every=10), ["rank", "step"]].itertuples(index=False)}
    assert (1, 23) in chosen and (0, 23) not in chosen


def test_a_finding_lists_its_worst_traced_steps_worst_first():
    fwd = [0.05] * 40
    fwd[7], fwd[12], fwd[30] = 0.4, 0.3, 0.9  # rank 1's forward: worst at 30, then 7, then 12
    t = table({0: [0.1] * 40, 1: [0.1] * 40}, {1: fwd})
    meta = {"traces": {"job": "j", "every": 1}}
    (f,) = with_trace_ids([straggler(0, 25)], meta, t)
    assert f.trace_ids[:2] == [trace_id_hex("j", 7), trace_id_hex("j", 12)]  # step 30 is outside its steps
    assert len(f.trace_ids) == 5 and f.to_dict()["trace_ids"] == f.trace_ids
    (g,) = with_trace_ids([straggler(0, 39)], {"traces": {"job": "j", "every": 10}}, t)
    # a steady straggler with every 10th step traced: those steps, its worst (30) first, ties by step
    assert g.trace_ids == [trace_id_hex("j", s) for s in (30, 0, 10, 20)]


def test_no_traces_exported_no_ids():
    t = table({0: [0.1] * 10, 1: [0.1] * 10})
    for meta in ({}, {"traces": None}, {"traces": {"job": "j", "every": 0}}, {"traces": {"every": 1}}):
        assert with_trace_ids([straggler()], meta, t)[0].trace_ids == []

"""A finding adopts the profiler capture of its rank and steps (telemetry/analysis/traces/captures.py): it gains
``capture`` and ``trace_diff``, in the JSON and the report; a capture of other ranks or steps is not
adopted, and a capture whose traces are missing says which."""

import gzip
import json
import os

from telemetry.analysis import analyze_run
from telemetry.analysis.report import render
from telemetry.demo.simrun import write_simulated_run
from telemetry.demo.simulate import Fault, Scenario


def trace(path, mm_us, extra=()):
    events = [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "ts": i * 1000, "dur": 1000, "tid": 1}
        for i in range(3)
    ]
    for i in range(3):
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "ts": i * 1000, "dur": mm_us, "tid": 1})
        for name, dur in extra:
            events.append({"ph": "X", "cat": "cpu_op", "name": name, "ts": i * 1000 + 600, "dur": dur, "tid": 1})
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)


def capture(run, cid, ranks, roles, steps, traces=True):
    d = os.path.join(run, "captures", cid)
    os.makedirs(d)
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump({"id": cid, "ranks": ranks, "roles": roles, "steps": steps, "block_steps": 10}, f)
    if traces:
        trace(os.path.join(d, f"rank-{ranks[0]}.json.gz"), 200, [("aten::cdist", 300)])
        trace(os.path.join(d, f"rank-{ranks[-1]}.json.gz"), 200)


def test_the_straggler_adopts_its_capture_and_the_diff_names_the_op(tmp_path):
    run = str(tmp_path / "run")
    sc = Scenario(
        ranks=4, steps=300, seed=1, faults=(Fault("straggler", ranks=(2,), phase="forward", factor=1.5, start=100),)
    )
    write_simulated_run(sc, run)
    capture(run, "c1-straggler", [2, 0], {"2": "flagged", "0": "peer"}, [150, 152])
    capture(run, "c2-other", [3, 0], {"3": "flagged", "0": "peer"}, [150, 152])  # another rank: not adopted
    capture(run, "c3-early", [2, 0], {"2": "flagged", "0": "peer"}, [20, 22])  # before the finding: not adopted
    result = analyze_run(run)
    (f,) = [f for f in result.findings if f.kind == "straggler"]
    assert f.ranks == [2]
    breakdown = f.capture.pop("breakdown")
    assert f.capture == {
        "id": "c1-straggler",
        "ranks": [2, 0],
        "roles": {"2": "flagged", "0": "peer"},
        "steps": [150, 152],
        "dir": os.path.join("captures", "c1-straggler"),
    }
    # each captured rank broken down (CPU traces: over CPU operators), the extra op on rank 2 on top
    assert set(breakdown["ranks"]) == {"2", "0"} and breakdown["ranks"]["2"]["device"] == "cpu"
    assert breakdown["ranks"]["2"]["ops"][0]["name"] == "aten::cdist"
    assert breakdown["ranks"]["2"]["temporal"]["compute_us"] > breakdown["ranks"]["0"]["temporal"]["compute_us"]
    assert f.trace_diff[0]["name"] == "aten::cdist" and f.trace_diff[0]["flagged_ms_per_step"] == 0.3
    assert (
        f.causes[0]["kind"] == "slow_op" and "aten::cdist takes 0.30 ms per step on rank 2" in f.causes[0]["evidence"]
    )
    d = f.to_dict()
    assert d["trace_diff"] == f.trace_diff and "capture" in d
    others = [g.to_dict() for g in result.findings if g.kind != "straggler"]
    assert all("capture" not in g and "trace_diff" not in g for g in others)
    assert "aten::cdist" in render(result, run)


def test_a_capture_without_its_traces_says_which_are_missing(tmp_path):
    run = str(tmp_path / "run")
    sc = Scenario(
        ranks=4, steps=300, seed=1, faults=(Fault("straggler", ranks=(2,), phase="forward", factor=1.5, start=100),)
    )
    write_simulated_run(sc, run)
    capture(run, "c1", [2, 0], {"2": "flagged", "0": "peer"}, [150, 152], traces=False)
    result = analyze_run(run)
    (f,) = [f for f in result.findings if f.kind == "straggler"]
    assert f.capture["missing"] == [2, 0] and f.trace_diff == []


def test_the_dashboard_shows_the_capture_and_its_diff_under_the_finding(tmp_path, monkeypatch):
    import pytest

    pytest.importorskip("streamlit")
    from tests.helpers.apptest import run_app, show

    run = str(tmp_path / "run")
    sc = Scenario(
        ranks=4, steps=300, seed=1, faults=(Fault("straggler", ranks=(2,), phase="forward", factor=1.5, start=100),)
    )
    write_simulated_run(sc, run)
    capture(run, "c1-straggler", [2, 0], {"2": "flagged", "0": "peer"}, [150, 152])
    at = show(run_app(monkeypatch, run), "findings")
    assert any("**Profiler capture** `captures/c1-straggler`" in m.value for m in at.markdown)
    assert any("aten::cdist" in set(d.value["name"]) for d in at.dataframe if "name" in d.value.columns)


def test_everything_slower_alike_is_the_device_or_host():
    from telemetry.analysis.traces.captures import diff_causes

    rows = [
        {
            "name": f"op{i}",
            "kind": "op",
            "flagged_ms_per_step": 1.5 * (i + 1),
            "peer_ms_per_step": 1.0 * (i + 1),
            "ratio": 1.5,
        }
        for i in range(6)
    ]
    rows.sort(key=lambda r: -(r["flagged_ms_per_step"] - r["peer_ms_per_step"]))
    capture = {"ranks": [3, 1], "roles": {"3": "flagged", "1": "peer"}, "steps": [10, 12]}
    (cause,) = diff_causes(rows, capture)
    assert (
        cause["kind"] == "uniform_slowdown"
        and "6 ops and kernels are each about 1.50x slower on rank 3" in cause["evidence"]
    )
    assert diff_causes([], capture) == []


def test_a_capture_planned_after_the_runs_end_is_not_adopted_and_said(tmp_path):
    run = str(tmp_path / "run")
    sc = Scenario(
        ranks=4, steps=300, seed=1, faults=(Fault("straggler", ranks=(2,), phase="forward", factor=1.5, start=100),)
    )
    write_simulated_run(sc, run)
    capture(run, "c9-late", [2, 0], {"2": "flagged", "0": "peer"}, [320, 322], traces=False)
    result = analyze_run(run)
    run_input = result.input
    (f,) = [f for f in result.findings if f.kind == "straggler"]
    assert f.capture is None and f.trace_diff is None
    assert any(
        "capture c9-late was planned for steps 320-322, after the run's last step 299" in w for w in run_input.warnings
    )


def _rows(pairs):
    rows = [
        {"name": n, "kind": "op", "flagged_ms_per_step": f, "peer_ms_per_step": p, "ratio": (f / p if p else None)}
        for n, f, p in pairs
    ]
    rows.sort(key=lambda r: -(r["flagged_ms_per_step"] - r["peer_ms_per_step"]))
    return rows


def test_one_op_more_on_a_busy_host_is_named_first_and_the_host_second():
    # what a CPU-starved stress run gave: rank 2 runs aten::exp its peer never runs, and everything
    # else is 1.2x slower there too; the op's extra is under half the raw extra, all of it beyond 1.2x
    from telemetry.analysis.traces.captures import diff_causes

    rows = _rows([(f"op{i}", 1.2 * 10 * (i + 1), 10.0 * (i + 1)) for i in range(8)] + [("aten::exp", 40.0, 0.0)])
    capture = {"ranks": [2, 0], "roles": {"2": "flagged", "0": "peer"}, "steps": [130, 132]}
    causes = diff_causes(rows, capture)
    assert [c["kind"] for c in causes] == ["slow_op", "uniform_slowdown"]
    assert "aten::exp" in causes[0]["evidence"] and "its peer never ran it" in causes[0]["evidence"]
    assert "beyond the 1.20x every op shows" in causes[0]["evidence"]


def test_an_op_only_the_flagged_rank_runs_is_named_beside_a_scattered_slowdown_and_a_slow_collective():
    # what a CPU-starved CI run gave: 13 names about 1.26x slower on rank 2, scattered; its allreduce
    # descheduled on one step; and aten::exp, which rank 2 alone runs: under half the extra beyond the
    # factor, and not the largest, but the op to look at
    from telemetry.analysis.traces.captures import diff_causes

    ratios = [1.0, 1.05, 1.1, 1.2, 1.22, 1.25, 1.26, 1.3, 1.35, 1.45, 1.5, 1.55, 1.58]
    pairs = [(f"op{i}", r * 4.0, 4.0) for i, r in enumerate(ratios)] + [("aten::exp", 3.0, 0.0)]
    rows = _rows(pairs) + [
        {
            "name": "c10d::allreduce_",
            "kind": "collective",
            "flagged_ms_per_step": 7.9,
            "peer_ms_per_step": 0.14,
            "ratio": 7.9 / 0.14,
        }
    ]
    capture = {"ranks": [2, 1], "roles": {"2": "flagged", "1": "peer"}, "steps": [148, 150]}
    causes = diff_causes(rows, capture)
    assert [c["kind"] for c in causes] == ["slow_collective", "slow_op", "uniform_slowdown"], causes
    assert "aten::exp" in causes[1]["evidence"] and "its peer never ran it" in causes[1]["evidence"]
    # and without the collective, the op alone leads
    causes = diff_causes(_rows(pairs), capture)
    assert [c["kind"] for c in causes] == ["slow_op", "uniform_slowdown"], causes


def test_the_scatter_of_a_uniform_slowdown_names_no_op():
    from telemetry.analysis.traces.captures import diff_causes

    ratios = [1.45, 1.5, 1.5, 1.55, 1.5, 1.62]
    rows = _rows([(f"op{i}", r * 10.0, 10.0) for i, r in enumerate(ratios)])
    capture = {"ranks": [3, 1], "roles": {"3": "flagged", "1": "peer"}, "steps": [10, 12]}
    assert [c["kind"] for c in diff_causes(rows, capture)] == ["uniform_slowdown"]


def test_one_slow_op_without_a_uniform_factor_is_named_alone():
    from telemetry.analysis.traces.captures import diff_causes

    rows = _rows([("aten::mm", 30.0, 10.0), ("aten::add", 5.1, 5.0), ("aten::relu", 2.0, 2.0)])
    capture = {"ranks": [1, 0], "roles": {"1": "flagged", "0": "peer"}, "steps": [5, 7]}
    (cause,) = diff_causes(rows, capture)
    assert cause["kind"] == "slow_op" and "aten::mm" in cause["evidence"] and "3.00x its peer's" in cause["evidence"]


def test_the_kernels_view_breaks_the_capture_down_per_rank_with_its_diff(tmp_path, monkeypatch):
    import pytest

    pytest.importorskip("streamlit")
    from tests.helpers.apptest import run_app, show

    run = str(tmp_path / "run")
    sc = Scenario(
        ranks=4, steps=300, seed=1, faults=(Fault("straggler", ranks=(2,), phase="forward", factor=1.5, start=100),)
    )
    write_simulated_run(sc, run)
    capture(run, "c1-straggler", [2, 0], {"2": "flagged", "0": "peer"}, [150, 152])
    at = show(run_app(monkeypatch, run), "kernels")
    frames = [d.value for d in at.dataframe]
    (temporal,) = [d for d in frames if "compute ms" in d.columns]
    assert sorted(temporal["rank"]) == [0, 2] and set(temporal["role"]) == {"flagged", "peer"}
    by_rank = temporal.set_index("rank")
    assert by_rank.loc[2, "compute ms"] > by_rank.loc[0, "compute ms"]  # the extra aten::cdist
    assert any("name" in d.columns and d["name"].iloc[0] == "aten::cdist" for d in frames)  # the diff first
    assert any("ui.perfetto.dev" in c.value and "rank-2.json.gz" in c.value for c in at.caption)


def test_the_kernels_view_says_how_to_get_traces_when_there_are_none(tmp_path, monkeypatch):
    import pytest

    pytest.importorskip("streamlit")
    from tests.helpers.apptest import run_app, show

    run = str(tmp_path / "run")
    write_simulated_run(Scenario(ranks=2, steps=50, seed=1), run)
    at = show(run_app(monkeypatch, run), "kernels")
    assert any("telemetry capture RUN_DIR" in i.value for i in at.info)


def _gpu_part(span_us, host_wait_us):
    return {
        "rank": None,
        "device": "gpu",
        "steps": [1, 2],
        "temporal": {"span_us": span_us},
        "idle": {"host_wait_us": host_wait_us},
        "launch": {"count": 100, "call_us_mean": 12.0, "shorter_than_call": 80},
    }


def test_a_gpu_waiting_on_its_host_is_host_bound_before_any_op():
    from telemetry.analysis.traces.captures import diff_causes

    capture = {
        "ranks": [1, 0],
        "roles": {"1": "flagged", "0": "peer"},
        "steps": [10, 12],
        "breakdown": {"ranks": {"1": _gpu_part(30_000, 12_000), "0": _gpu_part(20_000, 2_000)}},
    }
    rows = [{"name": "aten::mm", "kind": "op", "flagged_ms_per_step": 9.0, "peer_ms_per_step": 4.0, "ratio": 2.25}]
    causes = diff_causes(rows, capture)
    assert [c["kind"] for c in causes] == ["host_bound", "slow_op"]
    assert "rank 1's GPU waits 5.00 ms per step more" in causes[0]["evidence"] and "100%" in causes[0]["evidence"]
    # the same host wait on both ranks: not the cause
    capture["breakdown"]["ranks"]["0"] = _gpu_part(20_000, 12_000)
    assert [c["kind"] for c in diff_causes(rows, capture)] == ["slow_op"]


def regression_run(tmp_path, baseline_steps, named="c0-baseline"):
    """A 4-rank run whose step time rises from step 150 on every rank, its baseline capture of ranks 0
    and 2 at ``baseline_steps``, and a job-wide capture at steps 200-202 that runs aten::cdist more,
    naming the baseline ``named`` (None: online detection named none)."""
    run = str(tmp_path / "run")
    sc = Scenario(ranks=4, steps=300, seed=1, faults=(Fault("regression", phase="forward", factor=1.5, start=150),))
    write_simulated_run(sc, run)
    base = os.path.join(run, "captures", "c0-baseline")
    os.makedirs(base)
    with open(os.path.join(base, "manifest.json"), "w") as f:
        roles = {"0": "baseline", "2": "baseline"}
        man = {"id": "c0-baseline", "ranks": [0, 2], "roles": roles, "steps": baseline_steps, "reason": "baseline"}
        json.dump(man, f)
    for r in (0, 2):
        trace(os.path.join(base, f"rank-{r}.json.gz"), 200)
    now = os.path.join(run, "captures", "c1-regression-job")
    os.makedirs(now)
    with open(os.path.join(now, "manifest.json"), "w") as f:
        plan = {"id": "c1-regression-job", "ranks": [0, 2], "roles": {"0": "flagged", "2": "flagged"}}
        json.dump({**plan, "steps": [200, 202], "job_wide": True, "baseline": named, "block_steps": 10}, f)
    for r in (0, 2):
        trace(os.path.join(now, f"rank-{r}.json.gz"), 200, [("aten::cdist", 300)])
    return run


def test_a_job_wide_regression_adopts_its_capture_and_is_diffed_against_the_baseline(tmp_path):
    run = regression_run(tmp_path, [60, 62])
    result = analyze_run(run)
    (f,) = [f for f in result.findings if f.kind == "regression"]
    assert f.ranks == [] and f.capture["id"] == "c1-regression-job"
    assert f.capture["baseline"]["id"] == "c0-baseline" and f.capture["baseline"]["rank"] == 0
    assert f.capture["baseline"]["steps"] == [60, 62] and f.capture["baseline"]["breakdown"]["device"] == "cpu"
    assert f.trace_diff[0]["name"] == "aten::cdist" and f.trace_diff[0]["peer_ms_per_step"] == 0.0
    assert f.causes[0]["kind"] == "slow_op"
    assert "on rank 0 now against 0.00 on its baseline capture (steps 60-62)" in f.causes[0]["evidence"]
    assert all(g.capture is None for g in result.findings if g is not f)  # the baseline: adopted by none
    assert "against the run's baseline capture" in render(result, run)


def test_a_baseline_taken_after_the_change_is_not_compared_with(tmp_path):
    run = regression_run(tmp_path, [160, 162])
    result = analyze_run(run)
    run_input = result.input
    (f,) = [f for f in result.findings if f.kind == "regression"]
    assert f.capture["id"] == "c1-regression-job" and "baseline" not in f.capture and f.trace_diff == []
    assert set(f.capture["breakdown"]["ranks"]) == {"0", "2"}  # still broken down
    assert "(no diff: no baseline capture to compare with)" in render(result, run)
    assert any(
        "its baseline c0-baseline (steps 160-162) was taken after the change began" in w for w in run_input.warnings
    )


def test_a_capture_naming_no_baseline_is_diffed_against_the_one_that_ended_before_the_findings_change(tmp_path):
    """Online detection may date a change before the baseline's steps ended and name no baseline; the
    whole run's analysis, dating it from step 150, compares with the baseline of steps 60-62 all the
    same, and with none taken at steps 160-162 (after the change: it saw the change too)."""
    run = regression_run(tmp_path / "before", [60, 62], named=None)
    result = analyze_run(run)
    (f,) = [f for f in result.findings if f.kind == "regression"]
    assert f.first_step > 62 and f.capture["baseline"]["id"] == "c0-baseline"
    assert f.trace_diff[0]["name"] == "aten::cdist" and f.causes[0]["kind"] == "slow_op"

    run = regression_run(tmp_path / "after", [160, 162], named=None)
    result = analyze_run(run)
    (f,) = [f for f in result.findings if f.kind == "regression"]
    assert f.first_step <= 160 and "baseline" not in f.capture and f.trace_diff == []


def test_the_kernels_view_shows_a_job_wide_capture_against_the_baseline(tmp_path, monkeypatch):
    import pytest

    pytest.importorskip("streamlit")
    from tests.helpers.apptest import run_app, show

    run = regression_run(tmp_path, [60, 62])
    at = show(run_app(monkeypatch, run), "kernels")  # the newest capture first: the job-wide one
    assert "Now against the run's baseline" in [h.value for h in at.subheader]
    assert any("baseline capture c0-baseline (steps 60-62)" in c.value for c in at.caption)
    frames = [d.value for d in at.dataframe]
    assert any("name" in d.columns and d["name"].iloc[0] == "aten::cdist" for d in frames)


def test_a_job_wide_capture_is_adopted_by_the_finding_of_its_kind_dated_a_little_apart():
    """The whole run's analysis may end a regression before the capture's steps (noise on a busy host);
    the job-wide finding of the kind that planned it still adopts it; another kind or a rank's does not."""
    from telemetry.analysis.findings import Finding
    from telemetry.analysis.traces.captures import adopts

    m = {
        "id": "c1",
        "ranks": [0, 1],
        "roles": {0: "flagged", 1: "flagged"},
        "steps": [640, 642],
        "block_steps": 10,
        "job_wide": True,
        "finding": {"kind": "regression", "first_step": 430},
    }
    f = Finding("regression", [], "forward", 500, 600, "warning", 0.4, "...")
    assert adopts(f, m)  # steps 500-600 meet 430-642
    assert not adopts(Finding("data_stall", [], "data", 500, 600, "warning", 0.4, "..."), m)
    assert not adopts(Finding("regression", [0], "forward", 500, 700, "warning", 0.4, "..."), m)
    assert not adopts(Finding("regression", [], "forward", 700, 900, "warning", 0.4, "..."), m)  # after it
    assert not adopts(f, {**m, "finding": None})  # no planning finding: the steps rule alone

"""The text report (telemetry/analysis/report.py) must not mislead: names kept apart, phase compute
shown, comparable costs."""

import re

from telemetry.analysis.detectors import StragglerParams, analyze
from telemetry.analysis.report import render
from telemetry.demo.simulate import Fault, Scenario, simulate


def report(table):
    result = analyze(table)
    return render(result, "job", StragglerParams().warmup(result.summary["steps"]))


def row(text, rank):
    head = next(line for line in text.splitlines() if line.strip().startswith("rank  steps"))
    head = head.replace("in step", "in_step").split()
    cells = next(
        line for line in text.splitlines() if line.split()[:1] == [str(rank)] and len(line.split()) == len(head)
    )
    return dict(zip(head[1:], cells.split()[1:]))


def test_a_backward_straggler_shows_in_its_phase_column_not_only_in_blocked():
    table = simulate(
        Scenario(ranks=4, steps=200, faults=(Fault("straggler", ranks=(2,), phase="backward", factor=1.5),))
    )
    # In the table as recorded, backward holds the wait for the all-reduce: every rank looks alike.
    raw = table[table["step"] >= 20].groupby("rank")["backward_s"].median()
    assert abs(raw[2] / raw[0] - 1) < 0.05
    text = report(table)
    slow, peer = row(text, 2), row(text, 0)
    assert float(slow["backward"]) > 1.3 * float(peer["backward"])  # compute, blocked time removed
    assert float(slow["blocked"]) < float(peer["blocked"])
    assert "phases: compute, time blocked in collectives removed" in text


def test_the_header_and_the_table_do_not_both_say_step():
    text = report(simulate(Scenario(ranks=4, steps=100, data_s=0.005)))
    assert "median step time" in text and "(data wait included)" in text.splitlines()[0]
    header = text.splitlines()[3]
    assert "in step" in header and not re.search(r"(?<!in) step\b", header)
    assert text.splitlines()[0].startswith("job: 4 ranks, 100 steps")


def test_each_findings_cost_is_also_given_as_its_share_of_the_run():
    table = simulate(
        Scenario(ranks=8, steps=300, faults=(Fault("straggler", ranks=(3,), phase="forward", factor=1.6, start=150),))
    )
    text = report(table)
    line = next(x for x in text.splitlines() if "straggler" in x and "slowdown" in x)
    own, share = map(float, re.search(r"slowdown ([\d.]+)% of those steps \(([\d.]+)% of the run\)", line).groups())
    total = float(re.search(r"all findings together: ([\d.]+)% of the whole run", text).group(1))
    assert share < own  # the straggler started half-way: over the run it costs less
    assert abs(share - total) <= 0.2  # the one finding is the total

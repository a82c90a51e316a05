"""Online detection: rank 0 analyzes every rank's K-step summaries while the job runs."""

import json
import os

import pytest
import torch.multiprocessing as mp

from telemetry.online import BlockSummarizer
from telemetry.pipeline.records import StepRecord
from tests.helpers import dist_cases
from tests.helpers.servers import free_port, free_port_range


def rec(step, duration, forward, comm):
    return StepRecord(
        rank=0,
        step=step,
        start_s=0.0,
        duration_s=duration,
        ok=True,
        phases={"forward": forward, "backward": duration - forward, "data": 0.001},
        phase_comm={"backward": comm},
        comm_s=comm,
        ops={},
        tokens=None,
        samples=None,
        scalars={},
        spans=(),
    )


def test_a_block_summary_is_a_fixed_vector_of_medians():
    s = BlockSummarizer(every=3)
    assert s.add([rec(0, 0.10, 0.03, 0.02), rec(1, 0.12, 0.05, 0.02)]) == []
    [v] = s.add([rec(2, 0.11, 0.04, 0.03)])
    assert s.phases == ("backward", "forward")
    block, steps, duration, compute, comm, data, backward, forward = v
    assert (block, steps) == (0, 3)
    assert duration == 0.11 and comm == 0.02 and data == 0.001
    assert abs(compute - 0.08) < 1e-9 and abs(forward - 0.04) < 1e-9  # medians of (duration - comm), forward
    assert abs(backward - 0.05) < 1e-9  # backward compute: the comm inside it removed


@pytest.mark.slow
def test_rank_zero_names_the_straggler_during_the_run(tmp_path):
    run_dir = str(tmp_path / "run")
    base = free_port_range(4)
    mp.start_processes(dist_cases.online, args=(4, free_port(), run_dir, base), nprocs=4, start_method="spawn")
    findings = [json.loads(line) for line in open(os.path.join(run_dir, "findings.jsonl"))]
    stragglers = [f for f in findings if f["kind"] == "straggler"]
    assert [(f["ranks"], f["phase"], f["online"]) for f in stragglers] == [([2], "forward", True)]
    assert stragglers[0]["first_step"] % 5 == 0 and stragglers[0]["last_step"] <= 124
    doc = json.load(open(os.path.join(run_dir, "scores.json")))
    assert doc["scores"]["2"] > 1.0 and all(abs(doc["scores"][r]) < 0.3 for r in ("0", "1", "3"))
    assert doc["stats"]["summaries_posted"] >= 20 and doc["stats"]["analyses"] >= 1

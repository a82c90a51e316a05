"""Online detection on real gloo ranks: rank 0 names the straggler while the job still runs."""

import json
import os

import torch.multiprocessing as mp

from tests.helpers import dist_cases
from tests.helpers.servers import free_port, free_port_range


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

"""The run's baseline capture and a job-wide finding's capture (telemetry/online/capture.py): rank 0 plans
one baseline of rank 0 and a peer after its first analysis; a job-wide regression later captures the same
ranks, naming the baseline; plans never overlap, and a rank that polls once sees every plan posted since."""

import json

import numpy as np

from telemetry.online.capture import PLAN_KEY, Captures
from telemetry.online.wire import Block


class Store:
    def __init__(self):
        self.kv = {}

    def set(self, key, value):
        self.kv[key] = value.encode() if isinstance(value, str) else value

    def get(self, key):
        return self.kv[key]

    def check(self, keys):
        return all(k in self.kv for k in keys)


class Capturer:
    stats = {"over_budget": 0}

    def __init__(self):
        self.armed = []

    def arm(self, cid, first, last, path):
        self.armed.append((cid, first, last))


def block(compute):
    return Block.of({r: np.array([1, 10, 0.1, c, 0.0, 0.0, 0.0]) for r, c in compute.items()})


B = block({0: 0.10, 1: 0.11, 2: 0.12, 3: 0.13})


def regression(severity="warning", first_step=500):
    return {"kind": "regression", "ranks": [], "phase": "forward", "first_step": first_step, "severity": severity}


def test_the_first_analysis_plans_the_baseline_and_a_regression_is_captured_against_it(tmp_path):
    store = Store()
    caps = Captures(store, 0, 4, 10, 2, Capturer(), str(tmp_path))
    caps.consider([], 5, B)
    base = caps.baseline_plan
    assert base["reason"] == "baseline" and base["ranks"] == [0, 2]  # rank 0 and the median of the others
    assert base["roles"] == {"0": "baseline", "2": "baseline"} and base["steps"][0] >= 60
    assert json.loads((tmp_path / "captures" / base["id"] / "manifest.json").read_text()) == base
    caps.consider([], 6, B)
    assert caps.planned == 1  # once per run
    # a job-wide regression right after: not held to the interval by the baseline, and after its steps
    f = regression()
    caps.consider([f], 7, B)
    assert caps.planned == 2 and f["capture_id"]
    (plan,) = [p for p in json.loads(store.get(PLAN_KEY)) if p["id"] == f["capture_id"]]
    assert plan["job_wide"] and plan["baseline"] == base["id"] and plan["ranks"] == [0, 2]
    assert plan["roles"] == {"0": "flagged", "2": "flagged"} and plan["steps"][0] > base["steps"][1]
    assert plan["finding"]["kind"] == "regression"


def test_a_rank_that_polls_once_arms_every_plan_naming_it():
    store = Store()
    posted = [
        {"id": "a", "ranks": [0, 2], "steps": [60, 62]},
        {"id": "b", "ranks": [2, 1], "steps": [63, 65]},
        {"id": "c", "ranks": [3, 0], "steps": [66, 68]},
    ]
    store.set(PLAN_KEY, json.dumps(posted))
    rank2 = Captures(store, 2, 4, 10, 2, Capturer(), "/nonexistent")
    rank2.poll()
    rank2.poll()  # seen once: armed once
    assert rank2.capturer.armed == [("a", 60, 62), ("b", 63, 65)]


def test_info_findings_and_a_budget_of_one_take_no_job_wide_capture(tmp_path):
    caps = Captures(Store(), 0, 4, 10, 2, Capturer(), str(tmp_path), max_captures=1)
    caps.consider([regression("info")], 5, B)  # not a warning: no capture, the baseline instead
    assert caps.baseline_plan["reason"] == "baseline" and caps.planned == 1
    f = regression()
    caps.consider([f], 6, B)
    assert "capture_id" not in f and caps.over_budget == 1


def test_without_a_baseline_the_job_wide_capture_names_none(tmp_path):
    caps = Captures(Store(), 0, 4, 10, 2, Capturer(), str(tmp_path), baseline=False)
    caps.consider([], 5, B)
    assert caps.planned == 0
    f = regression()
    caps.consider([f], 6, B)
    plan = json.loads((tmp_path / "captures" / f["capture_id"] / "manifest.json").read_text())
    assert plan["baseline"] is None and plan["ranks"] == [0, 2]


def test_a_baseline_taken_after_the_change_began_is_not_named(tmp_path):
    caps = Captures(Store(), 0, 4, 10, 2, Capturer(), str(tmp_path))
    caps.consider([], 5, B)
    f = regression(first_step=caps.baseline_plan["steps"][1])  # the change began inside the baseline
    caps.consider([f], 30, B)
    plan = json.loads((tmp_path / "captures" / f["capture_id"] / "manifest.json").read_text())
    assert plan["job_wide"] and plan["baseline"] is None and plan["ranks"] == caps.baseline_plan["ranks"]

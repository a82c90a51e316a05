"""Rank 0's online analysis (telemetry/online/detector.py's OnlineDetector) on a store held in a
dict: the table it builds (telemetry/online/table.py), its findings, lost ranks marked as online
findings, and a failing analysis logged once. Against a real TCPStore with 256 simulated ranks:
tests/integration/test_online_tcpstore.py; on real gloo ranks: tests/integration/test_online_gloo.py."""

import logging

import numpy as np

from telemetry.analysis_options import AnalysisOptions
from telemetry.online.wire import FIXED, Block


def test_a_failing_analysis_is_logged_once_and_counted(caplog, monkeypatch):
    from telemetry import online

    det = online.OnlineDetector.__new__(online.OnlineDetector)  # rank != 0 construction needs no thread
    online.OnlineDetector.__init__(det, store=None, rank=1, world=2, every=10, window=8, wait_blocks=3)
    det._rows[0] = Block.of({0: np.zeros(len(FIXED)), 1: np.zeros(len(FIXED))})
    monkeypatch.setattr(det, "_table", lambda: (_ for _ in ()).throw(ValueError("bad table")))
    with caplog.at_level(logging.WARNING, logger="telemetry"):
        for _ in range(4):
            det._analyze()
    assert det.failures == 4
    assert sum("online analysis failed" in r.getMessage() for r in caplog.records) == 1


class DictStore:
    """The store calls rank 0 makes, on a dict. Like TCPStore, ``multi_get`` of a missing key is an
    error here (the real one waits for it until its timeout)."""

    def __init__(self, data):
        self.data = data

    def get(self, key):
        return self.data[key]

    def check(self, keys):
        return all(k in self.data for k in keys)

    def multi_get(self, keys):
        return [self.data[k] for k in keys]

    def delete_key(self, key):
        return self.data.pop(key, None) is not None


def four_ranks(window=50, **kw):
    """Rank 0's analysis of 4 ranks with one phase, forward, blocks of 10 steps, on a dict store (built
    as rank 1, so no thread starts: the tests call its analysis)."""
    from telemetry import online

    return online.OnlineDetector(
        store=DictStore({f"phases/{r}": b"forward" for r in range(4)}),
        rank=1,
        world=4,
        every=10,
        window=window,
        wait_blocks=3,
        min_interval_s=0,
        **kw,
    )


def test_an_online_findings_numbers_and_its_text_come_from_one_source():
    det = four_ranks()
    rng = np.random.default_rng(0)
    for block in range(30):
        rows = {}
        for r in range(4):
            fwd = 0.010 * (1.5 if r == 2 else 1.0) * (1 + 0.02 * rng.standard_normal())
            comm = 0.020 - (0.005 if r == 2 else 0.0)
            rows[r] = np.array([block, 10, 0.040, fwd + 0.01, comm, 0.0005, 0, fwd])  # traced: 0
        det._rows[block] = Block.of(rows)
    assert det._analyze()
    [result] = det.poll()
    [f] = [d for d in result.findings if d["kind"] == "straggler"]
    assert f["ranks"] == [2] and f["online"] is True and f["block_steps"] == 10
    assert f"over steps {f['first_step']}-{f['last_step']}" in f["evidence"]


def old_table(det):
    """The table as the per-row loop built it before the table was vectorized: the reference."""
    import pandas as pd

    out = []
    for block, blk in det._rows.items():
        for part_ranks, mat in blk.parts:
            for rank, v in zip(part_ranks.tolist(), mat):
                rec = {
                    "rank": rank,
                    "step": block * det.every,
                    "start_s": float(block),
                    "duration_s": v[2],
                    "comm_s": v[4],
                    "data_s": v[5],
                }
                for i, p in enumerate(det.names.by_rank.get(rank, [])[: len(v) - len(FIXED)]):
                    rec[f"{p}_s"] = v[len(FIXED) + i]
                    rec[f"comm.{p}_s"] = 0.0
                out.append((block, rank, rec))
    order = {b: i for i, b in enumerate(det._rows)}
    out.sort(key=lambda x: (order[x[0]], x[1]))  # blocks in the order read, ranks ascending
    return pd.DataFrame([rec for _, _, rec in out])


def test_the_vectorized_table_is_the_per_row_table():
    """Same columns, order, dtypes and values as the per-row build, with ranks of different phase
    lists and vector lengths, a rank whose names never arrived, and blocks read out of order."""
    import pandas as pd

    from telemetry import online

    world = 12
    names = {r: b"backward,forward" for r in range(8)}
    names.update({8: b"forward,optimizer", 9: b"optimizer", 10: b"start,backward"})  # 11: none posted
    det = online.OnlineDetector(
        store=DictStore({f"phases/{r}": v for r, v in names.items()}),
        rank=1,
        world=world,
        every=10,
        window=50,
        wait_blocks=3,
        min_interval_s=0,
    )
    rng = np.random.default_rng(1)
    for block in (3, 1, 2, 0, 5):
        rows = {}
        for r in range(world):
            if (r + block) % 7 == 0:
                continue  # missing from this block
            width = len(FIXED) + (1 if r == 9 else 3 if r == 8 else 2)  # rank 8: one value more than names
            v = rng.random(width)
            v[0] = block
            if r == 3:
                v[len(FIXED)] = np.nan  # a phase with no value
            rows[r] = v
        det._rows[block] = Block.of(rows)
    table = det._table()
    assert set(det.names.by_rank) == set(range(11))  # read once each, in a batch
    pd.testing.assert_frame_equal(table, old_table(det))
    assert list(table.columns[:6]) == ["rank", "step", "start_s", "duration_s", "comm_s", "data_s"]
    assert table.loc[table["rank"] == 11, "forward_s"].isna().all()


def test_an_empty_window_is_an_empty_table():
    from telemetry import online

    det = online.OnlineDetector(store=DictStore({}), rank=1, world=4, every=10, window=8, wait_blocks=3)
    assert det._table().empty
    det._rows[0] = Block.of({})
    assert det._table().empty


def test_a_lost_rank_is_an_online_finding_of_blocks():
    from telemetry.analysis.detectors.lost import lost_rank_of_blocks
    from telemetry.online.detector import online_finding

    d = online_finding(lost_rank_of_blocks(2, 5, 8, every=10), 10)
    assert (d["kind"], d["ranks"], d["first_step"], d["last_step"], d["severity"]) == (
        "rank_lost",
        [2],
        50,
        89,
        "critical",
    )
    assert d["online"] and d["block_steps"] == 10 and "rank 2 posted no summary for steps 50-89" in d["evidence"]
    assert list(d)[-3:] == ["block_steps", "online", "time_s"]


def test_each_scored_rank_has_the_cost_of_the_straggler_finding_naming_it():
    from telemetry.analysis.findings import Finding
    from telemetry.online.detector import straggler_costs

    def f(kind, ranks, cost):
        return Finding(kind, ranks, "forward", 0, 9, "warning", cost, "e")

    findings = [f("straggler", [2], 0.07), f("straggler", [4, 5], 0.03), f("data_stall", [1], 0.2)]
    costs = straggler_costs(findings, {r: 0.0 for r in range(6)})
    assert costs == {0: 0.0, 1: 0.0, 2: 0.07, 3: 0.0, 4: 0.03, 5: 0.03}  # a stall is not a straggler's cost


def test_the_busy_bounds_reach_online_detection():

    def kinds(**bounds):
        det = four_ranks(**bounds)
        rng = np.random.default_rng(0)
        for block in range(30):  # every rank computes about half of its 40 ms step, blocked in the other half
            rows = {
                r: np.array([block, 10, 0.040, 0.020 * (1 + 0.02 * rng.standard_normal()), 0.020, 0.0, 0, 0.020])
                for r in range(4)
            }
            det._rows[block] = Block.of(rows)
        assert det._analyze()
        return [d["kind"] for result in det.poll() for d in result.findings]

    assert kinds() == ["low_utilization"]  # 50% busy: under the 60% warning bound, reported
    assert (
        kinds(options=AnalysisOptions(busy_warn_bound=0.4)) == []
    )  # info between 40% and 80%: online detection reports from warning up
    assert (
        kinds(options=AnalysisOptions(busy_bound=0.45)) == []
    )  # the warning bound follows a lower bound: 50% is above both


def test_a_second_rise_inside_an_ongoing_job_wide_change_is_a_new_finding_handed_to_captures():
    """The regression search merges adjacent raised segments: a job whose collectives slow from step 200
    and slow again, more, from step 500 shows one ongoing slow_comm from 200, never new again. The
    search of that finding's own stretch names the second rise, as a new finding handed to capture
    planning (the run's second capture); a third analysis with nothing further adds none."""

    class Planner:
        def __init__(self):
            self.seen = []

        def consider(self, findings, latest, block):
            self.seen.append([(d["kind"], d["phase"], d["first_step"]) for d in findings])

    planner = Planner()
    det = four_ranks(window=200, captures=planner)
    rng = np.random.default_rng(1)

    def add(blocks):
        for block in blocks:
            comm = 0.010 + (0.006 if block >= 20 else 0.0) + (0.014 if block >= 50 else 0.0)
            fwd = 0.080
            rows = {}
            for r in range(4):
                f = fwd * (1 + 0.01 * rng.standard_normal())
                c = comm * (1 + 0.01 * rng.standard_normal())
                rows[r] = np.array([block, 10, f + c, f, c, 0.0, 0, f])
            det._rows[block] = Block.of(rows)

    add(range(45))
    assert det._analyze()
    assert [k for k, _, _ in planner.seen[-1]] == ["slow_comm"] and planner.seen[-1][0][2] == 200
    add(range(45, 80))
    assert det._analyze()
    [(kind, phase, first)] = planner.seen[-1]
    assert (kind, phase) == ("slow_comm", None) and 490 <= first <= 510
    [first_result, second] = [r for r in det.poll() if r.findings]
    assert second.findings[0]["details"]["within"] == {"kind": "slow_comm", "phase": None, "first_step": 200}
    assert det._analyze()
    assert planner.seen[-1] == []


def test_the_default_window_is_200_blocks_up_to_2500_ranks_then_500000_rows():
    from telemetry.online.detector import online_window

    assert [online_window("auto", w) for w in (2, 64, 2500)] == [200, 200, 200]
    assert [online_window("auto", w) for w in (2501, 5000, 10000, 25000, 100000)] == [199, 100, 50, 20, 20]


def test_a_window_set_as_a_number_is_kept_at_any_world():
    from telemetry.online.detector import online_window

    assert online_window(200, 10000) == 200
    assert online_window(8, 4) == 8


def test_rank_0_keeps_the_window_of_its_world():
    from telemetry import online

    def window(world, setting):
        det = online.OnlineDetector(store=DictStore({}), rank=1, world=world, every=10, window=setting, wait_blocks=3)
        return det.window

    assert (window(4, "auto"), window(10000, "auto"), window(10000, 120)) == (200, 50, 120)
    from telemetry.online.wire import summary_key

    det = four_ranks(window="auto")
    for block in range(203):  # the window it keeps is the one it says: the oldest blocks leave it
        for r in range(4):
            det.store.data[summary_key(block, r)] = np.array([block, 10, 0.04, 0.03, 0.01, 0.0, 0, 0.03]).tobytes()
        det._collect(block, 1)
    assert list(det._rows) == list(range(3, 203))

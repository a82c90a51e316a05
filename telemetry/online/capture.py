"""Captures on findings: when online detection raises a finding that names ranks, the job profiles those
ranks and one healthy peer for a few steps, all from the same future step; a job-wide finding is
captured on the ranks of the run's baseline capture, to be compared with it.

Rank 0's online thread plans (:meth:`Captures.consider`, after each analysis: the kinds in
:data:`TRIGGERS` at warning or above, within the budget; the peer, preferably on the first flagged
rank's node; a first step far enough ahead for every rank to hear of it), writes the manifest and posts
the plan under :data:`PLAN_KEY`; every rank looks once per block it posts (:meth:`Captures.poll`) and
arms its :class:`~telemetry.recorder.capture.ProfilerCapture`. Who, when, where and the budget:
docs/captures.md, "Captures on findings".
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from typing import Any

import numpy as np

from ..analysis.traces.captures import JOB_WIDE  # without ranks: captured against the baseline
from ..logonce import LogOnce
from ..store.layout import write_json_atomic
from .wire import FIXED, Block

log = logging.getLogger("telemetry")

PLAN_KEY = "capture/plan"
REQUESTS = "requests"  # RUN_DIR/captures/requests/*.json: captures asked for by hand (telemetry capture)
TRIGGERS = ("straggler", "slow_comm", "data_stall", "input_bound")  # with ranks: those ranks and a peer
POSTED = 4  # plans PLAN_KEY holds (the latest)
LEAD_S = 3.0  # the first captured step is at least this far ahead, at the latest step time


class Captures:
    def __init__(
        self,
        store: Any,
        rank: int,
        world: int,
        every: int,
        wait_blocks: int,
        capturer: Any,
        run_dir: str,
        steps: int = 3,
        max_captures: int = 2,
        min_interval_s: float = 600.0,
        local_world: int = 0,
        baseline: bool = True,
    ) -> None:
        self.store, self.rank, self.world = store, rank, world
        self.local_world = local_world  # ranks per node (0: not known)
        self.every, self.wait_blocks = every, wait_blocks
        self.capturer, self.run_dir = capturer, run_dir
        self.steps, self.max_captures, self.min_interval_s = steps, max_captures, min_interval_s
        self.planned = 0
        self.over_budget = 0  # findings that would have been captured, past the budget
        self._last_plan = -math.inf
        self._busy_until = -1  # the last step of the latest plan: the next starts after it
        self._seen: list[str] = []  # plan ids this rank has read
        self._posted: list[dict[str, Any]] = []  # rank 0: the latest plans, as PLAN_KEY holds them
        # the run's baseline capture: None to take (when ``baseline``), then its plan ({} when not taken)
        self.baseline_plan: dict[str, Any] | None = None if baseline else {}
        self._once = LogOnce()

    # ---- every rank, pipeline thread ---------------------------------------------------------
    def poll(self) -> None:
        """Arm this rank's captures when new plans name it (one ``check`` of one key, which holds the
        latest :data:`POSTED` plans: two planned between this rank's polls are both seen)."""
        try:
            if not self.store.check([PLAN_KEY]):
                return
            raw = self.store.get(PLAN_KEY)
            plans = json.loads(raw.decode() if isinstance(raw, (bytes, bytearray)) else raw)
            for plan in plans if isinstance(plans, list) else [plans]:
                if plan["id"] in self._seen:
                    continue
                self._seen = (self._seen + [plan["id"]])[-2 * POSTED :]
                if self.rank in plan["ranks"]:
                    path = os.path.join(self.run_dir, "captures", plan["id"], f"rank-{self.rank}.json.gz")
                    self.capturer.arm(plan["id"], int(plan["steps"][0]), int(plan["steps"][1]), path)
        except Exception as exc:  # noqa: BLE001 - a plan not read costs only its capture
            self._once("poll", "telemetry: a capture plan was not read (%s); further failures skipped", exc)

    # ---- rank 0, online thread ---------------------------------------------------------------
    def consider(self, findings: list[dict[str, Any]], latest: int, block: Block | None) -> None:
        """After each online analysis: plan a capture for the first of ``findings`` (its new findings)
        that warrants one, or else, once, the run's baseline."""
        for d in findings:
            if d.get("severity") not in ("warning", "critical"):
                continue
            job_wide = not d.get("ranks")
            if (d.get("kind") not in JOB_WIDE) if job_wide else (d.get("kind") not in TRIGGERS):
                continue
            now = time.monotonic()
            if self.planned >= self.max_captures or now - self._last_plan < self.min_interval_s:
                self.over_budget += 1
                continue
            plan = self._job_wide_plan(d, latest, block) if job_wide else self._finding_plan(d, latest, block)
            if plan is not None and self._post_plan(plan):
                d["capture_id"] = plan["id"]
                return
        if self.baseline_plan is None:
            self._plan_baseline(latest, block)

    def _finding_plan(self, d: dict[str, Any], latest: int, block: Block | None) -> dict[str, Any] | None:
        flagged = [int(r) for r in d["ranks"]][:4]
        peer, peer_on = self._peer(flagged, block)
        if peer is None:
            return None
        first = self._first_step(latest, block)
        return {
            # the time in the id: a later session writing the same run directory adds, never overwrites
            "id": f"{time.strftime('%Y%m%d-%H%M%S')}-{d['kind']}-rank{'-'.join(map(str, flagged))}",
            "ranks": flagged + [peer],
            "roles": {**{str(r): "flagged" for r in flagged}, str(peer): "peer"},
            "peer": peer_on,
            "steps": [first, first + self.steps - 1],
            "block_steps": self.every,
            "finding": self._finding(d),
            "time_s": time.time(),
            "reason": "finding",
        }

    def _job_wide_plan(self, d: dict[str, Any], latest: int, block: Block | None) -> dict[str, Any]:
        """A job-wide finding: the baseline's ranks again, to be compared with their baseline traces
        (with no baseline, rank 0 and a peer, and no comparison)."""
        base = self.baseline_plan or {}
        onset = d.get("first_step")
        if base and onset is not None and base["steps"][1] >= int(onset):
            base = {"ranks": base["ranks"]}  # taken after the change began: not what the job was before it
        ranks = list(base.get("ranks") or self._baseline_ranks(block))
        first = self._first_step(latest, block)
        return {
            "id": f"{time.strftime('%Y%m%d-%H%M%S')}-{d['kind']}-job",
            "ranks": ranks,
            "roles": {str(r): "flagged" for r in ranks},
            "job_wide": True,
            "baseline": base.get("id"),
            "steps": [first, first + self.steps - 1],
            "block_steps": self.every,
            "finding": self._finding(d),
            "time_s": time.time(),
            "reason": "finding",
        }

    def _plan_baseline(self, latest: int, block: Block | None) -> None:
        """The run's baseline: rank 0 and a peer, a few steps after the first analysis (past warm-up),
        for a job-wide finding later to be compared with. Counted in ``capture_max``, not held to
        its interval (a finding soon after is still captured)."""
        if self.planned >= self.max_captures:
            self.baseline_plan = {}
            return
        ranks = self._baseline_ranks(block)
        first = self._first_step(latest, block)
        plan = {
            "id": f"{time.strftime('%Y%m%d-%H%M%S')}-baseline",
            "ranks": ranks,
            "roles": {str(r): "baseline" for r in ranks},
            "steps": [first, first + self.steps - 1],
            "block_steps": self.every,
            "finding": None,
            "time_s": time.time(),
            "reason": "baseline",
        }
        last_plan = self._last_plan
        self.baseline_plan = plan if self._post_plan(plan) else {}
        self._last_plan = last_plan  # the baseline does not start the interval

    def _baseline_ranks(self, block: Block | None) -> list[int]:
        peer, _ = self._peer([0], block)
        return [0] if peer is None else [0, peer]

    @staticmethod
    def _finding(d: dict[str, Any]) -> dict[str, Any]:
        return {k: d.get(k) for k in ("kind", "ranks", "phase", "first_step", "last_step", "severity")}

    def requests(self, latest: int, block: Block | None) -> None:
        """Rank 0: plan the captures asked for with ``telemetry capture`` (request files in
        ``RUN_DIR/captures/requests/``, each taken once and removed). Counted in the budget's total
        but not held to its interval: a person asked. Roles are ``asked``: no finding adopts them."""
        folder = os.path.join(self.run_dir, "captures", REQUESTS)
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(".json"))
        except OSError:
            return
        for name in names:
            path = os.path.join(folder, name)
            try:
                with open(path, encoding="utf-8") as f:
                    req = json.load(f)
                os.remove(path)
                ranks = sorted({int(r) for r in req["ranks"] if 0 <= int(r) < self.world})
                steps = max(1, min(50, int(req.get("steps") or self.steps)))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                self._once("request", "telemetry: a capture request %s was not read (%s); skipped", path, exc)
                continue
            if not ranks:
                continue
            if self.planned >= self.max_captures:
                self.over_budget += 1
                log.warning("telemetry: capture %s not taken: %d captures this run already", name, self.planned)
                continue
            first = self._first_step(latest, block)
            cid = str(req.get("id") or f"{time.strftime('%Y%m%d-%H%M%S')}-asked")
            self._post_plan(
                {
                    "id": cid,
                    "ranks": ranks,
                    "roles": {str(r): "asked" for r in ranks},
                    "steps": [first, first + steps - 1],
                    "block_steps": self.every,
                    "finding": None,
                    "time_s": time.time(),
                    "reason": "asked",
                }
            )

    def _first_step(self, latest: int, block: Block | None) -> int:
        """The first captured step: far enough ahead for every rank to hear of the plan first, and after
        the last step of the plan before (plans never overlap: each rank runs them in turn)."""
        step_s = self._step_s(block)
        lead = max((self.wait_blocks + 2) * self.every, math.ceil(LEAD_S / step_s) if step_s > 0 else 0)
        return max((latest + 1) * self.every + lead, self._busy_until + 1)

    def _post_plan(self, plan: dict[str, Any]) -> bool:
        cid = plan["id"]
        try:
            os.makedirs(os.path.join(self.run_dir, "captures", cid), exist_ok=True)
            write_json_atomic(os.path.join(self.run_dir, "captures", cid, "manifest.json"), plan)
            self.store.set(PLAN_KEY, json.dumps((self._posted + [plan])[-POSTED:]))
        except Exception as exc:  # noqa: BLE001 - a capture not planned costs only itself
            self._once("plan", "telemetry: a capture was not planned (%s); further failures skipped", exc)
            return False
        self._posted = (self._posted + [plan])[-POSTED:]
        self.planned += 1
        self._last_plan = time.monotonic()
        self._busy_until = max(self._busy_until, int(plan["steps"][1]))
        log.log(
            logging.INFO if plan["reason"] == "baseline" else logging.WARNING,  # every run takes one: no warning
            "telemetry: [online] capturing steps %d-%d on ranks %s (%s): %s",
            plan["steps"][0],
            plan["steps"][1],
            plan["ranks"],
            plan["reason"],
            os.path.join(self.run_dir, "captures", cid),
        )
        return True

    def _node(self, rank: int) -> int | None:
        """The node of ``rank``: ranks placed contiguously, ``local_world`` per node (as torchrun, SLURM's
        block distribution and MPI's by-node mapping place them); None when not known."""
        if 1 < self.local_world < self.world:
            return rank // self.local_world
        return None

    def _peer(self, flagged: list[int], block: Block | None) -> tuple[int | None, str]:
        """The peer and how it was chosen: the unflagged rank on the first flagged rank's node whose
        compute is the median of theirs in the latest block ("same node"); with none there, the
        unflagged rank with the median compute of all ("median rank"); with no block, the next rank."""
        node = self._node(flagged[0])
        if block is not None and len(block.ranks):
            ranks, compute = [], []
            for r, mat in block.parts:
                ranks.extend(r.tolist())
                compute.extend(mat[:, FIXED.index("compute_s")].tolist())
            cand = sorted((c, r) for r, c in zip(ranks, compute) if r not in flagged and np.isfinite(c))
            near = [(c, r) for c, r in cand if node is not None and self._node(int(r)) == node]
            if near:
                return int(near[len(near) // 2][1]), "same node"
            if cand:
                return int(cand[len(cand) // 2][1]), "median rank"
        others = [r for r in range(self.world) if r not in flagged]
        return (others[0], "next rank") if others else (None, "")

    @staticmethod
    def _step_s(block: Block | None) -> float:
        if block is None or not len(block.ranks):
            return 0.0
        values = np.concatenate([mat[:, FIXED.index("duration_s")] for _, mat in block.parts])
        values = values[np.isfinite(values)]
        return float(np.median(values)) if len(values) else 0.0

    def stats(self) -> dict[str, Any]:
        out = {f"captures_{k}": v for k, v in self.capturer.stats.items()}
        out["captures_planned"] = self.planned
        out["captures_over_budget"] = self.over_budget + self.capturer.stats["over_budget"]
        return out

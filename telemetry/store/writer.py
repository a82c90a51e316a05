"""The run-store sink: appends one JSON line per step record to this rank's file.

Lines are written and flushed to the operating system on every pipeline tick (default every
0.5 s), so the file is readable while the job runs and survives a crash of the process; a torn last
line is skipped by the reader. A restarted job appends to the same files (a ``session`` line marks
each start); for a (rank, step) seen twice the reader keeps the last.
"""

from __future__ import annotations

import glob
import json
import math
import os
import time
from typing import Any, Sequence

from ..pipeline.records import OnlineResult, Progress, StepRecord
from ..pipeline.sinks import Sink
from . import layout


class RunStoreSink(Sink):
    name = "store"

    def __init__(self, config: Any, ctx: Any, run_info: dict[str, Any]) -> None:
        self.run_dir = config.run_dir
        self.rank = ctx.rank
        self.world_size = ctx.world_size
        self.lines = 0
        self.bytes = 0
        try:
            os.makedirs(os.path.join(self.run_dir, layout.RANKS_DIR), exist_ok=True)
            self._file = open(layout.steps_path(self.run_dir, self.rank), "a", encoding="utf-8")
        except OSError as exc:
            raise OSError(f"cannot write run directory {self.run_dir!r}: {exc.strerror or exc}") from None
        self._meta = {
            "job": config.job, "rank": ctx.rank, "local_rank": ctx.local_rank,
            "world_size": ctx.world_size, "local_world_size": ctx.local_world_size,
            "node_rank": ctx.node_rank, "node": ctx.node, "launcher": ctx.launcher,
            "pid": os.getpid(), "start_time_s": run_info["start_time_s"],
            "device": run_info.get("device", {}),
        }
        layout.write_json_atomic(layout.rank_meta_path(self.run_dir, self.rank), self._meta)
        self._file.write(json.dumps({"session": run_info["session"], "rank": self.rank,
                                     "start_time_s": run_info["start_time_s"]}) + "\n")
        self._file.flush()
        if ctx.rank == 0:
            self._run_meta = {
                "job": config.job, "world_size": ctx.world_size, "config": config.as_dict(),
                "versions": run_info.get("versions", {}), "start_time_s": run_info["start_time_s"],
                "session": run_info["session"], "hosts": {str(ctx.rank): ctx.node},
                "format": 1,
            }
            layout.write_json_atomic(os.path.join(self.run_dir, layout.META), self._run_meta)

    def write(self, records: Sequence[StepRecord]) -> None:
        text = "".join(_line(r) for r in records)
        self._file.write(text)
        self.lines += len(records)
        self.bytes += len(text)

    def flush(self, timeout_s: float) -> None:
        self._file.flush()

    def progress(self, progress: Progress) -> None:
        layout.write_json_atomic(layout.progress_path(self.run_dir, self.rank), progress._asdict())

    def findings(self, result: OnlineResult) -> None:
        if self.rank != 0 or not result.findings:
            return
        with open(os.path.join(self.run_dir, layout.FINDINGS), "a", encoding="utf-8") as f:
            f.write("".join(json.dumps(x, default=str) + "\n" for x in result.findings))

    def close(self, timeout_s: float) -> None:
        self._file.flush()
        try:
            os.fsync(self._file.fileno())
        except OSError:
            pass
        self._file.close()
        if self.rank == 0:
            # Every rank wrote its identity at start; gather the hosts now.
            hosts = {}
            for path in glob.glob(os.path.join(self.run_dir, layout.RANKS_DIR, "rank-*[0-9].json")):
                try:
                    with open(path, encoding="utf-8") as f:
                        m = json.load(f)
                    hosts[str(m["rank"])] = m["node"]
                except (OSError, ValueError, KeyError):
                    continue
            self._run_meta["hosts"] = dict(sorted(hosts.items(), key=lambda kv: int(kv[0])))
            self._run_meta["end_time_s"] = time.time()
            layout.write_json_atomic(os.path.join(self.run_dir, layout.META), self._run_meta)

    def stats(self) -> dict[str, Any]:
        return {"lines": self.lines, "bytes": self.bytes}

    def describe(self) -> str | None:
        return f"run directory {self.run_dir}" if self.rank == 0 else None


def _line(r: StepRecord) -> str:
    scalars, nonfinite = _finite_scalars(r.scalars)
    obj = {
        "rank": r.rank, "step": r.step, "start_s": r.start_s, "duration_s": r.duration_s,
        "ok": r.ok, "phases": r.phases, "phase_comm": r.phase_comm, "comm_s": r.comm_s,
        "ops": {k: list(v) for k, v in r.ops.items()},
        "tokens": r.tokens, "samples": r.samples,
        "scalars": scalars,
        "spans": [list(s) for s in r.spans],
    }
    if nonfinite:
        obj["nonfinite"] = nonfinite
    if r.spans_dropped:
        obj["spans_dropped"] = r.spans_dropped
    if r.device:
        obj["device"] = r.device
    if r.mfu is not None:
        obj["mfu"] = r.mfu
    if r.host_duration_s is not None:
        obj["host_duration_s"] = r.host_duration_s
    return json.dumps(obj, separators=(",", ":")) + "\n"


def _finite_scalars(scalars: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """JSON has no NaN or infinity: such a value is written as null in ``scalars`` and named in
    ``nonfinite`` ({"loss": "nan"}), from which the reader restores it. A diverged loss is data."""
    bad = {k: repr(v) for k, v in scalars.items() if type(v) is float and not math.isfinite(v)}
    if not bad:
        return scalars, {}
    return {k: (None if k in bad else v) for k, v in scalars.items()}, bad
